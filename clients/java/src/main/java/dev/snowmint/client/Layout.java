package dev.snowmint.client;

import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.Objects;

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

    /** Unix milliseconds as RFC 3339 in UTC with milliseconds, as the server's Decode writes it. */
    static String rfc3339(long unixMs) {
        return RFC3339_MS.format(Instant.ofEpochMilli(unixMs));
    }

    private static long mask(int bits) {
        return bits >= 64 ? -1L : (1L << bits) - 1;
    }
}
