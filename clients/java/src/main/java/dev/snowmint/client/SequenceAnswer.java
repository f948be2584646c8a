package dev.snowmint.client;

/**
 * A {@code NextValue} or {@code BatchValues} answer: its values (positive, increasing), and
 * whether the sequence is ordered (its values increase fleet-wide in the order calls are
 * answered, so a client never buffers them).
 */
record SequenceAnswer(long[] values, boolean ordered) {}
