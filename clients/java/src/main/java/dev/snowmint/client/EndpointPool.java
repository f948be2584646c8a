package dev.snowmint.client;

import com.google.protobuf.ByteString;
import dev.snowmint.v1.BatchIdsRequest;
import dev.snowmint.v1.BatchIdsResponse;
import dev.snowmint.v1.BatchUuidsRequest;
import dev.snowmint.v1.BatchUuidsResponse;
import dev.snowmint.v1.BatchValuesRequest;
import dev.snowmint.v1.BatchValuesResponse;
import dev.snowmint.v1.IdServiceGrpc;
import dev.snowmint.v1.NextIdRequest;
import dev.snowmint.v1.NextIdResponse;
import dev.snowmint.v1.NextUuidRequest;
import dev.snowmint.v1.NextUuidResponse;
import dev.snowmint.v1.NextValueRequest;
import dev.snowmint.v1.NextValueResponse;
import io.grpc.ChannelCredentials;
import io.grpc.ConnectivityState;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The connections to every endpoint, and the contract's rule for moving between them
 * (clients/README.md). All calls go to one current endpoint. An attempt that is refused
 * ({@code UNAVAILABLE}), fails in transport or gets no answer within its own deadline moves the
 * current endpoint to the next, for every caller; any other error is returned as it is, and an
 * attempt cut short by the caller's own deadline ends the call and moves nothing. Once every
 * endpoint was tried in a call, each further attempt waits first: 10 ms, doubling, at most
 * 320 ms. A quota refusal ({@code RESOURCE_EXHAUSTED} with a {@link RetryDelay}) waits its delay
 * instead and tries the same endpoint again, when the call has an attempt left and its deadline
 * is further away than the delay; otherwise it returns as it is. Closing the client or
 * cancelling a call ends its wait at once.
 *
 * <p>grpc-java holds a connection that failed in a reconnect backoff (up to two minutes, failing
 * every call to it meanwhile) and has no setting for its length; a call that finds its endpoint
 * in that state resets the backoff (at most every half second), so a server that comes back is
 * used again within a second.
 */
final class EndpointPool {

    /** A call with no deadline of its own: only its attempts bound it. */
    static final long NO_DEADLINE = Long.MAX_VALUE;

    private static final long FIRST_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(10);
    private static final long MAX_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(320);
    private static final long RECONNECT_NANOS = TimeUnit.MILLISECONDS.toNanos(500);
    /**
     * The largest response accepted: a {@code BatchUuids} of the most a server's
     * {@code --max-batch} allows (1,048,576) takes about 56 bytes a UUID (its bytes and its
     * text), some 59 MB, beyond grpc-java's default of 4 MiB (which a batch of about 75,000
     * UUIDs would pass).
     */
    private static final int MAX_RESPONSE_BYTES = 64 << 20;

    /** One endpoint: its address as given, its channel, and when its backoff was last reset. */
    private record Endpoint(String address, ManagedChannel channel, IdServiceGrpc.IdServiceStub stub, AtomicLong reset) {

        /** Resets the reconnect backoff of a connection that failed, at most every half second. */
        void reconnectIfFailed() {
            if (channel.getState(false) != ConnectivityState.TRANSIENT_FAILURE) {
                return;
            }
            long now = System.nanoTime();
            long last = reset.get();
            if (now - last >= RECONNECT_NANOS && reset.compareAndSet(last, now)) {
                channel.resetConnectBackoff();
            }
        }
    }

    private final List<Endpoint> endpoints;
    /** Index of the endpoint to try first; always below {@code endpoints.size()}. */
    private final AtomicInteger current = new AtomicInteger();
    private final long timeoutNanos;
    private final int attempts;
    /** The calls in a pause or a quota wait, which {@link #close()} ends. */
    private final Set<CompletableFuture<?>> waiting = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    /**
     * @param token the bearer token every attempt carries, or null for none
     */
    EndpointPool(List<String> addresses, Duration timeout, int attempts, ChannelCredentials tls, BearerToken token) {
        this.timeoutNanos = timeout.toNanos();
        this.attempts = attempts;
        List<Endpoint> endpoints = new ArrayList<>();
        try {
            for (String address : addresses) {
                ManagedChannel channel = channel(address, tls, token);
                long past = System.nanoTime() - RECONNECT_NANOS;
                endpoints.add(new Endpoint(address, channel, IdServiceGrpc.newStub(channel), new AtomicLong(past)));
            }
        } catch (RuntimeException e) {
            endpoints.forEach(endpoint -> endpoint.channel().shutdownNow());
            throw e;
        }
        this.endpoints = List.copyOf(endpoints);
    }

