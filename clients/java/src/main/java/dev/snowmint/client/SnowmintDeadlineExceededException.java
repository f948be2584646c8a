package dev.snowmint.client;

import io.grpc.Status;

/**
 * The call's own timeout ({@code nextId(Duration)}, {@code batch(n, Duration)} and their
 * {@code Async} twins) passed: during an attempt, a pause between attempts, or a wait on the
 * buffer. Status {@code DEADLINE_EXCEEDED}. Retriable: the same request may succeed later.
 */
public final class SnowmintDeadlineExceededException extends SnowmintException {

    SnowmintDeadlineExceededException(String message) {
        super(message, Status.DEADLINE_EXCEEDED.withDescription(message));
    }

    @Override
    public boolean isRetriable() {
        return true;
    }
}
