package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.snowmint.v1.BatchUuidsRequest;
import dev.snowmint.v1.BatchUuidsResponse;
import dev.snowmint.v1.IdServiceGrpc;
import dev.snowmint.v1.NextUuidRequest;
import dev.snowmint.v1.NextUuidResponse;
import io.grpc.Grpc;
import io.grpc.InsecureServerCredentials;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** {@code nextUuid} and {@code batchUuids} against real snowmint processes. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class UuidClientTest {

    private static final Layout LAYOUT = Layout.snowmint();
    private static final String INVALID_BATCH_UUIDS =
            "snowmint_requests_total{code=\"InvalidArgument\",method=\"BatchUuids\",protocol=\"grpc\"}";

    @Test
    void uuidsAreVersion7DecodeWithTheLayoutAndIncrease() throws Exception {
        try (SnowmintServer server = SnowmintServer.start(21);
                SnowmintClient client = SnowmintClient.builder(server.url()).build()) {
            long before = System.currentTimeMillis();
            UUID first = client.nextUuid();
            long after = System.currentTimeMillis();
            assertEquals(7, first.version(), first.toString());
            assertEquals(2, first.variant(), first.toString());
            DecodedUuid decoded = LAYOUT.decodeUuid(first);
            assertEquals(21, decoded.slot());
            assertEquals(21, LAYOUT.decode(decoded.id()).workerId());
            assertTrue(decoded.id() > 0);
            assertTrue(decoded.unixMs() >= before - 2 && decoded.unixMs() <= after + 2,
                    decoded.time() + " not between " + before + " and " + after);
            assertEquals(first, Uuids.parseUuid(first.toString()));

            List<UUID> one = client.batchUuids(1);
            assertEquals(1, one.size());
            assertTrue(Uuids.compare(first, one.get(0)) < 0, first + " then " + one.get(0));

            List<UUID> batch = client.batchUuids(1000);
            assertEquals(1000, batch.size());
            assertStrictlyIncreasing(one.get(0), batch);
            assertEquals(1000, new HashSet<>(batch).size(), "duplicate UUIDs");
            for (UUID uuid : batch) {
                DecodedUuid d = LAYOUT.decodeUuid(uuid);
                assertEquals(21, d.slot(), uuid.toString());
            }
            assertThrows(UnsupportedOperationException.class, () -> batch.set(0, first));

            UUID later = client.nextUuid();
            assertTrue(Uuids.compare(batch.get(batch.size() - 1), later) < 0, "nextUuid after the batch: " + later);
            assertEquals(7, later.version());

            // The other forms: a caller's timeout, and futures.
            UUID bounded = client.nextUuid(Duration.ofSeconds(5));
            UUID async = client.nextUuidAsync().join();
            UUID asyncBounded = client.nextUuidAsync(Duration.ofSeconds(5)).join();
            List<UUID> batchBounded = client.batchUuids(3, Duration.ofSeconds(5));
            List<UUID> batchAsync = client.batchUuidsAsync(4).join();
            List<UUID> batchAsyncBounded = client.batchUuidsAsync(5, Duration.ofSeconds(5)).join();
            List<UUID> all = new ArrayList<>(List.of(later, bounded, async, asyncBounded));
            all.addAll(batchBounded);
            all.addAll(batchAsync);
            all.addAll(batchAsyncBounded);
            assertEquals(4 + 3 + 4 + 5, all.size());
            assertStrictlyIncreasing(batch.get(batch.size() - 1), all);
        }
    }

    @Test
    void aBatchAsLargeAsTheServerAllowsArrives() throws Exception {
        // 100,000 UUIDs with their texts: some 5.6 MB, past grpc-java's default 4 MiB limit.
        try (SnowmintServer server = SnowmintServer.start(29, "--max-batch", "100000");
                SnowmintClient client = SnowmintClient.builder(server.url()).timeout(Duration.ofSeconds(5)).build()) {
            List<UUID> batch = client.batchUuids(100_000);
            assertEquals(100_000, batch.size());
            assertStrictlyIncreasing(new UUID(0, 0), batch);
            assertEquals(29, LAYOUT.decodeUuid(batch.get(99_999)).slot());
            SnowmintRejectedException above =
                    assertThrows(SnowmintRejectedException.class, () -> client.batchUuids(100_001));
            assertEquals(Status.Code.INVALID_ARGUMENT, above.status().getCode(), above.getMessage());
        }
    }

    @Test
    void aBatchOfZeroIsTheServersRejectionNotFailedOver() throws Exception {
        try (SnowmintServer first = SnowmintServer.start(22);
                SnowmintServer second = SnowmintServer.start(23);
                SnowmintClient client = SnowmintClient.builder(first.url(), second.url()).build()) {
            SnowmintRejectedException error =
                    assertThrows(SnowmintRejectedException.class, () -> client.batchUuids(0));
            assertEquals(Status.Code.INVALID_ARGUMENT, error.status().getCode(), error.getMessage());
            assertFalse(error.isRetriable());
            assertTrue(error.getMessage().contains(first.url()), error.getMessage());
            assertEquals(1.0, first.metric(INVALID_BATCH_UUIDS));
            assertEquals(0.0, second.metric(INVALID_BATCH_UUIDS), "the bad request was tried on another endpoint");
            CompletionException async = assertThrows(CompletionException.class, () -> client.batchUuidsAsync(0).join());
            assertTrue(async.getCause() instanceof SnowmintRejectedException, async.toString());
            assertThrows(IllegalArgumentException.class, () -> client.batchUuids(-1));
            assertThrows(IllegalArgumentException.class, () -> client.batchUuidsAsync(-1));
            // Still served by the first endpoint: a rejection moves nothing.
            assertEquals(22, LAYOUT.decodeUuid(client.nextUuid()).slot());
        }
    }

    @Test
    void uuidCallsFailOverAsIdCallsDo() throws Exception {
        try (SnowmintServer down = SnowmintServer.start(24);
                SnowmintServer up = SnowmintServer.start(25)) {
            down.kill();
            try (SnowmintClient client = SnowmintClient.builder(down.url(), up.url()).build()) {
                assertEquals(25, LAYOUT.decodeUuid(client.nextUuid()).slot(), "nextUuid past a down endpoint");
                assertEquals(25, LAYOUT.decode(client.nextId()).workerId(), "nextId, likewise");
            }
            try (SnowmintClient client = SnowmintClient.builder(down.url(), up.url()).build()) {
                for (UUID uuid : client.batchUuids(10)) {
                    assertEquals(25, LAYOUT.decodeUuid(uuid).slot(), "batchUuids past a down endpoint");
                }
            }
        }
        try (SnowmintServer refusing = SnowmintServer.startRefusing(26);
                SnowmintServer good = SnowmintServer.start(27)) {
            // A server that refuses (UNAVAILABLE) is passed over.
            try (SnowmintClient client = SnowmintClient.builder(refusing.url(), good.url()).build()) {
                assertEquals(27, LAYOUT.decodeUuid(client.nextUuid()).slot());
            }
            // Alone, it gives the retriable error within a bounded time.
            try (SnowmintClient alone = SnowmintClient.builder(refusing.url()).timeout(Duration.ofMillis(300)).build()) {
                long start = System.nanoTime();
                SnowmintUnavailableException error = assertThrows(SnowmintUnavailableException.class, alone::nextUuid);
                assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(3), "took too long");
                assertEquals(Status.Code.UNAVAILABLE, error.status().getCode());
                assertTrue(error.isRetriable());
                assertTrue(error.getMessage().contains("reservation"), error.getMessage());
                CompletionException async = assertThrows(CompletionException.class, () -> alone.batchUuidsAsync(5).join());
                assertTrue(async.getCause() instanceof SnowmintUnavailableException, async.toString());
            }
            // A caller's timeout bounds the whole call.
            try (SnowmintClient client = SnowmintClient.builder(refusing.url()).attempts(50).build()) {
                long start = System.nanoTime();
                SnowmintDeadlineExceededException late = assertThrows(SnowmintDeadlineExceededException.class,
                        () -> client.nextUuid(Duration.ofMillis(300)));
                long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                assertTrue(took >= 290 && took < 2000, "took " + took + " ms");
                assertEquals(Status.Code.DEADLINE_EXCEEDED, late.status().getCode());
                assertThrows(SnowmintDeadlineExceededException.class, () -> client.batchUuids(5, Duration.ofMillis(100)));
            }
        }
    }

    @Test
    void aClosedClientSaysSo() throws Exception {
        try (SnowmintServer server = SnowmintServer.start(28)) {
            SnowmintClient client = SnowmintClient.builder(server.url()).build();
            client.nextUuid();
            server.pause();
            CompletableFuture<List<UUID>> inFlight = client.batchUuidsAsync(10);
            Thread.sleep(100);
            client.close();
            CompletionException cut = assertThrows(CompletionException.class, inFlight::join);
            assertTrue(cut.getCause() instanceof IllegalStateException, cut.toString());
            assertThrows(IllegalStateException.class, client::nextUuid);
            assertThrows(IllegalStateException.class, () -> client.batchUuids(3));
            server.resume();
        }
    }

    @Test
    void aMalformedAnswerIsAnError() throws IOException, InterruptedException {
        // A fake server whose UUIDs are not 16 bytes, or too few.
        Server fake = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
                .addService(new IdServiceGrpc.IdServiceImplBase() {
                    @Override
                    public void nextUuid(NextUuidRequest request, StreamObserver<NextUuidResponse> response) {
                        response.onNext(NextUuidResponse.newBuilder().setUuid(ByteString.copyFrom(new byte[15])).build());
                        response.onCompleted();
                    }

                    @Override
                    public void batchUuids(BatchUuidsRequest request, StreamObserver<BatchUuidsResponse> response) {
                        // For 2: a second UUID of 17 bytes; for 3: two UUIDs; else as asked.
                        int count = request.getCount();
                        BatchUuidsResponse.Builder answer = BatchUuidsResponse.newBuilder();
                        for (int i = 0; i < (count == 3 ? 2 : count); i++) {
                            answer.addUuids(ByteString.copyFrom(new byte[count == 2 && i == 1 ? 17 : 16]));
                        }
                        response.onNext(answer.build());
                        response.onCompleted();
                    }
                })
                .build()
                .start();
        try (SnowmintClient client = SnowmintClient.builder("127.0.0.1:" + fake.getPort()).build()) {
            SnowmintRejectedException short15 = assertThrows(SnowmintRejectedException.class, client::nextUuid);
            assertEquals(Status.Code.INTERNAL, short15.status().getCode(), short15.getMessage());
            assertTrue(short15.getMessage().contains("15 bytes"), short15.getMessage());
            SnowmintRejectedException long17 = assertThrows(SnowmintRejectedException.class, () -> client.batchUuids(2));
            assertTrue(long17.getMessage().contains("17 bytes"), long17.getMessage());
            SnowmintRejectedException few = assertThrows(SnowmintRejectedException.class, () -> client.batchUuids(3));
            assertTrue(few.getMessage().contains("asked for 3 UUIDs, got 2"), few.getMessage());
            assertEquals(List.of(new UUID(0, 0)), client.batchUuids(1));
        } finally {
            fake.shutdownNow();
            fake.awaitTermination(5, TimeUnit.SECONDS);
        }
    }

    /** Strictly increasing after {@code previous}, as unsigned 128-bit numbers and as text. */
    private static void assertStrictlyIncreasing(UUID previous, List<UUID> uuids) {
        UUID last = previous;
        for (int i = 0; i < uuids.size(); i++) {
            UUID uuid = uuids.get(i);
            assertTrue(Uuids.compare(last, uuid) < 0, "not increasing at " + i + ": " + last + " then " + uuid);
            assertTrue(last.toString().compareTo(uuid.toString()) < 0, "text not increasing at " + i);
            assertTrue(Uuids.formatUuid(last).compareTo(Uuids.formatUuid(uuid)) < 0, "text not increasing at " + i);
            last = uuid;
        }
    }
}