    /**
     * A channel for {@code host:port} or {@code http://host:port} (plain text), or
     * {@code https://host:port} (TLS with {@code tls}, or the JVM's trusted roots), whose calls
     * carry {@code token} if there is one. Connections open lazily, on the first call.
     */
    private static ManagedChannel channel(String address, ChannelCredentials tls, BearerToken token) {
        ChannelCredentials credentials = InsecureChannelCredentials.create();
        String hostPort = address;
        if (address.startsWith("https://")) {
            credentials = tls != null ? tls : TlsChannelCredentials.create();
            hostPort = address.substring("https://".length());
        } else if (address.startsWith("http://")) {
            hostPort = address.substring("http://".length());
        }
        int colon = hostPort.lastIndexOf(':');
        String host = colon > 0 ? hostPort.substring(0, colon) : "";
        String port = colon > 0 ? hostPort.substring(colon + 1) : "";
        if (host.isEmpty() || host.contains("/") || !port.matches("[0-9]{1,5}") || Integer.parseInt(port) > 65535) {
            throw new IllegalArgumentException("invalid endpoint \"" + address
                    + "\": expected host:port, http://host:port or https://host:port");
        }
        host = host.startsWith("[") && host.endsWith("]") ? host.substring(1, host.length() - 1) : host;
        ManagedChannelBuilder<?> builder = Grpc.newChannelBuilderForAddress(host, Integer.parseInt(port), credentials)
                .maxInboundMessageSize(MAX_RESPONSE_BYTES);
        if (token != null) {
            builder.intercept(token);
        }
        return builder.build();
    }

    /** The longest a call without a deadline of its own may take: every attempt's timeout. */
    long longestCallNanos() {
        return timeoutNanos * attempts;
    }

    /** The pause before attempt {@code k} (from 0) of a call over {@code n} endpoints. */
    static long pauseBeforeNanos(int k, int n) {
        return k < n || k == 0 ? 0 : Math.min(FIRST_BACKOFF_NANOS << Math.min(k - n, 5), MAX_BACKOFF_NANOS);
    }

    /** One RPC on one endpoint's stub, which already carries the attempt's deadline. */
    @FunctionalInterface
    private interface Call<T> {
        CompletableFuture<T> on(IdServiceGrpc.IdServiceStub stub);
    }

    /** One {@code NextId} call, failing over; see {@link #fetch(int, long)}. */
    CompletableFuture<long[]> nextId(long deadline) {
        return failingOver(EndpointPool::nextIdCall, deadline);
    }

    /**
     * One {@code BatchIds} call of {@code count}, trying endpoint after endpoint on refusals,
     * transport failures and attempt timeouts, up to the attempt limit and {@code deadline}
     * ({@link System#nanoTime()}, or {@link #NO_DEADLINE}). Cancelling the returned future stops
     * further attempts.
     */
    CompletableFuture<long[]> fetch(int count, long deadline) {
        return failingOver(stub -> batchIdsCall(stub, count), deadline);
    }

    /** One {@code NextUuid} call, failing over as {@link #fetch(int, long)} does. */
    CompletableFuture<UUID> nextUuid(long deadline) {
        return failingOver(EndpointPool::nextUuidCall, deadline);
    }

    /** One {@code NextValue} call of sequence {@code name}, failing over as {@link #fetch(int, long)} does. */
    CompletableFuture<SequenceAnswer> nextValue(String name, long deadline) {
        return failingOver(stub -> nextValueCall(stub, name), deadline);
    }

    /** One {@code BatchValues} call of {@code count} of sequence {@code name}, failing over as {@link #fetch(int, long)} does. */
    CompletableFuture<SequenceAnswer> fetchValues(String name, int count, long deadline) {
        return failingOver(stub -> batchValuesCall(stub, name, count), deadline);
    }

    /** One {@code BatchUuids} call of {@code count}, failing over as {@link #fetch(int, long)} does. */
    CompletableFuture<List<UUID>> fetchUuids(int count, long deadline) {
        return failingOver(stub -> batchUuidsCall(stub, count), deadline);
    }

    private <T> CompletableFuture<T> failingOver(Call<T> call, long deadline) {
        CompletableFuture<T> result = new CompletableFuture<>();
        attempt(call, 0, deadline, result);
        return result;
    }

