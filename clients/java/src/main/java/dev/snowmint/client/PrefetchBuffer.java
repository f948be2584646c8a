package dev.snowmint.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The local buffer of prefetched IDs. Refills ({@link BufferConfig#batch()} IDs each, at most
 * {@link BufferConfig#maxRefills()} in flight) start when the IDs buffered plus those on their
 * way are at or below {@link BufferConfig#lowWater()}. A batch older than
 * {@link BufferConfig#maxAge()}, counted from when its refill was sent (every ID in it was
 * minted after that), is dropped unused, so the IDs a process hands out stay roughly
 * time-sorted.
 *
 * <p>Every ID leaves the buffer once, under its lock: handed to one caller, or dropped with its
 * batch. A refill that fails on every endpoint fails the callers waiting, and no refill starts
 * for 100 ms after it, so callers looping on a down fleet do not hammer it.
 */
final class PrefetchBuffer {

    /** Marks "no ID buffered"; server IDs always have the sign bit clear. */
    static final long EMPTY = -1;

    private static final long RETRY_PAUSE_NANOS = TimeUnit.MILLISECONDS.toNanos(100);

    /** One fetched batch, handed out from {@code next} on. */
    private static final class Batch {
        final long[] ids;
        final long sentNanos;
        int next;

        Batch(long[] ids, long sentNanos) {
            this.ids = ids;
            this.sentNanos = sentNanos;
        }
    }

    private final EndpointPool pool;
    private final BufferConfig config;
    private final long maxAgeNanos;
    /** Oldest arrival first. */
    private final ArrayDeque<Batch> batches = new ArrayDeque<>();
    /** Callers that found the buffer empty, served first by the next batch. */
    private final ArrayDeque<CompletableFuture<Long>> waiting = new ArrayDeque<>();
    /** IDs in {@code batches}. */
    private long buffered;
    /** Refills in flight. */
    private int refilling;
    /** No refill starts before this ({@link System#nanoTime()}), after a failed one. */
    private long pausedUntil;
    private boolean paused;
    /** Whether a wake-up at the end of the pause is scheduled. */
    private boolean wakeScheduled;

    PrefetchBuffer(EndpointPool pool, BufferConfig config) {
        this.pool = pool;
        this.config = config;
        this.maxAgeNanos = config.maxAge().toNanos();
        wake();
    }

    /** An ID from the buffer at once, or {@link #EMPTY}. */
    long poll() {
        long id;
        int refills;
        synchronized (this) {
            long now = System.nanoTime();
            id = take(now);
            refills = refillsToStart(now);
        }
        startRefills(refills);
        return id;
    }

    /**
     * An ID from the buffer, or from the next batch to arrive when the buffer is empty, waiting
     * until {@code deadline} ({@link System#nanoTime()}) or, without one
     * ({@link EndpointPool#NO_DEADLINE}), as long as one unbuffered call could take.
     */
    CompletableFuture<Long> next(long deadline) {
        long id;
        CompletableFuture<Long> waiter = null;
        int refills;
        synchronized (this) {
            long now = System.nanoTime();
            id = take(now);
            if (id == EMPTY) {
                waiter = new CompletableFuture<>();
                waiting.add(waiter);
            }
            refills = refillsToStart(now);
        }
        startRefills(refills);
        if (waiter == null) {
            return CompletableFuture.completedFuture(id);
        }
        return deadline == EndpointPool.NO_DEADLINE
                ? Waits.bounded(waiter, pool.longestCallNanos(), false)
                : Waits.bounded(waiter, deadline - System.nanoTime(), true);
    }

    /** Pops one ID, dropping the front batches past their age or used up. Holds the lock. */
    private long take(long now) {
        Batch front;
        while ((front = batches.peekFirst()) != null) {
            int left = front.ids.length - front.next;
            if (left > 0 && now - front.sentNanos <= maxAgeNanos) {
                buffered--;
                return front.ids[front.next++];
            }
            batches.pollFirst();
            buffered -= left;
        }
        return EMPTY;
    }

    /** How many refills to start now, counted as in flight. Holds the lock. */
    private int refillsToStart(long now) {
        if (pool.isClosed()) {
            return 0;
        }
        if (paused && now - pausedUntil < 0) {
            if (!wakeScheduled && !waiting.isEmpty()) {
                // Someone is waiting: start their refill once the pause is over.
                wakeScheduled = true;
                CompletableFuture.delayedExecutor(pausedUntil - now, TimeUnit.NANOSECONDS).execute(this::wake);
            }
            return 0;
        }
        paused = false;
        int start = 0;
        while (refilling < config.maxRefills()
                && buffered + (long) refilling * config.batch() <= config.lowWater()) {
            refilling++;
            start++;
        }
        return start;
    }

    private void wake() {
        int refills;
        synchronized (this) {
            wakeScheduled = false;
            refills = refillsToStart(System.nanoTime());
        }
        startRefills(refills);
    }

    private void startRefills(int count) {
        for (int i = 0; i < count; i++) {
            long sent = System.nanoTime();
            pool.fetch(config.batch(), EndpointPool.NO_DEADLINE).whenComplete((ids, error) -> arrived(sent, ids, error));
        }
    }

    /** A refill ended: serve the waiting callers first, then buffer the rest; or fail them. */
    private void arrived(long sent, long[] ids, Throwable error) {
        List<CompletableFuture<Long>> served = new ArrayList<>();
        List<Long> servedIds = new ArrayList<>();
        List<CompletableFuture<Long>> failed = new ArrayList<>();
        int refills = 0;
        synchronized (this) {
            refilling--;
            long now = System.nanoTime();
            if (error == null) {
                Batch batch = new Batch(ids, sent);
                CompletableFuture<Long> caller;
                while (batch.next < ids.length && (caller = waiting.poll()) != null) {
                    if (!caller.isDone()) { // not timed out or cancelled meanwhile
                        served.add(caller);
                        servedIds.add(ids[batch.next++]);
                    }
                }
                if (batch.next < ids.length) {
                    batches.addLast(batch);
                    buffered += ids.length - batch.next;
                }
                refills = refillsToStart(now);
            } else {
                failed.addAll(waiting);
                waiting.clear();
                paused = true;
                pausedUntil = now + RETRY_PAUSE_NANOS;
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
