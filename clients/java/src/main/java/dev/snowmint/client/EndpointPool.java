package dev.snowmint.client;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.StreamObserver;
import java.net.URI;
import java.net.URISyntaxException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import snowmint.v1.IdServiceGrpc;
import snowmint.v1.Snowmint.BatchIdsRequest;
import snowmint.v1.Snowmint.BatchIdsResponse;
import snowmint.v1.Snowmint.NextIdRequest;
import snowmint.v1.Snowmint.NextIdResponse;

/**
 * The connections to every endpoint, and which one to use next. A call that is refused
 * ({@code UNAVAILABLE}) or fails in transport moves to the next endpoint, and the pool stays
 * there for later calls; any other error is returned as it is.
 */
final class EndpointPool {

    /** One endpoint: its URL as given, and its channel. */
    private record Endpoint(String url, ManagedChannel channel, IdServiceGrpc.IdServiceStub stub) {}

    private final List<Endpoint> endpoints;
    /** Index of the endpoint to try first; always below {@code endpoints.size()}. */
    private final AtomicInteger current = new AtomicInteger();
    private final long deadlineNanos;
    private final int attempts;
    private volatile boolean closed;

    EndpointPool(List<String> urls, Duration deadline, int attempts) {
        this.deadlineNanos = deadline.toNanos();
        this.attempts = attempts;
        List<Endpoint> endpoints = new ArrayList<>();
        try {
            for (String url : urls) {
                ManagedChannel channel = channel(url);
                endpoints.add(new Endpoint(url, channel, IdServiceGrpc.newStub(channel)));
            }
        } catch (RuntimeException e) {
            endpoints.forEach(endpoint -> endpoint.channel().shutdownNow());
            throw e;
        }
        this.endpoints = List.copyOf(endpoints);
    }

    /**
     * A channel for {@code http://host:port} (plain text) or {@code https://host:port} (TLS with
     * the JVM's trusted roots). Connections open lazily, on the first call.
     */
    private static ManagedChannel channel(String url) {
        URI uri;
        try {
            uri = new URI(url);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException("invalid endpoint \"" + url + "\": " + e.getMessage(), e);
        }
        ChannelCredentials credentials;
        if ("http".equals(uri.getScheme())) {
            credentials = InsecureChannelCredentials.create();
        } else if ("https".equals(uri.getScheme())) {
            credentials = TlsChannelCredentials.create();
        } else {
            throw new IllegalArgumentException(
                    "invalid endpoint \"" + url + "\": expected http://host:port or https://host:port");
        }
        if (uri.getHost() == null || uri.getPort() < 0) {
            throw new IllegalArgumentException(
                    "invalid endpoint \"" + url + "\": expected http://host:port or https://host:port");
        }
        String host = uri.getHost().replaceAll("^\\[(.*)]$", "$1");
        return Grpc.newChannelBuilderForAddress(host, uri.getPort(), credentials).build();
    }

    /** How many endpoints there are. */
    int size() {
        return endpoints.size();
    }

    /**
     * {@code count} IDs from one server ({@code NextId} for one, {@code BatchIds} for more),
     * trying endpoint after endpoint on refusals and transport failures, up to the attempt
     * limit, with a short pause after each full round.
     */
    CompletableFuture<long[]> fetch(int count) {
        CompletableFuture<long[]> result = new CompletableFuture<>();
        attempt(count, 0, result);
        return result;
    }

    private void attempt(int count, int attempt, CompletableFuture<long[]> result) {
        if (closed) {
            result.completeExceptionally(new IllegalStateException("the snowmint client is closed"));
            return;
        }
        int index = current.get();
        Endpoint endpoint = endpoints.get(index);
        call(endpoint, count).whenComplete((ids, error) -> {
            if (error == null) {
                result.complete(ids);
                return;
            }
            Status status = Status.fromThrowable(error);
            if (!retriable(status)) {
                result.completeExceptionally(new SnowmintRejectedException(
                        "the server at " + endpoint.url() + " rejected the request: " + describe(status), status));
                return;
            }
            // Move on from this endpoint, unless another call already did.
            current.compareAndSet(index, (index + 1) % endpoints.size());
            int next = attempt + 1;
            if (next >= attempts) {
                result.completeExceptionally(new SnowmintUnavailableException(String.format(
                        "every endpoint refused or failed (%d attempts over %d endpoints); last, %s: %s",
                        attempts, endpoints.size(), endpoint.url(), describe(status)), status));
            } else if (next % endpoints.size() == 0) {
                // Every endpoint tried once more: back off a little before going round again.
                Executor later = CompletableFuture.delayedExecutor(
                        10L << Math.min(next / endpoints.size() - 1, 5), TimeUnit.MILLISECONDS);
                later.execute(() -> attempt(count, next, result));
            } else {
                attempt(count, next, result);
            }
        });
    }

    private CompletableFuture<long[]> call(Endpoint endpoint, int count) {
        IdServiceGrpc.IdServiceStub stub = endpoint.stub().withDeadlineAfter(deadlineNanos, TimeUnit.NANOSECONDS);
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
     * Whether another endpoint may succeed: a refusal ({@code UNAVAILABLE}), or the call's
     * fate unknown because of the transport or the deadline. A lost reply costs unused IDs,
     * never duplicates, so trying again is always safe.
     */
    private static boolean retriable(Status status) {
        return switch (status.getCode()) {
            case UNAVAILABLE, DEADLINE_EXCEEDED, UNKNOWN, CANCELLED -> true;
            default -> false;
        };
    }

    private static String describe(Status status) {
        return status.getDescription() == null
                ? status.getCode().toString()
                : status.getCode() + ": " + status.getDescription();
    }

    /** Stops new calls, lets calls in flight finish within the deadline, then cuts the rest. */
    void close() {
        closed = true;
        endpoints.forEach(endpoint -> endpoint.channel().shutdown());
        try {
            for (Endpoint endpoint : endpoints) {
                endpoint.channel().awaitTermination(deadlineNanos, TimeUnit.NANOSECONDS);
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
