package dev.snowmint.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Serves unbuffered {@code nextId()} calls: every caller waiting while a call is in flight is
 * served by the next call, one {@code BatchIds} for all of them ({@code NextId} for one), so a
 * burst of callers costs a round trip, not one each. As the Rust client does; an optimization
 * beyond the client contract. One call asks for at most 4,096 IDs; a server whose
 * {@code --max-batch} is lower answers {@code INVALID_ARGUMENT}, and the client then asks for
 * half as many, until the server accepts: no caller sees that answer. A call has the latest of
 * its callers' deadlines (none if one of them has none), so it waits out a quota refusal's delay
 * only when one of its callers can use the wait.
 */
final class Coalescer {

    /** The most IDs one shared call asks for unless a server's {@code --max-batch} says less. */
    static final int MAX_COALESCED = 4096;

    private final EndpointPool pool;
    private final ArrayDeque<Waiter> waiting = new ArrayDeque<>();
    /** Whether a call is in flight; it takes the next waiters when it ends. */
    private boolean fetching;
    private int limit = MAX_COALESCED;

    /** A caller waiting for one ID, until its deadline ({@link EndpointPool#NO_DEADLINE} for none). */
    private record Waiter(CompletableFuture<Long> id, long deadline) {}

    Coalescer(EndpointPool pool) {
        this.pool = pool;
    }

    /**
     * One ID, waiting until {@code deadline} ({@link System#nanoTime()}) at most; without one
     * ({@link EndpointPool#NO_DEADLINE}), the shared call's attempts bound the wait.
     */
    CompletableFuture<Long> nextId(long deadline) {
        CompletableFuture<Long> id = new CompletableFuture<>();
        boolean start;
        synchronized (this) {
            waiting.add(new Waiter(id, deadline));
            start = !fetching;
            fetching = true;
        }
        if (start) {
            fetchForWaiting();
        }
        return deadline == EndpointPool.NO_DEADLINE ? id : Waits.bounded(id, deadline - System.nanoTime(), true);
    }

    /** One call for every caller waiting now; when it ends, the same for those who came since. */
    private void fetchForWaiting() {
        List<Waiter> callers = new ArrayList<>();
        long deadline = EndpointPool.NO_DEADLINE;
        synchronized (this) {
            while (callers.size() < limit && !waiting.isEmpty()) {
                Waiter caller = waiting.poll();
                if (!caller.id().isDone()) { // not timed out or cancelled meanwhile
                    deadline = callers.isEmpty() ? caller.deadline() : later(deadline, caller.deadline());
                    callers.add(caller);
                }
            }
            if (callers.isEmpty()) {
                fetching = false;
                return;
            }
        }
        CompletableFuture<long[]> call = callers.size() == 1
                ? pool.nextId(deadline)
                : pool.fetch(callers.size(), deadline);
        call.whenComplete((ids, error) -> {
            if (error instanceof SnowmintRejectedException rejected && callers.size() > 1
                    && rejected.status().getCode() == io.grpc.Status.Code.INVALID_ARGUMENT) {
                // Above the server's --max-batch: the same callers, in calls half as large.
                synchronized (this) {
                    limit = Math.max(1, callers.size() / 2);
                    for (int i = callers.size() - 1; i >= 0; i--) {
                        waiting.addFirst(callers.get(i));
                    }
                }
                fetchForWaiting();
                return;
            }
            for (int i = 0; i < callers.size(); i++) {
                if (error == null) {
                    callers.get(i).id().complete(ids[i]);
                } else {
                    callers.get(i).id().completeExceptionally(error);
                }
            }
            fetchForWaiting();
        });
    }

    /** The later of two deadlines ({@link System#nanoTime()}); none if either is none. */
    private static long later(long a, long b) {
        if (a == EndpointPool.NO_DEADLINE || b == EndpointPool.NO_DEADLINE) {
            return EndpointPool.NO_DEADLINE;
        }
        return b - a > 0 ? b : a;
    }
}
