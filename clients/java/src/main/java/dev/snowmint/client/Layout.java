package dev.snowmint.client;

import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.Objects;
import java.util.UUID;

/**
 * The bit layout of an ID: the epoch, the tick length, the widths of the time, worker and
 * sequence fields, and the order of the two low fields. Decoding needs no server: an ID carries
 * everything, given its layout.
 *
 * <p>Fields run most significant first: time, then worker and sequence in {@link #order()}.
 * Bits above the three fields must be zero, so for snowmint's layouts (63 bits) the sign bit is
 * always clear. Layouts of other systems may use all 64 bits (Discord's does): their IDs above
 * {@link Long#MAX_VALUE} arrive here as negative {@code long}s and are read as unsigned.
 *
 * <p>The same layout reads snowmint's UUIDv7s ({@link #decodeUuid(UUID)}): each is made from
 * one ID, whose time, worker slot and sequence it carries.
 *
 * @param name         {@code snowmint} for snowmint's own layouts, or a preset's name
 * @param epochMs      Unix milliseconds at which tick 0 starts
 * @param tickMs       the length of one tick in milliseconds (at least 1)
 * @param timeBits     width of the time field
 * @param workerBits   width of the worker field (0 to 32)
 * @param sequenceBits width of the sequence field (0 to 32)
 * @param order        the order of the two low fields
 */
