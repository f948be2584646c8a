package dev.snowmint.client;

import java.time.Instant;

/**
 * The fields of one ID, as {@link Layout#decode(long)} read them.
 *
 * @param id       the ID (unsigned: see {@link #idString()})
 * @param unixMs   the start of the ID's tick, in Unix milliseconds
 * @param tick     the time field: ticks since the layout's epoch
 * @param workerId the worker (or shard, or machine) that minted it
 * @param sequence the counter within its tick
 * @param layout   the layout it was read with
 */
public record DecodedId(long id, long unixMs, long tick, long workerId, long sequence, Layout layout) {

    /** The ID in decimal, read as unsigned (a Discord ID may exceed {@link Long#MAX_VALUE}). */
    public String idString() {
        return Long.toUnsignedString(id);
    }

    /** The ID's time. */
    public Instant instant() {
        return Instant.ofEpochMilli(unixMs);
    }

    /** The ID's time as RFC 3339 in UTC with milliseconds, e.g. {@code 2026-01-01T00:00:00.001Z}. */
    public String time() {
        return Layout.rfc3339(unixMs);
    }
}
