package dev.snowmint.client;

import io.grpc.Status;

/**
 * The server rejected the request itself (for example {@code INVALID_ARGUMENT} for a batch
 * count of 0 or above the server's maximum). It is returned as the server said it, without
 * trying another endpoint, since every endpoint would answer the same.
 */
public final class SnowmintRejectedException extends SnowmintException {

    SnowmintRejectedException(String message, Status status) {
        super(message, status);
    }

    @Override
    public boolean isRetriable() {
        return false;
    }
}