public record Layout(
        String name, long epochMs, long tickMs, int timeBits, int workerBits, int sequenceBits, Order order) {

    /** The order of the two fields below the time field. */
    public enum Order {
        /** {@code time | worker | sequence}: snowmint, Twitter, Discord, Instagram. */
        WORKER_SEQUENCE,
        /** {@code time | sequence | worker}: Sonyflake. */
        SEQUENCE_WORKER
    }

    /** snowmint's default epoch, 2026-01-01T00:00:00Z, in Unix milliseconds. */
    public static final long DEFAULT_EPOCH_MS = 1_767_225_600_000L;

    /** The names {@link #named(String)} accepts. */
    public static final List<String> NAMES = List.of("snowmint", "twitter", "discord", "instagram", "sonyflake");

    /** The width of the sequence in a UUID's 42-bit minted field; the slot has the other 20. */
    private static final int UUID_SEQUENCE_BITS = 22;

    private static final DateTimeFormatter RFC3339_MS =
            DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSX").withZone(ZoneOffset.UTC);

    /** Checks the widths, so that every layout that exists can decode. */
    public Layout {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(order, "order");
        if (tickMs < 1) {
            throw new IllegalArgumentException("the tick must be at least 1 ms, got " + tickMs);
        }
        if (timeBits < 1 || workerBits < 0 || workerBits > 32 || sequenceBits < 0 || sequenceBits > 32) {
            throw new IllegalArgumentException(String.format(
                    "widths out of range: time %d (at least 1), worker %d and sequence %d (0 to 32 each)",
                    timeBits, workerBits, sequenceBits));
        }
        if (timeBits + workerBits + sequenceBits > 64) {
            throw new IllegalArgumentException(String.format(
                    "time, worker and sequence bits must fit 64 bits, got %d + %d + %d",
                    timeBits, workerBits, sequenceBits));
        }
    }

    /** snowmint's default layout: epoch 2026-01-01, 41 bits of ms, 10 of worker, 12 of sequence. */
    public static Layout snowmint() {
        return snowmint(DEFAULT_EPOCH_MS, 10, 12);
    }

    /**
     * A snowmint layout as configured on the server ({@code --epoch}, {@code --worker-bits},
     * {@code --sequence-bits}): 1 ms ticks, and the time field takes the rest of the 63 bits.
     */
    public static Layout snowmint(long epochMs, int workerBits, int sequenceBits) {
        return new Layout("snowmint", epochMs, 1, 63 - workerBits - sequenceBits, workerBits, sequenceBits,
                Order.WORKER_SEQUENCE);
    }

    /**
     * A layout by name: {@code snowmint} (the default) or another system's, to read its IDs:
     * {@code twitter}, {@code discord} (its 5-bit worker and 5-bit process read as one 10-bit
     * worker), {@code instagram} (the 13-bit shard as the worker) and {@code sonyflake} (10 ms
     * ticks, the sequence above the 16-bit machine ID).
     *
     * @throws IllegalArgumentException for an unknown name, listing the known ones
     */
    public static Layout named(String name) {
        return switch (name) {
            case "snowmint" -> snowmint();
            case "twitter" -> new Layout(name, 1_288_834_974_657L, 1, 41, 10, 12, Order.WORKER_SEQUENCE);
            case "discord" -> new Layout(name, 1_420_070_400_000L, 1, 42, 10, 12, Order.WORKER_SEQUENCE);
            case "instagram" -> new Layout(name, 1_314_220_021_721L, 1, 41, 13, 10, Order.WORKER_SEQUENCE);
            case "sonyflake" -> new Layout(name, 1_409_529_600_000L, 10, 39, 16, 8, Order.SEQUENCE_WORKER);
            default -> throw new IllegalArgumentException(
                    "unknown layout \"" + name + "\"; known layouts: " + String.join(", ", NAMES));
        };
    }

    /**
     * Splits an ID into its time, worker and sequence. An ID of a 64-bit layout above
     * {@link Long#MAX_VALUE} is passed as its two's-complement {@code long}, as
     * {@link Long#parseUnsignedLong(String)} returns it.
     *
     * @throws IllegalArgumentException when the ID has bits set above the layout's fields (for
     *     snowmint's layouts: the sign bit), so it cannot be an ID of this layout
     */
    public DecodedId decode(long id) {
        int total = timeBits + workerBits + sequenceBits;
        if (total < 64 && id >>> total != 0) {
            throw new IllegalArgumentException(String.format(
                    "id %s has bits set above the %d bits of layout %s",
                    Long.toUnsignedString(id), total, name));
        }
        int timeShift = workerBits + sequenceBits;
        int workerShift = order == Order.WORKER_SEQUENCE ? sequenceBits : 0;
        int sequenceShift = order == Order.WORKER_SEQUENCE ? 0 : workerBits;
        long tick = (id >>> timeShift) & mask(timeBits);
        long worker = (id >>> workerShift) & mask(workerBits);
        long sequence = (id >>> sequenceShift) & mask(sequenceBits);
        // Exact for every tick up to 2^63 ms past the epoch, which no layout here reaches;
        // overflow would be a layout error, so it is reported rather than wrapped.
        long unixMs = Math.addExact(epochMs, Math.multiplyExact(tick, tickMs));
        return new DecodedId(id, unixMs, tick, worker, sequence, this);
    }

    /**
     * What a snowmint UUIDv7 carries, when snowmint could have minted it with this layout: the
     * ID it was made from, its time, slot, sequence and random tail. Needs no server, and reads
     * as the server's {@code Decode} does. Checked in this order (bit 127 is the most
     * significant bit of {@link UUID#getMostSignificantBits()}):
     * <ol>
     *   <li>the version, bits 79 to 76, is 7 (else {@link InvalidUuidException.Kind#VERSION});
     *   <li>the variant, bits 63 and 62, is {@code 0b10} ({@link InvalidUuidException.Kind#VARIANT});
     *   <li>the 42-bit minted field, bits 75 to 64 then 61 to 32, holds the slot in its top 20
     *       bits and the sequence in its low 22: they must fit this layout's worker and
     *       sequence fields ({@link InvalidUuidException.Kind#FIELDS});
     *   <li>the time, bits 127 to 80 (Unix milliseconds), is the start of one of this layout's
     *       ticks: not before its epoch, a whole number of ticks after it, and not past its
     *       last tick ({@link InvalidUuidException.Kind#TICK}).
     * </ol>
     * The ID is then the tick, slot and sequence packed in this layout's order; the random
     * tail is the low 32 bits.
     *
     * @throws InvalidUuidException (an {@link IllegalArgumentException}) when snowmint could
     *     not have minted {@code uuid} with this layout; {@link InvalidUuidException#kind()} says why
     */
    public DecodedUuid decodeUuid(UUID uuid) {
        long most = uuid.getMostSignificantBits();
        long least = uuid.getLeastSignificantBits();
        int version = (int) (most >>> 12) & 0xf;
        if (version != 7) {
            throw new InvalidUuidException(InvalidUuidException.Kind.VERSION,
                    uuid + " is not a UUIDv7: its version is " + version);
        }
        int variant = (int) (least >>> 62);
        if (variant != 0b10) {
            throw new InvalidUuidException(InvalidUuidException.Kind.VARIANT, uuid
                    + " is not an RFC 9562 UUID: its variant bits are 0b" + (variant >> 1) + (variant & 1) + ", not 0b10");
        }
        long unixMs = most >>> 16;
        long minted = (most & 0xfff) << 30 | (least >>> 32) & ((1L << 30) - 1);
        long slot = minted >>> UUID_SEQUENCE_BITS;
        long sequence = minted & ((1L << UUID_SEQUENCE_BITS) - 1);
        if (slot > mask(workerBits) || sequence > mask(sequenceBits)) {
            throw new InvalidUuidException(InvalidUuidException.Kind.FIELDS, String.format(
                    "%s was not minted by snowmint with layout %s: its slot %d or sequence %d does not fit the "
                            + "layout's %d worker and %d sequence bits",
                    uuid, name, slot, sequence, workerBits, sequenceBits));
        }
        // unixMs is below 2^48, so only an epoch near Long.MIN_VALUE could overflow: refused too.
        long since = unixMs - epochMs;
        if (unixMs < epochMs || since < 0 || since % tickMs != 0
                || Long.compareUnsigned(since / tickMs, mask(timeBits)) > 0) {
            throw new InvalidUuidException(InvalidUuidException.Kind.TICK, String.format(
                    "%s was not minted by snowmint with layout %s: its time %d is not the start of one of the "
                            + "layout's ticks", uuid, name, unixMs));
        }
        long tick = since / tickMs;
        int workerShift = order == Order.WORKER_SEQUENCE ? sequenceBits : 0;
        int sequenceShift = order == Order.WORKER_SEQUENCE ? 0 : workerBits;
        // timeBits is at least 1, so the shift is at most 63.
        long id = tick << (workerBits + sequenceBits) | slot << workerShift | sequence << sequenceShift;
        return new DecodedUuid(uuid, id, unixMs, tick, slot, sequence, least & 0xffff_ffffL, this);
    }

    /** Unix milliseconds as RFC 3339 in UTC with milliseconds, as the server's Decode writes it. */
    static String rfc3339(long unixMs) {
        return RFC3339_MS.format(Instant.ofEpochMilli(unixMs));
    }

    private static long mask(int bits) {
        return bits >= 64 ? -1L : (1L << bits) - 1;
    }
}
