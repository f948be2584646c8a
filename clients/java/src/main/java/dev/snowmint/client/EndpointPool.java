package dev.snowmint.client;

import dev.snowmint.v1.BatchIdsRequest;
import dev.snowmint.v1.BatchIdsResponse;
import dev.snowmint.v1.IdServiceGrpc;
import dev.snowmint.v1.NextIdRequest;
import dev.snowmint.v1.NextIdResponse;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The connections to every endpoint, and which one to use next. An attempt that is refused
 * ({@code UNAVAILABLE}), fails in transport (also {@code UNAVAILABLE}) or gets no answer within
 * its deadline moves the call to the next endpoint, which later calls keep using; any other
 * error is returned as it is.
 */
final class EndpointPool {

    /** A call with no deadline of its own: only its attempts bound it. */
    static final long NO_DEADLINE = Long.MAX_VALUE;

    private static final long FIRST_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(10);
    private static final long MAX_BACKOFF_NANOS = TimeUnit.MILLISECONDS.toNanos(320);

    /** One endpoint: its address as given, and its channel. */
    private record Endpoint(String address, ManagedChannel channel, IdServiceGrpc.IdServiceStub stub) {}

    private final List<Endpoint> endpoints;
    /** Index of the endpoint to try first; always below {@code endpoints.size()}. */
    private final AtomicInteger current = new AtomicInteger();
    private final long timeoutNanos;
    private final int attempts;
    private volatile boolean closed;

    EndpointPool(List<String> addresses, Duration timeout, int attempts) {
        this.timeoutNanos = timeout.toNanos();
        this.attempts = attempts;
        List<Endpoint> endpoints = new ArrayList<>();
        try {
            for (String address : addresses) {
                ManagedChannel channel = channel(address);
                endpoints.add(new Endpoint(address, channel, IdServiceGrpc.newStub(channel)));
            }
        } catch (RuntimeException e) {
            endpoints.forEach(endpoint -> endpoint.channel().shutdownNow());
            throw e;
        }
        this.endpoints = List.copyOf(endpoints);
    }

    /**
     * A channel for {@code host:port} or {@code http://host:port} (plain text), or
     * {@code https://host:port} (TLS with the JVM's trusted roots). Connections open lazily, on
     * the first call.
     */
    private static ManagedChannel channel(String address) {
        ChannelCredentials credentials = InsecureChannelCredentials.create();
        String hostPort = address;
        if (address.startsWith("https://")) {
            credentials = TlsChannelCredentials.create();
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
        return Grpc.newChannelBuilderForAddress(host, Integer.parseInt(port), credentials).build();
    }

    /** The longest a call without a deadline of its own may take: every attempt's timeout. */
    long longestCallNanos() {
        return timeoutNanos * attempts;
    }

    /**
     * {@code count} IDs from one server ({@code NextId} for one, {@code BatchIds} for more),
     * trying endpoint after endpoint on refusals, transport failures and attempt timeouts, up to
     * the attempt limit and {@code deadline} ({@link System#nanoTime()}, or
     * {@link #NO_DEADLINE}). Cancelling the returned future stops further attempts.
     */
    CompletableFuture<long[]> fetch(int count, long deadline) {
        CompletableFuture<long[]> result = new CompletableFuture<>();
        attempt(count, 0, deadline, null, result);
        return result;
    }

    private void attempt(int count, int attempt, long deadline, String last, CompletableFuture<long[]> result) {
        if (result.isDone()) {
            return; // cancelled by the caller
        }
        if (closed) {
            result.completeExceptionally(new IllegalStateException("the snowmint client is closed"));
            return;
        }
        long attemptNanos = timeoutNanos;
        if (deadline != NO_DEADLINE) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                result.completeExceptionally(deadlinePassed(attempt, last));
                return;
            }
            attemptNanos = Math.min(attemptNanos, left);
        }
        int index = current.get();
        Endpoint endpoint = endpoints.get(index);
        call(endpoint, count, attemptNanos).whenComplete((ids, error) -> {
            if (error == null) {
                result.complete(ids);
                return;
            }
            if (closed) {
                // Closing cuts the calls in flight; that is no answer of the server's.
                result.completeExceptionally(new IllegalStateException("the snowmint client is closed"));
                return;
            }
            Status status = Status.fromThrowable(error);
            String failure = endpoint.address() + ": " + describe(status);
            if (!failsOver(status)) {
                result.completeExceptionally(new SnowmintRejectedException(
                        "the server at " + endpoint.address() + " rejected the request: " + describe(status), status));
                return;
            }
            // Move on from this endpoint, unless another call already did.
            current.compareAndSet(index, (index + 1) % endpoints.size());
            int next = attempt + 1;
            if (next >= attempts) {
                result.completeExceptionally(new SnowmintUnavailableException(String.format(
                        "every endpoint refused or failed (%d attempts over %d endpoints); last, %s",
                        attempts, endpoints.size(), failure), status));
            } else if (next >= endpoints.size()) {
                // Every endpoint tried: wait before each further attempt, 10 ms doubling to 320 ms.
                long backoff = Math.min(FIRST_BACKOFF_NANOS << Math.min(next - endpoints.size(), 5), MAX_BACKOFF_NANOS);
                if (deadline != NO_DEADLINE) {
                    backoff = Math.max(0, Math.min(backoff, deadline - System.nanoTime()));
                }
                CompletableFuture.delayedExecutor(backoff, TimeUnit.NANOSECONDS)
                        .execute(() -> attempt(count, next, deadline, failure, result));
            } else {
                attempt(count, next, deadline, failure, result);
            }
        });
    }

    /** The caller's own deadline passed: the call ends, retriable later. */
    static SnowmintUnavailableException deadlinePassed(int attempts, String last) {
        String tried = attempts == 0 ? "" : " (" + attempts + " attempts; last, " + last + ")";
        return new SnowmintUnavailableException("no IDs within the call's timeout" + tried, Status.DEADLINE_EXCEEDED);
    }

    private CompletableFuture<long[]> call(Endpoint endpoint, int count, long timeoutNanos) {
        IdServiceGrpc.IdServiceStub stub = endpoint.stub().withDeadlineAfter(timeoutNanos, TimeUnit.NANOSECONDS);
        if (count == 1) {
            Unary<NextIdResponse> response = new Unary<>();
            stub.nextId(NextIdRequest.getDefaultInstance(), response);
            return response.thenApply(r -> new long[] {r.getId()});
        }
        Unary<BatchIdsResponse> response = new Unary<>();
        stub.batchIds(BatchIdsRequest.newBuilder().setCount(count).build(), response);
        return response.thenApply(r -> {
            if (r.getIdsCount() != count) {
                // Callers are promised one ID each: a short reply must fail them, not strand them.
                throw Status.INTERNAL
                        .withDescription("asked for " + count + " IDs, got " + r.getIdsCount())
                        .asRuntimeException();
            }
            long[] ids = new long[count];
            for (int i = 0; i < count; i++) {
                ids[i] = r.getIds(i);
            }
            return ids;
        });
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

    /** Stops new calls, lets calls in flight finish within the timeout, then cuts the rest. */
    void close() {
        closed = true;
        endpoints.forEach(endpoint -> endpoint.channel().shutdown());
        try {
            for (Endpoint endpoint : endpoints) {
                endpoint.channel().awaitTermination(timeoutNanos, TimeUnit.NANOSECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            endpoints.forEach(endpoint -> endpoint.channel().shutdownNow());
        }
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
