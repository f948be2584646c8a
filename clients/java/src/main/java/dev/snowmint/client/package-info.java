/**
 * The Java client of snowmint, a service that mints unique, roughly time-sorted 64-bit IDs.
 *
 * <p>{@link dev.snowmint.client.SnowmintClient} gets IDs (failover across endpoints, an
 * optional prefetch buffer); {@link dev.snowmint.client.Layout} decodes them, and other
 * systems' IDs, without a server.
 *
 * <p>UUIDv7s: {@link dev.snowmint.client.SnowmintClient#nextUuid()} and
 * {@link dev.snowmint.client.SnowmintClient#batchUuids(int)} (with {@code Duration} and
 * {@code Async} forms, failing over as {@code batch} does) get RFC 9562 UUIDv7s as
 * {@link java.util.UUID}s, each made from one newly minted ID, so unique as the IDs are, and
 * strictly increasing within a batch. {@link dev.snowmint.client.Uuids#parseUuid(String)} reads
 * their text strictly (36 characters, 8-4-4-4-12 hex digits of either case, nothing else; unlike
 * {@link java.util.UUID#fromString(String)}), {@link dev.snowmint.client.Uuids#formatUuid(java.util.UUID)}
 * writes it in lower case, and {@link dev.snowmint.client.Uuids#ORDER} orders UUIDs as unsigned
 * 128-bit numbers. {@link dev.snowmint.client.Layout#decodeUuid(java.util.UUID)} reads, without a
 * server, the ID a UUID was made from, its time, slot, sequence and random tail, or says why
 * snowmint could not have minted it with that layout
 * ({@link dev.snowmint.client.InvalidUuidException#kind()}).
 *
 * <pre>{@code
 * UUID uuid = client.nextUuid();
 * DecodedUuid decoded = Layout.snowmint().decodeUuid(uuid);   // decoded.id(), .time(), .slot()
 * UUID same = Uuids.parseUuid(uuid.toString());
 * }</pre>
 */
package dev.snowmint.client;
