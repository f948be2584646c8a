package dev.snowmint.client;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.RetryInfo;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;

/**
 * The retry delay of a quota refusal (clients/README.md, "Quota waits"): the
 * {@code google.rpc.RetryInfo} in the status details ({@code grpc-status-details-bin}) of a
 * {@code RESOURCE_EXHAUSTED} answer, read with grpc-java's {@link StatusProto}. Details that do
 * not read, or hold no RetryInfo, give none: the refusal then returns as it is.
 */
final class RetryDelay {

    /** No delay given. */
    static final long NONE = -1;

    private static final String TYPE = "google.rpc.RetryInfo";
    /** The longest delay taken as it is; a longer one is waited as this (as a caller's timeout is). */
    private static final long MAX_NANOS = Duration.ofDays(365).toNanos();

    private RetryDelay() {}

    /** The delay, in nanoseconds, that the status details of {@code error} give, or {@link #NONE}. */
    static long nanosOf(Throwable error) {
        com.google.rpc.Status details;
        try {
            details = StatusProto.fromThrowable(error);
        } catch (RuntimeException e) {
            return NONE; // details that do not read, or of another code than the status's
        }
        if (details == null) {
            return NONE;
        }
        for (Any detail : details.getDetailsList()) {
            String type = detail.getTypeUrl();
            if (!type.equals(TYPE) && !type.endsWith("/" + TYPE)) {
                continue;
            }
            try {
                RetryInfo info = RetryInfo.parseFrom(detail.getValue());
                return info.hasRetryDelay() ? nanosOf(info.getRetryDelay()) : NONE;
            } catch (InvalidProtocolBufferException e) {
                return NONE;
            }
        }
        return NONE;
    }

    private static long nanosOf(com.google.protobuf.Duration delay) {
        long seconds = delay.getSeconds();
        int nanos = delay.getNanos();
        if (seconds < 0 || nanos < 0 || nanos > 999_999_999) {
            return NONE; // not a time to wait
        }
        if (seconds >= MAX_NANOS / 1_000_000_000L) {
            return MAX_NANOS;
        }
        return seconds * 1_000_000_000L + nanos;
    }
}
