package dev.snowmint.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * Serves unbuffered {@code nextId()} calls: every caller waiting while a call is in flight is
 * served by the next call, one {@code BatchIds} for all of them ({@code NextId} for one), so a
 * burst of callers costs a round trip, not one each. As the Rust client does; an optimization
 * beyond the client contract.
 */
final class Coalescer {

    /** The most IDs one call asks for: the server's default {@code --max-batch}. */
    private static final int MAX_PER_CALL = 65_536;

    private final EndpointPool pool;
    private final ArrayDeque<CompletableFuture<Long>> waiting = new ArrayDeque<>();
    /** Whether a call is in flight; it takes the next waiters when it ends. */
    private boolean fetching;

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
            while (callers.size() < MAX_PER_CALL && !waiting.isEmpty()) {
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
        pool.fetch(callers.size(), EndpointPool.NO_DEADLINE).whenComplete((ids, error) -> {
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
