package dev.snowmint.client;

import io.grpc.Status;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;

/**
 * The prefetch buffer of named sequences ({@link SnowmintClient.Builder#sequencePrefetch(int)}),
 * the contract of clients/README.md: per sequence, values fetched ahead by one
 * {@code BatchValues} and handed out one by one by {@code nextValue()}.
 *
 * <p>A caller that finds a sequence's buffer empty refills it; callers that come meanwhile wait
 * for that refill (each within its own deadline), then take what it left, so no two calls
 * refill one sequence at once and no value goes to two callers. Until an answer has said
 * whether the sequence is ordered, a refill is one {@code NextValue}; an unordered sequence is
 * refilled by {@code BatchValues(n)}; an ordered one is never buffered (its values increase
 * fleet-wide in the order calls are answered, which buffering would break), so its callers
 * make one {@code NextValue} each. A refill that fails fails with the error the direct call
 * would; the next caller tries again. A batch answered {@code OUT_OF_RANGE} (fewer values left
 * than asked for) is followed by one {@code NextValue}, so the last values of a sequence are
 * still handed out. {@code NOT_FOUND} forgets whether the sequence is ordered: it may be
 * created again otherwise.
 */
final class SequencePrefetch {

    /** The most values one refill asks for: the server's default {@code --max-batch}. */
    static final int MAX = 65536;

    private final EndpointPool pool;
    private final int perRefill;
    private final ConcurrentHashMap<String, Sequence> sequences = new ConcurrentHashMap<>();

    /** One sequence's buffer; every field guarded by the object's monitor. */
    private static final class Sequence {
        /** Null until an answer said. */
        Boolean ordered;
        /** Fetched, not yet handed out from {@code head} on (increasing within a refill). */
        long[] values = new long[0];
        int head;
        /** The refill under way, completed (never exceptionally) when it ends. */
        CompletableFuture<Void> refill;

        void learn(SequenceAnswer answer) {
            ordered = answer.ordered();
        }

        void failed(Throwable error) {
            if (error instanceof SnowmintRejectedException rejected
                    && rejected.status().getCode() == Status.Code.NOT_FOUND) {
                ordered = null;
            }
        }
    }

    SequencePrefetch(EndpointPool pool, int perRefill) {
        this.pool = pool;
        this.perRefill = perRefill;
    }

    /** Checks the builder's setting: 0 (off) to {@link #MAX}. */
    static int check(int perRefill) {
        if (perRefill < 0 || perRefill > MAX) {
            throw new IllegalArgumentException("sequencePrefetch must be 0 (off) to " + MAX
                    + ", the server's default --max-batch, got " + perRefill);
        }
        return perRefill;
    }

    CompletableFuture<Long> nextValue(String name, long deadline) {
        Sequence sequence = sequences.computeIfAbsent(name, n -> new Sequence());
        CompletableFuture<Long> result = new CompletableFuture<>();
        if (deadline != EndpointPool.NO_DEADLINE) {
            ScheduledFuture<?> timer = Timers.after(deadline - System.nanoTime(),
                    () -> result.completeExceptionally(EndpointPool.deadlinePassed()));
            result.whenComplete((value, error) -> timer.cancel(false));
        }
        take(sequence, name, deadline, result);
        return result;
    }

    private enum Step { ONE, REFILL_ONE, REFILL_BATCH, WAIT }

    private void take(Sequence sequence, String name, long deadline, CompletableFuture<Long> result) {
        Step step;
        CompletableFuture<Void> waitFor = null;
        synchronized (sequence) {
            if (result.isDone()) {
                return; // past its deadline, or cancelled
            }
            if (pool.isClosed()) {
                result.completeExceptionally(EndpointPool.closedError()); // values left buffered are a gap
                return;
            }
            if (Boolean.TRUE.equals(sequence.ordered)) {
                step = Step.ONE;
            } else if (sequence.head < sequence.values.length) {
                result.complete(sequence.values[sequence.head++]);
                return;
            } else if (sequence.refill != null) {
                step = Step.WAIT;
                waitFor = sequence.refill;
            } else {
                sequence.refill = new CompletableFuture<>();
                step = sequence.ordered == null ? Step.REFILL_ONE : Step.REFILL_BATCH;
            }
        }
        switch (step) {
            case WAIT -> waitFor.whenComplete((ignored, error) -> take(sequence, name, deadline, result));
            case ONE -> one(sequence, name, deadline).whenComplete((value, error) -> settle(result, value, error));
            case REFILL_ONE -> one(sequence, name, deadline).whenComplete((value, error) -> {
                ended(sequence);
                settle(result, value, error);
            });
            case REFILL_BATCH -> pool.fetchValues(name, perRefill, deadline).whenComplete((answer, error) -> {
                Throwable cause = unwrap(error);
                if (cause instanceof SnowmintRejectedException rejected
                        && rejected.status().getCode() == Status.Code.OUT_OF_RANGE) {
                    one(sequence, name, deadline).whenComplete((value, again) -> {
                        ended(sequence);
                        settle(result, value, again);
                    });
                    return;
                }
                Long first = null;
                synchronized (sequence) {
                    if (cause != null) {
                        sequence.failed(cause);
                    } else {
                        // Values of a batch answered ordered (the sequence made ordered since)
                        // are still this client's alone: handed out from here, never twice.
                        sequence.learn(answer);
                        sequence.values = answer.values();
                        // A caller whose deadline passed meanwhile leaves the first value to
                        // the next one.
                        sequence.head = result.isDone() ? 0 : 1;
                        first = answer.values()[0];
                    }
                }
                ended(sequence);
                settle(result, first, cause);
            });
        }
    }

    /** One {@code NextValue}, learning from its answer. */
    private CompletableFuture<Long> one(Sequence sequence, String name, long deadline) {
        return pool.nextValue(name, deadline).handle((answer, error) -> {
            Throwable cause = unwrap(error);
            synchronized (sequence) {
                if (cause != null) {
                    sequence.failed(cause);
                } else {
                    sequence.learn(answer);
                }
            }
            if (cause != null) {
                throw cause instanceof RuntimeException e ? e : new CompletionException(cause);
            }
            return answer.values()[0];
        });
    }

    /** Ends the refill under way, so the callers waiting on it take what it left or refill. */
    private static void ended(Sequence sequence) {
        CompletableFuture<Void> refill;
        synchronized (sequence) {
            refill = sequence.refill;
            sequence.refill = null;
        }
        refill.complete(null);
    }

    private static void settle(CompletableFuture<Long> result, Long value, Throwable error) {
        if (error != null) {
            result.completeExceptionally(unwrap(error));
        } else {
            result.complete(value);
        }
    }

    private static Throwable unwrap(Throwable error) {
        return error instanceof CompletionException c && c.getCause() != null ? c.getCause() : error;
    }
}
