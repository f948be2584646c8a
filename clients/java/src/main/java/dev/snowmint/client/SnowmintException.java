package dev.snowmint.client;

import io.grpc.Status;

/**
 * Why the client could not get IDs. Unchecked, so it travels through {@code CompletableFuture}s
 * as it is; the blocking methods throw it directly.
 *
 * <p>Three kinds: {@link SnowmintUnavailableException} (every attempt failed: retry later),
 * {@link SnowmintDeadlineExceededException} (the call's own timeout passed: retry later) and
 * {@link SnowmintRejectedException} (the server rejected the request itself, such as a batch
 * count out of range: retrying will not help).
 */
public abstract sealed class SnowmintException extends RuntimeException
        permits SnowmintUnavailableException, SnowmintDeadlineExceededException, SnowmintRejectedException {

    private final transient Status status;

    SnowmintException(String message, Status status) {
        super(message, status.asRuntimeException());
        this.status = status;
    }

    /** The gRPC status of the error: {@code UNAVAILABLE}, {@code DEADLINE_EXCEEDED}, or the server's. */
    public Status status() {
        return status;
    }

    /** Whether the same request may succeed if tried again later. */
    public abstract boolean isRetriable();
}
