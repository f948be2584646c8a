package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ChannelCredentials;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The rules of clients/README.md that every client keeps alike, against real servers (issue 30):
 * the two errors a call ends with, TLS settings, what each call sends, a caller's deadline that
 * moves nothing, shared calls within a lower --max-batch, close() and the rate-of-use buffer.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ContractTest {

    private static final Layout LAYOUT = Layout.snowmint();
    private static final String OK_NEXT = "snowmint_requests_total{code=\"OK\",method=\"NextId\",protocol=\"grpc\"}";
    private static final String OK_BATCH = "snowmint_requests_total{code=\"OK\",method=\"BatchIds\",protocol=\"grpc\"}";

    @ParameterizedTest(name = "buffered = {0}")
    @ValueSource(booleans = {false, true})
    void everyAttemptFailingIsUnavailableAndTheCallersTimeoutIsDeadlineExceeded(boolean buffered) throws Exception {
        try (SnowmintServer hung = SnowmintServer.start(40)) {
            hung.pause();
            try (SnowmintClient client = builder(buffered, hung.url()).timeout(Duration.ofMillis(200)).attempts(2).build()) {
                SnowmintUnavailableException failed = assertThrows(SnowmintUnavailableException.class, client::nextId);
                assertEquals(Status.Code.UNAVAILABLE, failed.status().getCode(), failed.getMessage());
            }
            try (SnowmintClient client = builder(buffered, hung.url()).timeout(Duration.ofMillis(200)).attempts(2).build()) {
                SnowmintDeadlineExceededException late = assertThrows(SnowmintDeadlineExceededException.class,
                        () -> client.nextId(Duration.ofMillis(150)));
                assertEquals(Status.Code.DEADLINE_EXCEEDED, late.status().getCode());
                assertTrue(late.isRetriable());
            }
        }
    }

    @Test
    void batchOfOneIsOneBatchIdsAndABufferSendsNothingBeforeItIsUsed() throws Exception {
        try (SnowmintServer server = SnowmintServer.start(41);
                SnowmintClient client = SnowmintClient.builder(server.url()).build()) {
            client.nextId();
            assertEquals(List.of(1.0, 0.0), List.of(server.metric(OK_NEXT), server.metric(OK_BATCH)));
            assertEquals(1, client.batch(1).length);
            assertEquals(List.of(1.0, 1.0), List.of(server.metric(OK_NEXT), server.metric(OK_BATCH)));
            try (SnowmintClient buffered = SnowmintClient.builder(server.url()).buffer(BufferConfig.defaults()).build()) {
                Thread.sleep(300);
                assertEquals(1.0, server.metric(OK_BATCH), "a buffered client fetched IDs before it was used");
                buffered.nextId();
                assertTrue(server.metric(OK_BATCH) >= 2.0, "a buffered nextId() sent no BatchIds");
            }
        }
    }

    @Test
    void aCallersDeadlineMovesTheClientToNoOtherEndpoint() throws Exception {
        try (SnowmintServer slow = SnowmintServer.start(42);
                SnowmintServer other = SnowmintServer.start(43);
                SnowmintClient client = SnowmintClient.builder(slow.url(), other.url())
                        .timeout(Duration.ofSeconds(5))
                        .build()) {
            assertEquals(42, LAYOUT.decode(client.batch(1)[0]).workerId());
            slow.pause();
            for (int i = 0; i < 3; i++) {
                assertThrows(SnowmintDeadlineExceededException.class, () -> client.batch(2, Duration.ofMillis(100)));
                assertThrows(SnowmintDeadlineExceededException.class, () -> client.nextId(Duration.ofMillis(100)));
            }
            slow.resume();
            assertEquals(42, LAYOUT.decode(client.batch(2)[0]).workerId(), "a caller's deadline moved the client");
        }
    }

    @ParameterizedTest(name = "buffered = {0}")
    @ValueSource(booleans = {false, true})
    void aServerWithASmallMaxBatchServesBursts(boolean buffered) throws Exception {
        try (SnowmintServer server = SnowmintServer.start(44, "--max-batch", "100");
                SnowmintClient client = builder(buffered, server.url()).build()) {
            List<CompletableFuture<Long>> calls = new ArrayList<>();
            for (int i = 0; i < 300; i++) {
                calls.add(client.nextIdAsync());
            }
            Set<Long> ids = new HashSet<>();
            for (CompletableFuture<Long> call : calls) {
                ids.add(call.join());
            }
            assertEquals(300, ids.size());
        }
    }

    @ParameterizedTest(name = "buffered = {0}")
    @ValueSource(booleans = {false, true})
    void closeEndsEveryWaitingCallAtOnce(boolean buffered) throws Exception {
        try (SnowmintServer hung = SnowmintServer.start(45)) {
            hung.pause();
            SnowmintClient client = builder(buffered, hung.url()).timeout(Duration.ofSeconds(10)).build();
            List<CompletableFuture<?>> waiting = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                waiting.add(client.nextIdAsync());
            }
            waiting.add(client.batchAsync(5));
            Thread.sleep(300);
            long closed = System.nanoTime();
            client.close();
            for (CompletableFuture<?> call : waiting) {
                ExecutionException error = assertThrows(ExecutionException.class, () -> call.get(5, TimeUnit.SECONDS));
                assertTrue(error.getCause() instanceof IllegalStateException, error.toString());
            }
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - closed);
            assertTrue(took < 500, "the waiting calls ended " + took + " ms after close()");
        }
    }

    @Test
    void theBufferRefillsAtTheRateOfUse() throws Exception {
        try (SnowmintServer server = SnowmintServer.start(46);
                SnowmintClient client = SnowmintClient.builder(server.url()).buffer(BufferConfig.defaults()).build()) {
            Set<Long> ids = new HashSet<>();
            long start = System.nanoTime();
            for (int n = 0; n < 40; n++) {
                long wait = start + TimeUnit.MILLISECONDS.toNanos(100L * n) - System.nanoTime();
                if (wait > 0) {
                    TimeUnit.NANOSECONDS.sleep(wait);
                }
                assertTrue(ids.add(client.nextId()));
            }
            double minted = server.metric("snowmint_ids_issued_total");
            assertTrue(minted <= 3 * 40 + 20, minted + " IDs minted for 40 used in 4 s");
        }
    }

    @Test
    void mutualTls() throws Exception {
        Path dir = Files.createTempDirectory("snowmint-java-tls");
        try {
            openssl(dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca-key.pem");
            openssl(dir, "req", "-x509", "-new", "-key", "ca-key.pem", "-subj", "/CN=test CA", "-days", "2",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                    "-out", "ca.pem");
            for (String[] leaf : new String[][] {
                {"server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"},
                {"client", "subjectAltName=DNS:client\nextendedKeyUsage=clientAuth\n"}}) {
                String name = leaf[0];
                Files.writeString(dir.resolve(name + ".ext"), leaf[1]);
                openssl(dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name + "-key.pem");
                openssl(dir, "req", "-new", "-key", name + "-key.pem", "-subj", "/CN=" + name, "-out", name + ".csr");
                openssl(dir, "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                        "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem");
            }
            try (SnowmintServer server = SnowmintServer.start(47, "--tls-cert", dir.resolve("server.pem").toString(),
                    "--tls-key", dir.resolve("server-key.pem").toString(), "--tls-client-ca", dir.resolve("ca.pem").toString())) {
                ChannelCredentials tls = TlsChannelCredentials.newBuilder()
                        .trustManager(dir.resolve("ca.pem").toFile())
                        .keyManager(dir.resolve("client.pem").toFile(), dir.resolve("client-key.pem").toFile())
                        .build();
                try (SnowmintClient client = SnowmintClient.builder("https://" + server.address()).credentials(tls).build()) {
                    assertEquals(47, LAYOUT.decode(client.nextId()).workerId());
                    assertEquals(5, client.batch(5).length);
                }
            }
        } finally {
            try (Stream<Path> paths = Files.walk(dir)) {
                paths.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
            }
        }
    }

    static void openssl(Path dir, String... args) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of("openssl"));
        command.addAll(List.of(args));
        Process process = new ProcessBuilder(command).directory(dir.toFile()).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        if (!process.waitFor(30, TimeUnit.SECONDS) || process.exitValue() != 0) {
            throw new IOException("openssl " + String.join(" ", args) + " failed");
        }
    }

    private static SnowmintClient.Builder builder(boolean buffered, String... endpoints) {
        SnowmintClient.Builder builder = SnowmintClient.builder(endpoints);
        return buffered ? builder.buffer(BufferConfig.defaults()) : builder;
    }
}