    /** Attempt {@code attempt} (from 0) of {@code call}. */
    private <T> void attempt(Call<T> call, int attempt, long deadline, CompletableFuture<T> result) {
        if (result.isDone()) {
            return; // cancelled by the caller
        }
        if (closed) {
            result.completeExceptionally(closedError());
            return;
        }
        long attemptNanos = timeoutNanos;
        if (deadline != NO_DEADLINE) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                result.completeExceptionally(deadlinePassed());
                return;
            }
            attemptNanos = Math.min(attemptNanos, left);
        }
        boolean cut = attemptNanos < timeoutNanos;
        int index = current.get();
        Endpoint endpoint = endpoints.get(index);
        endpoint.reconnectIfFailed();
        call.on(endpoint.stub().withDeadlineAfter(attemptNanos, TimeUnit.NANOSECONDS)).whenComplete((value, error) -> {
            if (error == null) {
                result.complete(value);
                return;
            }
            if (closed) {
                // Closing cuts the calls in flight; that is no answer of the server's.
                result.completeExceptionally(closedError());
                return;
            }
            Status status = Status.fromThrowable(error);
            boolean callerPassed = deadline != NO_DEADLINE && System.nanoTime() - deadline >= 0;
            if ((cut || callerPassed) && status.getCode() == Status.Code.DEADLINE_EXCEEDED) {
                // The caller's deadline, which cut the attempt short, not the server: nothing moves.
                result.completeExceptionally(deadlinePassed());
                return;
            }
            if (status.getCode() == Status.Code.RESOURCE_EXHAUSTED) {
                // A quota refusal that says how long to wait: wait, then the same endpoint again,
                // when the call can use it; otherwise it returns as it is, below.
                long delay = RetryDelay.nanosOf(error);
                int next = attempt + 1;
                if (delay != RetryDelay.NONE && next < attempts
                        && (deadline == NO_DEADLINE || deadline - System.nanoTime() > delay)) {
                    waitThen(delay, result, () -> attempt(call, next, deadline, result));
                    return;
                }
            }
            if (!failsOver(status)) {
                result.completeExceptionally(new SnowmintRejectedException(
                        "the server at " + endpoint.address() + " rejected the request: " + describe(status), status));
                return;
            }
            // Move on from this endpoint, unless another call already did.
            current.compareAndSet(index, (index + 1) % endpoints.size());
            if (callerPassed) {
                result.completeExceptionally(deadlinePassed());
                return;
            }
            int next = attempt + 1;
            if (next >= attempts) {
                result.completeExceptionally(new SnowmintUnavailableException(String.format(
                        "every endpoint refused or failed (%d attempts over %d endpoints); the last, %s: %s",
                        attempts, endpoints.size(), endpoint.address(), describe(status)), status));
                return;
            }
            long pause = pauseBeforeNanos(next, endpoints.size());
            if (pause == 0) {
                attempt(call, next, deadline, result);
            } else if (deadline != NO_DEADLINE && System.nanoTime() + pause - deadline >= 0) {
                // The pause would reach the caller's deadline: the call ends there.
                waitThen(deadline - System.nanoTime(), result, () -> result.completeExceptionally(deadlinePassed()));
            } else {
                waitThen(pause, result, () -> attempt(call, next, deadline, result));
            }
        });
    }

    /**
     * Runs {@code then} after {@code nanos}, unless {@code result} completes first: cancelled by
     * its caller, or failed with the closed error by {@link #close()}, which ends the wait at once.
     */
    private <T> void waitThen(long nanos, CompletableFuture<T> result, Runnable then) {
        waiting.add(result);
        ScheduledFuture<?> timer = Timers.after(nanos, () -> {
            waiting.remove(result);
            then.run();
        });
        result.whenComplete((value, error) -> {
            waiting.remove(result);
            timer.cancel(false);
        });
        if (closed) {
            result.completeExceptionally(closedError());
        }
    }

    /** The caller's own deadline passed: the call ends, retriable later. */
    static SnowmintDeadlineExceededException deadlinePassed() {
        return new SnowmintDeadlineExceededException("the call's timeout passed");
    }

    static IllegalStateException closedError() {
        return new IllegalStateException("the snowmint client is closed");
    }

    private static CompletableFuture<long[]> nextIdCall(IdServiceGrpc.IdServiceStub stub) {
        Unary<NextIdResponse> response = new Unary<>();
        stub.nextId(NextIdRequest.getDefaultInstance(), response);
        return response.thenApply(r -> new long[] {r.getId()});
    }

    private static CompletableFuture<long[]> batchIdsCall(IdServiceGrpc.IdServiceStub stub, int count) {
        Unary<BatchIdsResponse> response = new Unary<>();
        stub.batchIds(BatchIdsRequest.newBuilder().setCount(count).build(), response);
        return response.thenApply(r -> {
            if (r.getIdsCount() != count) {
                // Callers are promised one ID each: a short reply must fail them, not strand them.
                throw malformed("asked for " + count + " IDs, got " + r.getIdsCount());
            }
            long[] ids = new long[count];
            for (int i = 0; i < count; i++) {
                ids[i] = r.getIds(i);
            }
            return ids;
        });
    }

    private static CompletableFuture<UUID> nextUuidCall(IdServiceGrpc.IdServiceStub stub) {
        Unary<NextUuidResponse> response = new Unary<>();
        stub.nextUuid(NextUuidRequest.getDefaultInstance(), response);
        return response.thenApply(r -> uuidOf(r.getUuid()));
    }

    private static CompletableFuture<SequenceAnswer> nextValueCall(IdServiceGrpc.IdServiceStub stub, String name) {
        Unary<NextValueResponse> response = new Unary<>();
        stub.nextValue(NextValueRequest.newBuilder().setSequence(name).build(), response);
        return response.thenApply(r -> new SequenceAnswer(positiveIncreasing(new long[] {r.getValue()}), r.getOrdered()));
    }

    private static CompletableFuture<SequenceAnswer> batchValuesCall(IdServiceGrpc.IdServiceStub stub, String name, int count) {
        Unary<BatchValuesResponse> response = new Unary<>();
        stub.batchValues(BatchValuesRequest.newBuilder().setSequence(name).setCount(count).build(), response);
        return response.thenApply(r -> {
            if (r.getValuesCount() != count) {
                throw malformed("asked for " + count + " values, got " + r.getValuesCount());
            }
            long[] values = new long[count];
            for (int i = 0; i < count; i++) {
                values[i] = r.getValues(i);
            }
            return new SequenceAnswer(positiveIncreasing(values), r.getOrdered());
        });
    }

    /** A sequence's values as answered: positive and increasing, or a malformed answer. */
    private static long[] positiveIncreasing(long[] values) {
        for (int i = 0; i < values.length; i++) {
            if (values[i] < 1 || (i > 0 && values[i] <= values[i - 1])) {
                throw malformed("sequence values that are not positive and increasing");
            }
        }
        return values;
    }

    private static CompletableFuture<List<UUID>> batchUuidsCall(IdServiceGrpc.IdServiceStub stub, int count) {
        Unary<BatchUuidsResponse> response = new Unary<>();
        stub.batchUuids(BatchUuidsRequest.newBuilder().setCount(count).build(), response);
        return response.thenApply(r -> {
            if (r.getUuidsCount() != count) {
                throw malformed("asked for " + count + " UUIDs, got " + r.getUuidsCount());
            }
            UUID[] uuids = new UUID[count];
            for (int i = 0; i < count; i++) {
                uuids[i] = uuidOf(r.getUuids(i));
            }
            return Collections.unmodifiableList(Arrays.asList(uuids));
        });
    }

    /** The UUID of a response's 16 bytes; any other length is a malformed answer. */
    private static UUID uuidOf(ByteString bytes) {
        if (bytes.size() != Uuids.BYTES) {
            throw malformed("a UUID of " + bytes.size() + " bytes, not " + Uuids.BYTES);
        }
        ByteBuffer buffer = bytes.asReadOnlyByteBuffer(); // big-endian: most significant first
        return new UUID(buffer.getLong(), buffer.getLong());
    }

    /**
     * A response the client cannot use: the call fails with {@code INTERNAL} (a
     * {@link SnowmintRejectedException}, not tried elsewhere), as a server's error would.
     */
    private static RuntimeException malformed(String what) {
        return Status.INTERNAL.withDescription("malformed response: " + what).asRuntimeException();
    }

    /**
     * Whether another endpoint may succeed: a refusal or a transport failure
     * ({@code UNAVAILABLE}), or no answer within the attempt's deadline. A lost reply costs
     * unused IDs, never duplicates, so trying again is always safe.
     */
    private static boolean failsOver(Status status) {
        return switch (status.getCode()) {
            case UNAVAILABLE, DEADLINE_EXCEEDED -> true;
            // grpc-java sometimes reports a connection that died under a call as
            // "UNKNOWN: channel closed" (grpc/grpc-java#10120). A status made from a local I/O
            // error is a transport failure whatever its code, never a server's answer.
            default -> status.getCause() instanceof IOException;
        };
    }

    private static String describe(Status status) {
        return status.getDescription() == null
                ? status.getCode().toString()
                : status.getCode() + ": " + status.getDescription();
    }

    boolean isClosed() {
        return closed;
    }

    /** Ends every call at once (they fail with the closed error) and closes the connections. */
    void close() {
        closed = true;
        waiting.forEach(call -> call.completeExceptionally(closedError()));
        endpoints.forEach(endpoint -> endpoint.channel().shutdownNow());
    }

    /** A unary call's one response as a future. */
    private static final class Unary<T> extends CompletableFuture<T> implements StreamObserver<T> {
        @Override
        public void onNext(T value) {
            complete(value);
        }

        @Override
        public void onError(Throwable error) {
            completeExceptionally(error);
        }

        @Override
        public void onCompleted() {
            // The value arrived in onNext; a call that completes without one is a server bug.
            completeExceptionally(Status.INTERNAL.withDescription("no response message").asRuntimeException());
        }
    }
}
