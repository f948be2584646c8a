package dev.snowmint.client;

import io.grpc.Status;

/**
 * Every attempt failed over: refused ({@code UNAVAILABLE}: a server that cannot promise unique
 * IDs refuses rather than guess), failed in transport, or past its own timeout; or the buffer
 * got no IDs in time. Its {@link #status()} is always {@code UNAVAILABLE}; {@link #last()} is
 * what the last attempt said. Retriable: the same request may succeed later.
 */
public final class SnowmintUnavailableException extends SnowmintException {

    private final transient Status last;

    SnowmintUnavailableException(String message, Status last) {
        super(message, Status.UNAVAILABLE.withDescription(message).withCause(last == null ? null : last.asException()));
        this.last = last;
    }

    /** The last attempt's status (its code may be {@code DEADLINE_EXCEEDED}, from a hung server), or null. */
    public Status last() {
        return last;
    }

    @Override
    public boolean isRetriable() {
        return true;
    }
}
