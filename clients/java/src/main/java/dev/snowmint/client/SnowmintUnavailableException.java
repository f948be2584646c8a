package dev.snowmint.client;

import io.grpc.Status;

/**
 * Every attempt on every endpoint was refused ({@code UNAVAILABLE}: a server that cannot
 * promise unique IDs refuses rather than guess) or failed in transport, or the buffer got no
 * IDs in time. Retriable: the same request may succeed later.
 */
public final class SnowmintUnavailableException extends SnowmintException {

    SnowmintUnavailableException(String message, Status status) {
        super(message, status);
    }

    @Override
    public boolean isRetriable() {
        return true;
    }
}
