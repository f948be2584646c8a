package dev.snowmint.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The local buffer of prefetched IDs. Refills ({@link BufferConfig#batch()} IDs each, at most
 * {@link BufferConfig#maxRefills()} in flight) start when fewer than
 * {@link BufferConfig#lowWater()} IDs are buffered or on their way. A batch older than
 * {@link BufferConfig#maxAge()} is dropped unused, so the IDs a process hands out stay roughly
 * time-sorted.
 *
 * <p>Every ID leaves the buffer once, under its lock: handed to one caller, or dropped with its
 * batch. Refills are driven by demand only: after a failed refill nothing is fetched until a
 * caller asks again, so a buffer whose servers are all down costs nothing in the background.
 */
final class PrefetchBuffer {

    /** Marks "no ID buffered"; server IDs always have the sign bit clear. */
    static final long EMPTY = -1;

    /** One fetched batch, handed out from {@code next} on. */
    private static final class Batch {
        final long[] ids;
        final long arrivedNanos;
        int next;

        Batch(long[] ids, long arrivedNanos) {
            this.ids = ids;
            this.arrivedNanos = arrivedNanos;
        }
    }

    private final EndpointPool pool;
    private final BufferConfig config;
    private final long maxAgeNanos;
    /** Oldest first (batches are appended as they arrive). */
    private final ArrayDeque<Batch> batches = new ArrayDeque<>();
    /** Callers that found the buffer empty, served first by the next batch. */
    private final ArrayDeque<CompletableFuture<Long>> waiting = new ArrayDeque<>();
    /** IDs in {@code batches}. */
    private long buffered;
    /** Refills in flight. */
    private int refilling;

    PrefetchBuffer(EndpointPool pool, BufferConfig config) {
        this.pool = pool;
        this.config = config;
        this.maxAgeNanos = config.maxAge().toNanos();
        int refills;
        synchronized (this) {
            refills = refillsToStart();
        }
        startRefills(refills);
    }

    /** An ID from the buffer at once, or {@link #EMPTY}. */
    long poll() {
        long id;
        int refills;
        synchronized (this) {
            id = take(System.nanoTime());
            refills = refillsToStart();
        }
        startRefills(refills);
        return id;
    }

    /** An ID from the buffer, or from the next batch to arrive when the buffer is empty. */
    CompletableFuture<Long> next() {
        long id;
        CompletableFuture<Long> waiter = null;
        int refills;
        synchronized (this) {
            id = take(System.nanoTime());
            if (id == EMPTY) {
                waiter = new CompletableFuture<>();
                waiting.add(waiter);
            }
            refills = refillsToStart();
        }
        startRefills(refills);
        return waiter == null ? CompletableFuture.completedFuture(id) : waiter;
    }

    /** Pops one ID, dropping the front batches past their age or used up. Holds the lock. */
    private long take(long now) {
        Batch front;
        while ((front = batches.peekFirst()) != null) {
            int left = front.ids.length - front.next;
            if (left > 0 && now - front.arrivedNanos <= maxAgeNanos) {
                buffered--;
                return front.ids[front.next++];
            }
            batches.pollFirst();
            buffered -= left;
        }
        return EMPTY;
    }

    /** How many refills to start now, counted as in flight. Holds the lock. */
    private int refillsToStart() {
        int start = 0;
        while (refilling < config.maxRefills()
                && buffered + (long) refilling * config.batch() <= config.lowWater()) {
            refilling++;
            start++;
        }
        return start;
    }

    private void startRefills(int count) {
        for (int i = 0; i < count; i++) {
            pool.fetch(config.batch()).whenComplete(this::arrived);
        }
    }

    /** A refill ended: serve the waiting callers first, then buffer the rest. */
    private void arrived(long[] ids, Throwable error) {
        List<CompletableFuture<Long>> served = new ArrayList<>();
        List<Long> servedIds = new ArrayList<>();
        List<CompletableFuture<Long>> failed = new ArrayList<>();
        int refills = 0;
        synchronized (this) {
            refilling--;
            if (error == null) {
                Batch batch = new Batch(ids, System.nanoTime());
                CompletableFuture<Long> caller;
                while (batch.next < ids.length && (caller = waiting.poll()) != null) {
                    if (!caller.isDone()) { // not cancelled meanwhile
                        served.add(caller);
                        servedIds.add(ids[batch.next++]);
                    }
                }
                if (batch.next < ids.length) {
                    batches.addLast(batch);
                    buffered += ids.length - batch.next;
                }
                refills = refillsToStart();
            } else if (refilling == 0) {
                // No other refill may serve them: they get this one's error.
                failed.addAll(waiting);
                waiting.clear();
            }
        }
        for (int i = 0; i < served.size(); i++) {
            served.get(i).complete(servedIds.get(i));
        }
        for (CompletableFuture<Long> caller : failed) {
            caller.completeExceptionally(error);
        }
        startRefills(refills);
    }
}
