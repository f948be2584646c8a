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
 * half as many, until the server accepts: no caller sees that answer.
 */
final class Coalescer {

    /** The most IDs one shared call asks for unless a server's {@code --max-batch} says less. */
    static final int MAX_COALESCED = 4096;

    private final EndpointPool pool;
    private final ArrayDeque<CompletableFuture<Long>> waiting = new ArrayDeque<>();
    /** Whether a call is in flight; it takes the next waiters when it ends. */
    private boolean fetching;
    private int limit = MAX_COALESCED;

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
            waiting.add(id);
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
        List<CompletableFuture<Long>> callers = new ArrayList<>();
        synchronized (this) {
            while (callers.size() < limit && !waiting.isEmpty()) {
                CompletableFuture<Long> caller = waiting.poll();
                if (!caller.isDone()) { // not timed out or cancelled meanwhile
                    callers.add(caller);
                }
            }
            if (callers.isEmpty()) {
                fetching = false;
                return;
            }
        }
        CompletableFuture<long[]> call = callers.size() == 1
                ? pool.nextId(EndpointPool.NO_DEADLINE)
                : pool.fetch(callers.size(), EndpointPool.NO_DEADLINE);
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
                    callers.get(i).complete(ids[i]);
                } else {
                    callers.get(i).completeExceptionally(error);
                }
            }
            fetchForWaiting();
        });
    }
}
