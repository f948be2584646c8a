package dev.snowmint.client;

import io.grpc.Status;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * The local buffer of prefetched IDs. It refills at the rate IDs are used, by the rule of
 * clients/README.md, the same in every client ({@code lead = maxAge / 4}):
 *
 * <ul>
 *   <li>rate: IDs handed out per second, in windows of at least a lead;
 *   <li>a refill is sent when, after dropping the stale batches, the IDs still fresh a lead
 *       from now plus those asked for by refills in flight are at most
 *       {@code mark = min(lowWater, rate * lead)} (or fewer than the callers waiting), fewer than
 *       {@code maxRefills} are in flight, none failed in the last 100 ms, and a caller waits or
 *       {@code mark >= 1}; it asks for {@code min(batch, max(rate * maxAge, mark + 1, callers
 *       waiting))} IDs;
 *   <li>the decision is made when a caller finds the buffer empty, when a pop leaves
 *       {@code mark} or fewer buffered and on their way, when a refill ends, and a lead before
 *       the oldest batch goes stale.
 * </ul>
 *
 * <p>A batch's age counts from when its refill was sent (every ID in it was minted after).
 * Every ID leaves the buffer once, under its lock: handed to one caller, or dropped with its
 * batch. A refill the server refuses for its count ({@code INVALID_ARGUMENT}) is sent again for
 * half as many; one that fails otherwise fails the callers waiting, and no refill starts for
 * 100 ms after it, so callers looping on a down fleet do not hammer it.
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

        int left() {
            return ids.length - next;
        }
    }

    private final EndpointPool pool;
    private final BufferConfig config;
    private final long maxAgeNanos;
    private final long leadNanos;
    /** By when their refills were sent, oldest first. */
    private final ArrayDeque<Batch> batches = new ArrayDeque<>();
    /** Callers that found the buffer empty, served first by the next batch. */
    private final ArrayDeque<CompletableFuture<Long>> waiting = new ArrayDeque<>();
    /** IDs in {@code batches}. */
    private long buffered;
    /** Refills in flight, and the IDs they asked for. */
    private int refilling;
    private long asked;
    /** IDs handed out; the rate window: when it began, and {@code taken} then. */
    private long taken;
    private long windowStart = System.nanoTime();
    private long windowTaken;
    /** IDs per second as of the last decision, and that decision's mark. */
    private double rate;
    private long mark;
    /** Pops left before a decision is due. */
    private long countdown;
    /** The most a refill asks for: {@code batch}, halved by each {@code INVALID_ARGUMENT}. */
    private int limit;
    /** No refill starts before this ({@link System#nanoTime()}), after a failed one. */
    private long pausedUntil;
    private boolean paused;
    /** The next decision, a lead before the oldest batch goes stale, and when it is due. */
    private ScheduledFuture<?> timer;
    private long timerAt;
    private boolean closed;

    PrefetchBuffer(EndpointPool pool, BufferConfig config) {
        this.pool = pool;
        this.config = config;
        this.maxAgeNanos = config.maxAge().toNanos();
        this.leadNanos = maxAgeNanos / 4;
        this.limit = config.batch();
    }

    /** An ID from the buffer at once, or {@link #EMPTY}. Kept small: the callers' hot path. */
    long poll() {
        long id;
        boolean due;
        synchronized (this) {
            id = take(System.nanoTime());
            due = id != EMPTY && --countdown <= 0;
        }
        if (due) {
            decideNow();
        }
        return id;
    }

    /** A decision on the pop path, once the countdown ran out. */
    private void decideNow() {
        List<Integer> refills;
        synchronized (this) {
            refills = decide(System.nanoTime());
        }
        send(refills);
    }

    /**
     * An ID from the buffer, or from the next batch to arrive when the buffer is empty, waiting
     * until {@code deadline} ({@link System#nanoTime()}) or, without one
     * ({@link EndpointPool#NO_DEADLINE}), as long as one unbuffered call could take.
     */
    CompletableFuture<Long> next(long deadline) {
        long id;
        CompletableFuture<Long> waiter = null;
        List<Integer> refills = List.of();
        synchronized (this) {
            if (closed) {
                return CompletableFuture.failedFuture(EndpointPool.closedError());
            }
            long now = System.nanoTime();
            id = take(now);
            if (id == EMPTY) {
                waiter = new CompletableFuture<>();
                waiting.add(waiter);
                refills = decide(now);
            } else if (--countdown <= 0) {
                refills = decide(now);
            }
        }
        send(refills);
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
            int left = front.left();
            if (left > 0 && now - front.sentNanos < maxAgeNanos) {
                buffered--;
                taken++;
                return front.ids[front.next++];
            }
            batches.pollFirst();
            buffered -= left;
        }
        return EMPTY;
    }

    /** The rate rule: windows of at least a lead; a window under way raises the rate once its own count says more. */
    private void measure(long now) {
        long elapsed = now - windowStart;
        double count = taken - windowTaken;
        if (elapsed >= leadNanos) {
            rate = count * 1e9 / elapsed;
            windowStart = now;
            windowTaken = taken;
        } else {
            rate = Math.max(rate, count * 1e9 / leadNanos);
        }
    }

    /**
     * The sizes of the refills to send now (counted in flight), after which it sets the timer of
     * the next decision. Holds the lock.
     */
    private List<Integer> decide(long now) {
        if (closed) {
            return List.of();
        }
        Batch front;
        while ((front = batches.peekFirst()) != null && now - front.sentNanos >= maxAgeNanos) {
            batches.pollFirst();
            buffered -= front.left();
        }
        measure(now);
        waiting.removeIf(CompletableFuture::isDone);
        int callers = waiting.size();
        mark = Math.min(config.lowWater(), (long) (rate * leadNanos / 1e9));
        long ahead = asked;
        for (Batch batch : batches) {
            if (batch.sentNanos + maxAgeNanos - (now + leadNanos) > 0) {
                ahead += batch.left();
            }
        }
        if (paused && now - pausedUntil >= 0) {
            paused = false;
        }
        // Fetch ahead only when an ID will be used within the lead; else a prefetched ID would
        // mostly go stale unused.
        boolean wanted = (callers > 0 || mark >= 1) && !paused;
        List<Integer> refills = new ArrayList<>();
        while (wanted && refilling < config.maxRefills() && (ahead <= mark || ahead < callers)) {
            long byRate = (long) Math.ceil(rate * maxAgeNanos / 1e9);
            int n = (int) Math.max(1, Math.min(limit, Math.max(byRate, Math.max(mark + 1, callers - ahead))));
            refills.add(n);
            refilling++;
            asked += n;
            ahead += n;
        }
        // Pops before the next decision: until the mark is reached; none while every refill is
        // in flight (the next to end decides).
        countdown = refilling >= config.maxRefills() ? Long.MAX_VALUE : Math.max(1, buffered + asked - mark);
        long wakeAt = 0;
        boolean wake = false;
        for (Batch batch : batches) {
            long at = batch.sentNanos + maxAgeNanos - leadNanos;
            if (at - now > 0) {
                wakeAt = at;
                wake = true;
                break;
            }
        }
        if (callers > 0 && paused && (!wake || pausedUntil - wakeAt < 0)) {
            wakeAt = pausedUntil;
            wake = true;
        }
        if (wake && (timer == null || wakeAt - timerAt < 0)) {
            if (timer != null) {
                timer.cancel(false);
            }
            timerAt = wakeAt;
            timer = Timers.after(wakeAt - now, this::onTimer);
        }
        return refills;
    }

    private void onTimer() {
        List<Integer> refills;
        synchronized (this) {
            timer = null;
            refills = decide(System.nanoTime());
        }
        send(refills);
    }

    private void send(List<Integer> refills) {
        for (int n : refills) {
            long sent = System.nanoTime();
            pool.fetch(n, EndpointPool.NO_DEADLINE).whenComplete((ids, error) -> ended(n, sent, ids, error));
        }
    }

    /** A refill ended: serve the waiting callers first, then buffer the rest; or fail them. */
    private void ended(int n, long sent, long[] ids, Throwable error) {
        List<CompletableFuture<Long>> served = new ArrayList<>();
        List<Long> servedIds = new ArrayList<>();
        List<CompletableFuture<Long>> failed = new ArrayList<>();
        Throwable cause = error != null && error.getCause() != null && !(error instanceof SnowmintException)
                ? error.getCause()
                : error;
        List<Integer> refills;
        synchronized (this) {
            refilling--;
            asked -= n;
            if (closed) {
                return;
            }
            long now = System.nanoTime();
            if (ids != null) {
                Batch batch = new Batch(ids, sent);
                CompletableFuture<Long> caller;
                while (batch.next < ids.length && (caller = waiting.poll()) != null) {
                    if (!caller.isDone()) { // not timed out or cancelled meanwhile
                        served.add(caller);
                        servedIds.add(ids[batch.next++]);
                        taken++;
                    }
                }
                if (batch.next < ids.length) {
                    insert(batch);
                    buffered += batch.left();
                }
            } else if (cause instanceof SnowmintRejectedException rejected && n > 1
                    && rejected.status().getCode() == Status.Code.INVALID_ARGUMENT) {
                // Above the server's --max-batch: ask for half as many from now on.
                limit = Math.max(1, Math.min(limit, n / 2));
            } else {
                failed.addAll(waiting);
                waiting.clear();
                paused = true;
                pausedUntil = now + RETRY_PAUSE_NANOS;
            }
            refills = decide(now);
        }
        for (int i = 0; i < served.size(); i++) {
            served.get(i).complete(servedIds.get(i));
        }
        for (CompletableFuture<Long> caller : failed) {
            caller.completeExceptionally(cause);
        }
        send(refills);
    }

    /** Inserts a batch by when its refill was sent. Holds the lock. */
    private void insert(Batch batch) {
        if (batches.isEmpty() || batches.peekLast().sentNanos - batch.sentNanos <= 0) {
            batches.addLast(batch);
            return;
        }
        ArrayDeque<Batch> later = new ArrayDeque<>();
        Iterator<Batch> newest = batches.descendingIterator();
        while (newest.hasNext()) {
            Batch b = newest.next();
            if (b.sentNanos - batch.sentNanos <= 0) {
                break;
            }
            later.addFirst(b);
            newest.remove();
        }
        batches.addLast(batch);
        batches.addAll(later);
    }

    /** Fails the callers waiting with the closed error and drops every batch. */
    void close() {
        List<CompletableFuture<Long>> failed;
        synchronized (this) {
            closed = true;
            if (timer != null) {
                timer.cancel(false);
            }
            batches.clear();
            buffered = 0;
            failed = new ArrayList<>(waiting);
            waiting.clear();
        }
        failed.forEach(caller -> caller.completeExceptionally(EndpointPool.closedError()));
    }
}
