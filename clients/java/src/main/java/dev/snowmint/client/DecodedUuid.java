package dev.snowmint.client;

import java.time.Instant;
import java.util.UUID;

/**
 * What a snowmint UUIDv7 carries, as {@link Layout#decodeUuid(UUID)} read it with a layout.
 *
 * @param uuid     the UUID
 * @param id       the 64-bit ID it was made from, in the layout (unsigned: see
 *                 {@link #idString()}); {@code layout.decode(id)} gives the same time, slot
 *                 and sequence
 * @param unixMs   its time field: the Unix millisecond at which the ID's tick starts
 * @param tick     the ID's time field: ticks since the layout's epoch
 * @param slot     the worker slot that minted it (the ID's worker field)
 * @param sequence the ID's sequence field
 * @param random   the random tail, the UUID's low 32 bits, as an unsigned value (0 to
 *                 2^32 - 1); it promises nothing about uniqueness (the other 96 bits do), it
 *                 only makes a UUID unguessable from its neighbours
 * @param layout   the layout it was read with
 */
public record DecodedUuid(UUID uuid, long id, long unixMs, long tick, long slot, long sequence, long random,
        Layout layout) {

    /** The ID in decimal, read as unsigned (an ID of a 64-bit layout may exceed {@link Long#MAX_VALUE}). */
    public String idString() {
        return Long.toUnsignedString(id);
    }

    /** The UUID's time. */
    public Instant instant() {
        return Instant.ofEpochMilli(unixMs);
    }

    /** The UUID's time as RFC 3339 in UTC with milliseconds, e.g. {@code 2026-01-01T00:00:00.001Z}. */
    public String time() {
        return Layout.rfc3339(unixMs);
    }
}
