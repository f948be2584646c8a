package dev.snowmint.client;

import java.time.Duration;
import java.util.Objects;

/**
 * The settings of the client's local buffer of prefetched IDs. With a buffer, {@code nextId()}
 * usually returns at once, from IDs fetched in the background; the age limit keeps the IDs a
 * process hands out roughly time-sorted.
 *
 * @param batch      IDs asked for per refill (one {@code BatchIds} call)
 * @param lowWater   a refill starts when fewer IDs than this are buffered or on their way
 * @param maxRefills refills in flight at once, to keep up with heavy use
 * @param maxAge     a buffered batch older than this is dropped unused (a gap, never a
 *                   duplicate: dropped IDs are never handed out)
 */
public record BufferConfig(int batch, int lowWater, int maxRefills, Duration maxAge) {

    /** Checks the settings. */
    public BufferConfig {
        Objects.requireNonNull(maxAge, "maxAge");
        if (batch < 1 || lowWater < 0 || maxRefills < 1 || maxAge.isNegative() || maxAge.isZero()) {
            throw new IllegalArgumentException(String.format(
                    "buffer settings out of range: batch %d (at least 1), lowWater %d (at least 0), "
                            + "maxRefills %d (at least 1), maxAge %s (positive)",
                    batch, lowWater, maxRefills, maxAge));
        }
    }

    /** The defaults, as the Rust client's: batch 4096, lowWater 8192, maxRefills 3, maxAge 1 s. */
    public static BufferConfig defaults() {
        return new BufferConfig(4096, 8192, 3, Duration.ofSeconds(1));
    }

    /** These settings with another batch size. */
    public BufferConfig withBatch(int batch) {
        return new BufferConfig(batch, lowWater, maxRefills, maxAge);
    }

    /** These settings with another low-water mark. */
    public BufferConfig withLowWater(int lowWater) {
        return new BufferConfig(batch, lowWater, maxRefills, maxAge);
    }

    /** These settings with another number of refills in flight. */
    public BufferConfig withMaxRefills(int maxRefills) {
        return new BufferConfig(batch, lowWater, maxRefills, maxAge);
    }

    /** These settings with another age limit. */
    public BufferConfig withMaxAge(Duration maxAge) {
        return new BufferConfig(batch, lowWater, maxRefills, maxAge);
    }
}
