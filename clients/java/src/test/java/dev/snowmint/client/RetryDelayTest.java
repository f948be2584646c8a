package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.protobuf.Any;
import com.google.protobuf.ByteString;
import com.google.protobuf.Duration;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.concurrent.CompletionException;
import org.junit.jupiter.api.Test;

/** {@link RetryDelay}: the delay of a quota refusal's status details, and none of any other. */
class RetryDelayTest {

    private static final Metadata.Key<byte[]> DETAILS =
            Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

    @Test
    void aRetryInfoGivesItsDelay() {
        Any retry = Any.pack(RetryInfo.newBuilder().setRetryDelay(delay(1, 250_000_000)).build());
        assertEquals(1_250_000_000L, RetryDelay.nanosOf(refusal(retry)));
        // After other details, through the CompletionException a future fails with.
        Any info = Any.pack(ErrorInfo.newBuilder().setReason("QUOTA").build());
        assertEquals(1_250_000_000L, RetryDelay.nanosOf(new CompletionException(refusal(info, retry))));
        // A type URL of the bare name, as the wire format allows.
        Any bare = retry.toBuilder().setTypeUrl("google.rpc.RetryInfo").build();
        assertEquals(1_250_000_000L, RetryDelay.nanosOf(refusal(bare)));
        assertEquals(0, RetryDelay.nanosOf(refusal(Any.pack(RetryInfo.newBuilder().setRetryDelay(delay(0, 0)).build()))));
        // A delay past a year is a year's.
        Any yearsAway = Any.pack(RetryInfo.newBuilder().setRetryDelay(delay(Long.MAX_VALUE / 2, 0)).build());
        assertEquals(java.time.Duration.ofDays(365).toNanos(), RetryDelay.nanosOf(refusal(yearsAway)));
    }

    @Test
    void detailsWithoutARetryInfoGiveNone() {
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(Status.RESOURCE_EXHAUSTED.asRuntimeException()));
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(refusal()));
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(refusal(Any.pack(ErrorInfo.newBuilder().setReason("QUOTA").build()))));
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(new IllegalStateException("not a gRPC error")));
        // A RetryInfo without a delay, or with one that is no time to wait.
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(refusal(Any.pack(RetryInfo.getDefaultInstance()))));
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(refusal(Any.pack(RetryInfo.newBuilder().setRetryDelay(delay(-1, 0)).build()))));
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(refusal(Any.pack(RetryInfo.newBuilder().setRetryDelay(delay(0, -5)).build()))));
    }

    @Test
    void garbageGivesNone() {
        // Details that are no google.rpc.Status: a field 3 cut short, an invalid tag.
        for (byte[] blob : new byte[][] {{0x1a, 0x05, 0x01}, {(byte) 0xff, (byte) 0xff, (byte) 0xff}, {0x0a}}) {
            Metadata trailers = new Metadata();
            trailers.put(DETAILS, blob);
            assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(new StatusRuntimeException(Status.RESOURCE_EXHAUSTED, trailers)));
        }
        // A RetryInfo whose bytes do not read.
        Any broken = Any.newBuilder().setTypeUrl("type.googleapis.com/google.rpc.RetryInfo")
                .setValue(ByteString.copyFrom(new byte[] {0x0a, 0x7f})).build();
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(refusal(broken)));
        // Details of another code than the status's.
        com.google.rpc.Status other = com.google.rpc.Status.newBuilder().setCode(Code.UNAVAILABLE_VALUE)
                .addDetails(Any.pack(RetryInfo.newBuilder().setRetryDelay(delay(1, 0)).build())).build();
        Metadata trailers = new Metadata();
        trailers.put(DETAILS, other.toByteArray());
        assertEquals(RetryDelay.NONE, RetryDelay.nanosOf(new StatusRuntimeException(Status.RESOURCE_EXHAUSTED, trailers)));
    }

    /** A {@code RESOURCE_EXHAUSTED} error whose status details hold {@code details}. */
    private static StatusRuntimeException refusal(Any... details) {
        com.google.rpc.Status.Builder status = com.google.rpc.Status.newBuilder()
                .setCode(Code.RESOURCE_EXHAUSTED_VALUE)
                .setMessage("over the tenant's rate");
        for (Any detail : details) {
            status.addDetails(detail);
        }
        return StatusProto.toStatusRuntimeException(status.build());
    }

    private static Duration delay(long seconds, int nanos) {
        return Duration.newBuilder().setSeconds(seconds).setNanos(nanos).build();
    }
}
