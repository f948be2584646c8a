package dev.snowmint.client;

import io.grpc.ChannelCredentials;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * A client of one or several snowmint servers. Thread-safe: share one per process.
 *
 * <pre>{@code
 * try (SnowmintClient client = SnowmintClient.builder("10.0.0.1:50051", "10.0.0.2:50051")
 *         .buffer(BufferConfig.defaults())
 *         .build()) {
 *     long id = client.nextId();
 *     long[] ids = client.batch(100);
 *     UUID uuid = client.nextUuid();            // a UUIDv7 made from one new ID
 *     List<UUID> uuids = client.batchUuids(100);
 * }
 * }</pre>
 *
 * <ul>
 *   <li>A refusal ({@code UNAVAILABLE}: a server that cannot promise unique IDs refuses), a
 *       transport failure, or no answer within the attempt's timeout moves the call to the next
 *       endpoint, which later calls keep using; other errors are returned as they are
 *       ({@link SnowmintRejectedException}). When every attempt fails, the call fails with the
 *       retriable {@link SnowmintUnavailableException}; when the caller's own timeout passes,
 *       with {@link SnowmintDeadlineExceededException}.
 *   <li>Every attempt has the client's timeout ({@link Builder#timeout(Duration)}); a caller
 *       may bound a whole call, all attempts included, with a timeout of its own
 *       ({@code nextId(Duration)} and the like).
 *   <li>With a buffer ({@link Builder#buffer(BufferConfig)}), {@code nextId()} takes IDs
 *       prefetched in the background, refilled at the rate they are used. Without one,
 *       concurrent {@code nextId()} calls are coalesced: the callers waiting while a call is
 *       in flight are all served by the next one, a single {@code BatchIds}.
 *   <li>With a bearer token ({@link Builder#token(String)}), every attempt carries it. A server
 *       that refuses a call over its tenant's rate ({@code RESOURCE_EXHAUSTED}) says how long
 *       to wait: the call waits that long and tries the same endpoint again, if it has an attempt
 *       left and its own timeout is further away; otherwise it fails with that refusal
 *       ({@link SnowmintRejectedException}), as do {@code UNAUTHENTICATED} and
 *       {@code PERMISSION_DENIED}, after one attempt.
 * </ul>
 *
 * <p>IDs are positive {@code long}s: snowmint keeps the sign bit clear.
 *
 * <p>UUIDs ({@link #nextUuid()}, {@link #batchUuids(int)}) are RFC 9562 UUIDv7s, each made
 * from one newly minted ID, so unique as the IDs are; they are {@link UUID}s, whose
 * {@code toString()} is the canonical lower-case text. Their calls fail over as
 * {@link #batch(int)} does and are never buffered or coalesced. {@link Uuids} reads their
 * text strictly and orders them; {@link Layout#decodeUuid(UUID)} reads what one carries.
 */
public final class SnowmintClient implements AutoCloseable {

    /** The most values {@link Builder#sequencePrefetch(int)} takes: the server's default {@code --max-batch}. */
    public static final int MAX_SEQUENCE_PREFETCH = SequencePrefetch.MAX;

    private final EndpointPool pool;
    private final Coalescer coalescer;
    private final PrefetchBuffer buffer;
    private final SequencePrefetch prefetch;
    /** The printed form: the settings, the token only as whether there is one. */
    private final String printed;

    private SnowmintClient(Builder builder) {
        int attempts = builder.attempts > 0 ? builder.attempts : Math.max(2, 2 * builder.endpoints.size());
        this.pool = new EndpointPool(builder.endpoints, builder.timeout, attempts, builder.credentials, builder.token);
        this.coalescer = builder.buffer == null ? new Coalescer(pool) : null;
        this.buffer = builder.buffer == null ? null : new PrefetchBuffer(pool, builder.buffer);
        this.prefetch = builder.sequencePrefetch == 0 ? null : new SequencePrefetch(pool, builder.sequencePrefetch);
        this.printed = String.format("SnowmintClient[endpoints=%s, timeout=%s, attempts=%d, buffer=%s, "
                        + "sequencePrefetch=%d, token=%s]", builder.endpoints, builder.timeout, attempts, builder.buffer,
                builder.sequencePrefetch, builder.token == null ? "none" : "(redacted)");
    }

    /**
     * A builder for a client of {@code endpoints}: {@code host:port} or
     * {@code http://host:port} for plain text, {@code https://host:port} for TLS; tried in the
     * order given.
     */
    public static Builder builder(String... endpoints) {
        return builder(List.of(endpoints));
    }

    /** Like {@link #builder(String...)}. */
    public static Builder builder(List<String> endpoints) {
        return new Builder(endpoints);
    }

    /**
     * One ID: from the buffer if there is one, otherwise coalesced with every other
     * {@code nextId()} waiting at the same moment.
     *
     * @throws SnowmintUnavailableException every endpoint refused or failed: retry later
     * @throws SnowmintRejectedException    the server rejected the request
     * @throws IllegalStateException        the client is closed, or was while the call waited
     * @throws CancellationException        the thread was interrupted while waiting (its
     *                                      interrupt flag is set again)
     */
    public long nextId() {
        return nextIdBlocking(EndpointPool.NO_DEADLINE);
    }

    /**
     * Like {@link #nextId()}, failing with {@link SnowmintDeadlineExceededException} once
     * {@code timeout} has passed, all attempts and waits included.
     */
    public long nextId(Duration timeout) {
        return nextIdBlocking(deadline(timeout));
    }

    private long nextIdBlocking(long deadline) {
        // The buffer's fast path, with no future to allocate.
        if (buffer != null && !pool.isClosed()) {
            long id = buffer.poll();
            if (id != PrefetchBuffer.EMPTY) {
                return id;
            }
        }
        return await(next(deadline));
    }

    /**
     * Like {@link #nextId()}, without blocking. The future fails with the exceptions
     * {@code nextId()} throws. Callbacks may run on gRPC's threads: keep them short, or use the
     * {@code ...Async(fn, executor)} forms.
     */
    public CompletableFuture<Long> nextIdAsync() {
        return next(EndpointPool.NO_DEADLINE);
    }

    /** Like {@link #nextId(Duration)}, without blocking. */
    public CompletableFuture<Long> nextIdAsync(Duration timeout) {
        return next(deadline(timeout));
    }

    private CompletableFuture<Long> next(long deadline) {
        if (pool.isClosed()) {
            return CompletableFuture.failedFuture(EndpointPool.closedError());
        }
        return buffer != null ? buffer.next(deadline) : coalescer.nextId(deadline);
    }

    /**
     * {@code count} IDs, strictly increasing, from one server in one {@code BatchIds} call
     * ({@code count} 1 too); never from the buffer.
     *
     * @param count how many: 1 up to the server's maximum batch (65,536 by default); a count
     *              the server does not accept fails with {@link SnowmintRejectedException}
     *              ({@code INVALID_ARGUMENT}), as the server answered
     * @throws IllegalArgumentException for a negative count, which the wire format cannot carry
     * @throws SnowmintUnavailableException every endpoint refused or failed: retry later
     * @throws SnowmintRejectedException    the server rejected the request
     */
    public long[] batch(int count) {
        return await(batchAsync(count));
    }

    /** Like {@link #batch(int)}, bounded by {@code timeout} as {@link #nextId(Duration)} is. */
    public long[] batch(int count, Duration timeout) {
        return await(batchAsync(count, timeout));
    }

    /** Like {@link #batch(int)}, without blocking. Cancelling the future stops further attempts. */
    public CompletableFuture<long[]> batchAsync(int count) {
        return fetch(count, EndpointPool.NO_DEADLINE);
    }

    /** Like {@link #batch(int, Duration)}, without blocking. */
    public CompletableFuture<long[]> batchAsync(int count, Duration timeout) {
        return fetch(count, deadline(timeout));
    }

    private CompletableFuture<long[]> fetch(int count, long deadline) {
        if (count < 0) {
            throw new IllegalArgumentException("count must not be negative, got " + count);
        }
        if (pool.isClosed()) {
            return CompletableFuture.failedFuture(EndpointPool.closedError());
        }
        return pool.fetch(count, deadline);
    }

    /**
     * One UUIDv7, made from one newly minted ID, in one {@code NextUuid} call (never from the
     * buffer, never shared with other calls); above every UUID its server minted before. It
     * fails over, and fails, as {@link #batch(int)} does.
     *
     * @throws SnowmintUnavailableException every endpoint refused or failed: retry later
     * @throws SnowmintRejectedException    the server rejected the request, or its answer was
     *                                      malformed ({@code INTERNAL})
     * @throws IllegalStateException        the client is closed, or was while the call waited
     * @throws CancellationException        the thread was interrupted while waiting (its
     *                                      interrupt flag is set again)
     */
    public UUID nextUuid() {
        return await(nextUuidAsync());
    }

    /** Like {@link #nextUuid()}, bounded by {@code timeout} as {@link #nextId(Duration)} is. */
    public UUID nextUuid(Duration timeout) {
        return await(nextUuidAsync(timeout));
    }

    /** Like {@link #nextUuid()}, without blocking. Cancelling the future stops further attempts. */
    public CompletableFuture<UUID> nextUuidAsync() {
        return uuid(EndpointPool.NO_DEADLINE);
    }

    /** Like {@link #nextUuid(Duration)}, without blocking. */
    public CompletableFuture<UUID> nextUuidAsync(Duration timeout) {
        return uuid(deadline(timeout));
    }

    private CompletableFuture<UUID> uuid(long deadline) {
        if (pool.isClosed()) {
            return CompletableFuture.failedFuture(EndpointPool.closedError());
        }
        return pool.nextUuid(deadline);
    }

    /**
     * The next value of the named sequence {@code name}: positive, never issued twice. One
     * {@code NextValue} call; with {@link Builder#sequencePrefetch(int)}, from the sequence's
     * buffer when it holds one (an unordered sequence's buffer is refilled by one
     * {@code BatchValues}, shared by the callers waiting; an ordered sequence is never
     * buffered). It fails over and keeps deadlines as {@link #batch(int)} does; {@code NOT_FOUND} (no such sequence) and {@code OUT_OF_RANGE}
     * (used up) fail with {@link SnowmintRejectedException}, as the server answered.
     *
     * @throws SnowmintUnavailableException every endpoint refused or failed: retry later
     * @throws SnowmintRejectedException    the server rejected the request, or its answer was
     *                                      malformed ({@code INTERNAL})
     */
    public long nextValue(String name) {
        return await(nextValueAsync(name));
    }

    /** Like {@link #nextValue(String)}, bounded by {@code timeout} as {@link #nextId(Duration)} is. */
    public long nextValue(String name, Duration timeout) {
        return await(nextValueAsync(name, timeout));
    }

    /** Like {@link #nextValue(String)}, without blocking. Cancelling the future stops further attempts. */
    public CompletableFuture<Long> nextValueAsync(String name) {
        return value(name, EndpointPool.NO_DEADLINE);
    }

    /** Like {@link #nextValue(String, Duration)}, without blocking. */
    public CompletableFuture<Long> nextValueAsync(String name, Duration timeout) {
        return value(name, deadline(timeout));
    }

    private CompletableFuture<Long> value(String name, long deadline) {
        if (pool.isClosed()) {
            return CompletableFuture.failedFuture(EndpointPool.closedError());
        }
        if (prefetch != null) {
            return prefetch.nextValue(name, deadline);
        }
        return pool.nextValue(name, deadline).thenApply(answer -> answer.values()[0]);
    }

    /**
     * {@code count} values of the named sequence {@code name}, increasing, from one server in
     * one {@code BatchValues} call; never buffered.
     *
     * @param count how many: 1 up to the server's maximum batch, as for {@link #batch(int)}
     * @throws IllegalArgumentException for a negative count, which the wire format cannot carry
     * @throws SnowmintUnavailableException every endpoint refused or failed: retry later
     * @throws SnowmintRejectedException    the server rejected the request, or its answer was
     *                                      malformed ({@code INTERNAL})
     */
    public long[] batchValues(String name, int count) {
        return await(batchValuesAsync(name, count));
    }

    /** Like {@link #batchValues(String, int)}, bounded by {@code timeout} as {@link #nextId(Duration)} is. */
    public long[] batchValues(String name, int count, Duration timeout) {
        return await(batchValuesAsync(name, count, timeout));
    }

    /** Like {@link #batchValues(String, int)}, without blocking. Cancelling the future stops further attempts. */
    public CompletableFuture<long[]> batchValuesAsync(String name, int count) {
        return fetchValues(name, count, EndpointPool.NO_DEADLINE);
    }

    /** Like {@link #batchValues(String, int, Duration)}, without blocking. */
    public CompletableFuture<long[]> batchValuesAsync(String name, int count, Duration timeout) {
        return fetchValues(name, count, deadline(timeout));
    }

    private CompletableFuture<long[]> fetchValues(String name, int count, long deadline) {
        if (count < 0) {
            throw new IllegalArgumentException("count must not be negative, got " + count);
        }
        if (pool.isClosed()) {
            return CompletableFuture.failedFuture(EndpointPool.closedError());
        }
        return pool.fetchValues(name, count, deadline).thenApply(SequenceAnswer::values);
    }

    /**
     * {@code count} UUIDv7s, strictly increasing (as unsigned 128-bit numbers, {@link Uuids#ORDER},
     * and so as text), from one server in one {@code BatchUuids} call ({@code count} 1 too);
     * never from the buffer. The list is unmodifiable.
     *
     * @param count how many: 1 up to the server's maximum batch (65,536 by default); a count
     *              the server does not accept fails with {@link SnowmintRejectedException}
     *              ({@code INVALID_ARGUMENT}), as the server answered
     * @throws IllegalArgumentException for a negative count, which the wire format cannot carry
     * @throws SnowmintUnavailableException every endpoint refused or failed: retry later
     * @throws SnowmintRejectedException    the server rejected the request, or its answer was
     *                                      malformed ({@code INTERNAL})
     */
    public List<UUID> batchUuids(int count) {
        return await(batchUuidsAsync(count));
    }

    /** Like {@link #batchUuids(int)}, bounded by {@code timeout} as {@link #nextId(Duration)} is. */
    public List<UUID> batchUuids(int count, Duration timeout) {
        return await(batchUuidsAsync(count, timeout));
    }

    /** Like {@link #batchUuids(int)}, without blocking. Cancelling the future stops further attempts. */
    public CompletableFuture<List<UUID>> batchUuidsAsync(int count) {
        return fetchUuids(count, EndpointPool.NO_DEADLINE);
    }

    /** Like {@link #batchUuids(int, Duration)}, without blocking. */
    public CompletableFuture<List<UUID>> batchUuidsAsync(int count, Duration timeout) {
        return fetchUuids(count, deadline(timeout));
    }

    private CompletableFuture<List<UUID>> fetchUuids(int count, long deadline) {
        if (count < 0) {
            throw new IllegalArgumentException("count must not be negative, got " + count);
        }
        if (pool.isClosed()) {
            return CompletableFuture.failedFuture(EndpointPool.closedError());
        }
        return pool.fetchUuids(count, deadline);
    }

    /**
     * Ends the client at once: the buffer stops refilling, every call waiting on the client (on
     * an empty buffer, on a shared call, or in an attempt on a server) fails with
     * {@link IllegalStateException}, the connections close, and every later call fails with it
     * too. Buffered IDs and sequence values are dropped, never handed out (a gap). It does not
     * wait for a server; calling it again does nothing.
     */
    @Override
    public void close() {
        if (buffer != null) {
            buffer.close();
        }
        pool.close();
    }

    /** The client's settings; a token only as {@code token=(redacted)}, never itself. */
    @Override
    public String toString() {
        return printed;
    }

    /** The {@link System#nanoTime()} at which a call with {@code timeout} must end. */
    private static long deadline(Duration timeout) {
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("the timeout must be positive, got " + timeout);
        }
        long nanos = timeout.compareTo(Duration.ofDays(365)) > 0 ? Duration.ofDays(365).toNanos() : timeout.toNanos();
        return System.nanoTime() + nanos;
    }

    private static <T> T await(CompletableFuture<T> future) {
        try {
            return future.get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof RuntimeException cause) {
                throw cause;
            }
            throw new IllegalStateException("unexpected failure", e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancellationException("interrupted while waiting for IDs or UUIDs");
        }
    }

    /** Builds a {@link SnowmintClient}. */
    public static final class Builder {
        private final List<String> endpoints;
        private Duration timeout = Duration.ofSeconds(1);
        private int attempts;
        private BufferConfig buffer;
        private int sequencePrefetch;
        private ChannelCredentials credentials;
        private BearerToken token;

        private Builder(List<String> endpoints) {
            this.endpoints = List.copyOf(endpoints);
        }

        /**
         * The timeout of each attempt on a server (default 1 s). A server that cannot mint in
         * time refuses before it passes, so the call can move on to the next endpoint.
         */
        public Builder timeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("the timeout must be positive, got " + timeout);
            }
            this.timeout = timeout;
            return this;
        }

        /**
         * How many attempts one call may make across endpoints before it fails (default: twice
         * the number of endpoints, at least 2), so that every endpoint gets a second chance after
         * a short pause.
         */
        public Builder attempts(int attempts) {
            if (attempts < 1) {
                throw new IllegalArgumentException("attempts must be at least 1, got " + attempts);
            }
            this.attempts = attempts;
            return this;
        }

        /**
         * The credentials of {@code https://} endpoints, instead of TLS with the JVM's trusted
         * roots: a CA to verify servers with and a client certificate for a server started with
         * {@code --tls-client-ca}, e.g. {@code TlsChannelCredentials.newBuilder().trustManager(caPem)
         * .keyManager(certPem, keyPem).build()}. {@code host:port} and {@code http://} endpoints
         * stay plain text.
         */
        public Builder credentials(ChannelCredentials credentials) {
            this.credentials = Objects.requireNonNull(credentials, "credentials");
            return this;
        }

        /**
         * The bearer token of the client's tenant, for a server started with a policy
         * (docs/operations/tenants.md): every attempt of every call carries it as
         * {@code authorization: Bearer <token>} gRPC metadata, over TLS and plain text alike (over
         * plain text it crosses the network as it is: beyond loopback, use {@code https://}
         * endpoints). It never appears in an error or the client's printed form.
         *
         * @param token 1 to 4,096 characters, each a visible ASCII character ({@code '!'} to
         *     {@code '~'}), as {@code snowmint token new} makes them
         * @throws IllegalArgumentException for any other (its message does not show the token)
         */
        public Builder token(String token) {
            this.token = BearerToken.of(token);
            return this;
        }

        /**
         * Prefetches IDs into a local buffer, refilled at the rate they are used, so most
         * {@code nextId()} calls need no round trip.
         */
        public Builder buffer(BufferConfig buffer) {
            this.buffer = Objects.requireNonNull(buffer, "buffer");
            return this;
        }

        /**
         * Values of each unordered named sequence that {@code nextValue()} fetches ahead in one
         * {@code BatchValues} and hands out one by one (default 0: off, one {@code NextValue}
         * per call). Values still buffered when the client is closed or the process ends are a
         * gap, never handed out; buffered values leave the fleet-wide order of the calls, and
         * may wait long in an idle client. Ordered sequences are never buffered.
         *
         * @param values 0 to {@value SnowmintClient#MAX_SEQUENCE_PREFETCH}, the server's default
         *     {@code --max-batch}
         * @throws IllegalArgumentException for any other number
         */
        public Builder sequencePrefetch(int values) {
            this.sequencePrefetch = SequencePrefetch.check(values);
            return this;
        }

        /**
         * Makes the client. Connections open lazily, on first use, and a buffer sends nothing
         * before the first {@code nextId()}.
         *
         * @throws IllegalArgumentException for no endpoints or an endpoint that is not
         *     {@code host:port}, {@code http://host:port} or {@code https://host:port}
         */
        public SnowmintClient build() {
            if (endpoints.isEmpty()) {
                throw new IllegalArgumentException("no endpoints given");
            }
            return new SnowmintClient(this);
        }
    }
}
