package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.snowmint.v1.IdServiceGrpc;
import dev.snowmint.v1.NextIdRequest;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The client against real snowmint processes. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClientTest {

    private static final Layout LAYOUT = Layout.snowmint();

    @ParameterizedTest(name = "buffered = {0}")
    @ValueSource(booleans = {false, true})
    void concurrentCallersGetUniqueIds(boolean buffered) throws Exception {
        try (SnowmintServer server = SnowmintServer.start(1);
                SnowmintClient client = builder(buffered, server.url()).build()) {
            int threads = 16;
            ConcurrentLinkedQueue<Long> ids = new ConcurrentLinkedQueue<>();
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                CountDownLatch ready = new CountDownLatch(threads);
                List<Future<?>> workers = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int thread = t;
                    workers.add(pool.submit(() -> {
                        ready.countDown();
                        ready.await();
                        for (int i = 0; i < 300; i++) {
                            switch ((thread + i) % 4) {
                                case 0 -> {
                                    long[] batch = client.batch(1 + i % 50);
                                    assertIncreasing(batch);
                                    for (long id : batch) {
                                        ids.add(id);
                                    }
                                }
                                case 1 -> ids.add(client.nextIdAsync().join());
                                case 2 -> {
                                    long[] batch = client.batchAsync(2 + i % 7).join();
                                    assertIncreasing(batch);
                                    for (long id : batch) {
                                        ids.add(id);
                                    }
                                }
                                default -> ids.add(client.nextId());
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> worker : workers) {
                    worker.get(50, TimeUnit.SECONDS);
                }
            } finally {
                pool.shutdownNow();
            }
            assertUnique(ids);
            assertTrue(ids.size() > 16 * 300, "only " + ids.size() + " IDs");
            for (long id : ids) {
                assertEquals(1, LAYOUT.decode(id).workerId());
            }
        }
    }

    @ParameterizedTest(name = "buffered = {0}")
    @ValueSource(booleans = {false, true})
    void callsMoveToTheOtherServerWhenOneIsKilled(boolean buffered) throws Exception {
        try (SnowmintServer first = SnowmintServer.start(1);
                SnowmintServer second = SnowmintServer.start(2);
                // Both spellings of a plain-text endpoint.
                SnowmintClient client = builder(buffered, first.url(), second.address())
                        .timeout(Duration.ofMillis(500))
                        .build()) {
            // Warm the JVM's gRPC stack up first, so that no call misses the short timeout
            // for that and moves to the second server before the kill.
            try (SnowmintClient warm = SnowmintClient.builder(first.url()).build()) {
                warm.batch(10);
            }
            assertEquals(1, LAYOUT.decode(client.batch(1)[0]).workerId(), "the first endpoint serves first");
            ConcurrentLinkedQueue<Long> ids = new ConcurrentLinkedQueue<>();
            ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> callers = new ArrayList<>();
            for (int t = 0; t < 8; t++) {
                int thread = t;
                Thread caller = new Thread(() -> {
                    for (int i = 0; !stop.get(); i++) {
                        try {
                            if ((thread + i) % 3 == 0) {
                                long[] batch = client.batch(20);
                                assertIncreasing(batch);
                                for (long id : batch) {
                                    ids.add(id);
                                }
                            } else {
                                ids.add(client.nextId());
                            }
                        } catch (RuntimeException | AssertionError e) {
                            errors.add(e);
                        }
                    }
                });
                caller.start();
                callers.add(caller);
            }
            try {
                Thread.sleep(400);
                int before = ids.size();
                first.kill();
                Thread.sleep(800);
                assertTrue(ids.size() > before, "no IDs after the kill");
            } finally {
                stop.set(true);
                for (Thread caller : callers) {
                    caller.join(10_000);
                }
            }
            assertTrue(errors.isEmpty(), () -> errors.size() + " calls failed; first: " + errors.peek());
            assertUnique(ids);
            Set<Long> workers = new HashSet<>();
            for (long id : ids) {
                workers.add(LAYOUT.decode(id).workerId());
            }
            assertEquals(Set.of(1L, 2L), workers, "IDs from both servers");
            // Still served, by the survivor (a batch comes straight from a server; the buffer
            // may still hold valid IDs the killed one minted).
            assertEquals(2, LAYOUT.decode(client.batch(3)[0]).workerId());
        }
    }

    @Test
    void aRefusingServerIsPassedOverAndAloneGivesARetriableError() throws Exception {
        try (SnowmintServer refusing = SnowmintServer.startRefusing(3);
                SnowmintServer good = SnowmintServer.start(4)) {
            // The refusing server does refuse, as UNAVAILABLE.
            ManagedChannel channel = Grpc.newChannelBuilder(refusing.address(),
                    InsecureChannelCredentials.create()).build();
            try {
                StatusRuntimeException refusal = assertThrows(StatusRuntimeException.class,
                        () -> IdServiceGrpc.newBlockingStub(channel).withDeadlineAfter(2, TimeUnit.SECONDS)
                                .nextId(NextIdRequest.getDefaultInstance()));
                assertEquals(Status.Code.UNAVAILABLE, refusal.getStatus().getCode(), refusal.toString());
            } finally {
                channel.shutdownNow();
            }

            // Listed first, it is passed over for the good one.
            try (SnowmintClient client = SnowmintClient.builder(refusing.url(), good.url()).build()) {
                assertEquals(4, LAYOUT.decode(client.nextId()).workerId());
                for (long id : client.batch(10)) {
                    assertEquals(4, LAYOUT.decode(id).workerId());
                }
            }

            // Alone, it gives a clear, retriable error within a bounded time, buffered or not.
            for (boolean buffered : new boolean[] {false, true}) {
                try (SnowmintClient alone = builder(buffered, refusing.url())
                        .timeout(Duration.ofMillis(300))
                        .build()) {
                    long start = System.nanoTime();
                    SnowmintUnavailableException error =
                            assertThrows(SnowmintUnavailableException.class, alone::nextId);
                    assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(3), "took too long");
                    assertTrue(error.isRetriable());
                    assertEquals(Status.Code.UNAVAILABLE, error.status().getCode());
                    assertTrue(error.getMessage().contains(refusing.url()), error.getMessage());
                    assertTrue(error.getMessage().contains("reservation"), error.getMessage());
                    CompletionException async =
                            assertThrows(CompletionException.class, () -> alone.batchAsync(5).join());
                    assertTrue(async.getCause() instanceof SnowmintUnavailableException, async.toString());
                }
            }
        }
    }

    @Test
    void aBufferedCallerLoopingOnADownFleetDoesNotHammerIt() throws Exception {
        try (SnowmintServer refusing = SnowmintServer.startRefusing(11);
                SnowmintClient client = SnowmintClient.builder(refusing.url()).buffer(BufferConfig.defaults()).build()) {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
            int failures = 0;
            while (System.nanoTime() < until) {
                assertThrows(SnowmintUnavailableException.class, client::nextId);
                failures++;
            }
            // After each failed refill, none starts for 100 ms: about ten refills of two
            // attempts in the second, where a caller looping without the pause makes hundreds.
            double calls = refusing.metric(
                    "snowmint_requests_total{code=\"Unavailable\",method=\"BatchIds\",protocol=\"grpc\"}");
            assertTrue(calls <= 60, calls + " refused BatchIds calls in a second, " + failures + " failures");
            assertTrue(failures >= 3, failures + " failures");
        }
    }

    @Test
    void staleBufferedIdsAreDroppedNotHandedOut() throws Exception {
        try (SnowmintServer server = SnowmintServer.start(5);
                SnowmintClient client = SnowmintClient.builder(server.url())
                        // No refill before the batch is used up: only the age limit can replace it.
                        .buffer(new BufferConfig(100, 0, 1, Duration.ofMillis(200)))
                        .build()) {
            Set<Long> handedOut = new HashSet<>();
            long first = client.nextId();
            handedOut.add(first);
            for (int round = 0; round < 3; round++) {
                Thread.sleep(300); // past the age limit: the rest of the batch is stale
                long asked = System.currentTimeMillis();
                long fresh = client.nextId();
                DecodedId decoded = LAYOUT.decode(fresh);
                // Minted after it was asked for, so from a new batch; the stale one was minted
                // at least 300 ms before.
                assertTrue(decoded.unixMs() >= asked - 2, "ID from " + decoded.time() + ", asked at " + asked);
                assertTrue(decoded.unixMs() - LAYOUT.decode(first).unixMs() >= 300 * (round + 1));
                assertTrue(handedOut.add(fresh), "handed out twice: " + fresh);
                for (int i = 0; i < 50; i++) {
                    assertTrue(handedOut.add(client.nextId()), "an ID handed out twice");
                }
            }
        }
    }

    @Test
    void otherErrorsAreReturnedAsTheServerSaidThem() throws Exception {
        try (SnowmintServer first = SnowmintServer.start(6);
                SnowmintServer second = SnowmintServer.start(7);
                SnowmintClient client = SnowmintClient.builder(first.url(), second.url()).build()) {
            SnowmintRejectedException error = assertThrows(SnowmintRejectedException.class, () -> client.batch(0));
            assertEquals(Status.Code.INVALID_ARGUMENT, error.status().getCode());
            assertFalse(error.isRetriable());
            assertTrue(error.getMessage().contains("count must be between 1 and"), error.getMessage());
            String invalid =
                    "snowmint_requests_total{code=\"InvalidArgument\",method=\"BatchIds\",protocol=\"grpc\"}";
            assertEquals(1.0, first.metric(invalid));
            assertEquals(0.0, second.metric(invalid), "the bad request was tried on another endpoint");
            assertThrows(IllegalArgumentException.class, () -> client.batchAsync(-1));
        }
    }

    @Test
    void aClosedClientSaysSo() throws Exception {
        try (SnowmintServer server = SnowmintServer.start(8)) {
            SnowmintClient client = SnowmintClient.builder(server.url()).timeout(Duration.ofSeconds(1)).build();
            client.nextId();
            // A call in flight when the client closes ends with the same error, not a server's.
            server.pause();
            CompletableFuture<long[]> inFlight = client.batchAsync(10);
            Thread.sleep(100);
            client.close();
            CompletionException cut = assertThrows(CompletionException.class, inFlight::join);
            assertTrue(cut.getCause() instanceof IllegalStateException, cut.toString());
            IllegalStateException error = assertThrows(IllegalStateException.class, client::nextId);
            assertTrue(error.getMessage().contains("closed"), error.getMessage());
            assertThrows(IllegalStateException.class, () -> client.batch(3));
        }
    }

    @Test
    void aCallerTimeoutBoundsTheWholeCall() throws Exception {
        try (SnowmintServer refusing = SnowmintServer.startRefusing(10)) {
            for (boolean buffered : new boolean[] {false, true}) {
                // Left alone, this call would go on for 50 attempts of a second each.
                try (SnowmintClient client = builder(buffered, refusing.url()).attempts(50).build()) {
                    long start = System.nanoTime();
                    SnowmintDeadlineExceededException error = assertThrows(SnowmintDeadlineExceededException.class,
                            () -> client.nextId(Duration.ofMillis(300)));
                    long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                    assertTrue(took >= 290 && took < 2000, "took " + took + " ms");
                    assertEquals(Status.Code.DEADLINE_EXCEEDED, error.status().getCode(), error.getMessage());
                    assertTrue(error.isRetriable());
                    CompletionException async = assertThrows(CompletionException.class,
                            () -> client.batchAsync(5, Duration.ofMillis(100)).join());
                    assertTrue(async.getCause() instanceof SnowmintDeadlineExceededException, async.toString());
                }
            }
        }
    }

    @Test
    void badEndpointsAreRefusedAtBuild() {
        for (String endpoint : List.of("grpc://127.0.0.1:50051", "http://127.0.0.1", "127.0.0.1", "http://:50051",
                "127.0.0.1:port", "http://127.0.0.1:50051/path")) {
            IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                    () -> SnowmintClient.builder(endpoint).build());
            assertTrue(error.getMessage().contains(endpoint), error.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> SnowmintClient.builder().build());
        SnowmintClient.builder("127.0.0.1:1", "http://[::1]:2", "https://localhost:3").build().close();
    }

    private static SnowmintClient.Builder builder(boolean buffered, String... endpoints) {
        SnowmintClient.Builder builder = SnowmintClient.builder(endpoints);
        // A small buffer, so the tests go through many refills.
        return buffered ? builder.buffer(BufferConfig.defaults().withBatch(256).withLowWater(512)) : builder;
    }

    private static void assertIncreasing(long[] ids) {
        for (int i = 1; i < ids.length; i++) {
            if (ids[i - 1] >= ids[i]) {
                fail("batch not increasing at " + i + ": " + ids[i - 1] + " then " + ids[i]);
            }
        }
    }

    private static void assertUnique(Collection<Long> ids) {
        Set<Long> seen = new HashSet<>(ids);
        assertEquals(ids.size(), seen.size(), (ids.size() - seen.size()) + " duplicate IDs among " + ids.size());
    }
}
