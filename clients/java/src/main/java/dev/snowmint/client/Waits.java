package dev.snowmint.client;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Bounds on how long a caller waits for IDs that another call is fetching. */
final class Waits {

    private Waits() {}

    /**
     * {@code waiter}, failed once {@code nanos} pass: with the deadline exceeded error when the
     * bound is the caller's own timeout, else with the unavailable error. The waiter itself is
     * completed then, so whoever serves waiters skips it.
     *
     * @param callerDeadline whether the bound is the caller's own timeout rather than the
     *     client's longest call
     */
    static CompletableFuture<Long> bounded(CompletableFuture<Long> waiter, long nanos, boolean callerDeadline) {
        return waiter.orTimeout(Math.max(0, nanos), TimeUnit.NANOSECONDS).exceptionallyCompose(error -> {
            Throwable cause = error instanceof CompletionException && error.getCause() != null ? error.getCause() : error;
            if (!(cause instanceof TimeoutException)) {
                return CompletableFuture.failedFuture(cause);
            }
            return CompletableFuture.failedFuture(callerDeadline
                    ? EndpointPool.deadlinePassed()
                    : new SnowmintUnavailableException(String.format(
                            "no IDs arrived within %d ms", TimeUnit.NANOSECONDS.toMillis(nanos)), null));
        });
    }
}
