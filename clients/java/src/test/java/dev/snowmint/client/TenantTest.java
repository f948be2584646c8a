package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import java.io.File;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.SocketTimeoutException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.function.Executable;

/**
 * Credentials and quota waits (clients/README.md, "Credentials" and "Quota waits") against real
 * servers started with a policy: the token every call carries, refusals after one attempt,
 * quota refusals waited out on the same endpoint (or ended at once when the wait could not be
 * used), and a token that never shows.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class TenantTest {

    /** Tenant a: rate 5 (a refusal says to wait up to 200 ms); b: UUIDs only; c: rate 1; d: no limit. */
    private static final String POLICY = """
            [tenant.a]
            tokens = ["a"]
            allow = ["ids", "uuids", "sequences"]
            rate = 5
            burst = 1

            [tenant.b]
            tokens = ["b"]
            allow = ["uuids"]

            [tenant.c]
            tokens = ["c"]
            allow = ["ids"]
            rate = 1
            burst = 1

            [tenant.d]
            tokens = ["d"]
            allow = ["ids", "uuids", "sequences"]
            """;
    private static final String QUOTA_REFUSALS = "snowmint_tenant_refusals_total{reason=\"quota\",tenant=\"%s\"}";

    private static SnowmintServer.Token a;
    private static SnowmintServer.Token b;
    private static SnowmintServer.Token c;
    private static SnowmintServer.Token d;
    /** A token of the right form that the servers do not know. */
    private static SnowmintServer.Token unknown;

    @BeforeAll
    static void makeTokens() {
        a = SnowmintServer.newToken("a");
        b = SnowmintServer.newToken("b");
        c = SnowmintServer.newToken("c");
        d = SnowmintServer.newToken("d");
        unknown = SnowmintServer.newToken("unknown");
    }

    private static SnowmintServer start(int workerId, String... extra) {
        return SnowmintServer.startWithPolicy(workerId, POLICY, List.of(a.line(), b.line(), c.line(), d.line()), extra);
    }

    @Test
    void everyCallCarriesTheToken() {
        try (SnowmintServer server = start(60, "--create-sequences-on-use");
                SnowmintClient client = SnowmintClient.builder(server.url()).token(d.token()).build();
                SnowmintClient buffered = SnowmintClient.builder(server.url()).token(d.token())
                        .buffer(BufferConfig.defaults()).sequencePrefetch(10).build()) {
            assertTrue(client.nextId() > 0);
            assertTrue(client.nextIdAsync().join() > 0);
            assertEquals(3, client.batch(3).length);
            assertEquals(3, client.batchAsync(3).join().length);
            assertEquals(7, client.nextUuid().version());
            assertEquals(2, client.batchUuids(2).size());
            assertEquals(1, client.nextValue("s"));
            assertEquals(2, client.batchValues("s", 2).length);
            // The buffer's refills and the sequence prefetch's are calls too.
            assertTrue(buffered.nextId() > 0);
            assertEquals(4, buffered.nextValue("s"));
        }
    }

    @Test
    void theTokenCrossesTls() throws Exception {
        Path dir = Files.createTempDirectory("snowmint-java-tenant-tls");
        try {
            ContractTest.openssl(dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca-key.pem");
            ContractTest.openssl(dir, "req", "-x509", "-new", "-key", "ca-key.pem", "-subj", "/CN=test CA", "-days", "2",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                    "-out", "ca.pem");
            Files.writeString(dir.resolve("server.ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
            ContractTest.openssl(dir, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "server-key.pem");
            ContractTest.openssl(dir, "req", "-new", "-key", "server-key.pem", "-subj", "/CN=server", "-out", "server.csr");
            ContractTest.openssl(dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                    "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem");
            try (SnowmintServer server = start(61, "--tls-cert", dir.resolve("server.pem").toString(),
                    "--tls-key", dir.resolve("server-key.pem").toString())) {
                String endpoint = "https://" + server.address();
                try (SnowmintClient client = SnowmintClient.builder(endpoint).token(d.token())
                        .credentials(TlsChannelCredentials.newBuilder().trustManager(dir.resolve("ca.pem").toFile()).build())
                        .build()) {
                    assertEquals(61, Layout.snowmint().decode(client.nextId()).workerId());
                }
                try (SnowmintClient client = SnowmintClient.builder(endpoint)
                        .credentials(TlsChannelCredentials.newBuilder().trustManager(dir.resolve("ca.pem").toFile()).build())
                        .build()) {
                    assertRefused(Status.Code.UNAUTHENTICATED, client::nextId, null);
                }
            }
        } finally {
            try (Stream<Path> paths = Files.walk(dir)) {
                paths.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
            }
        }
    }

    @Test
    void unknownOrMissingCredentialsAndCallsNotAllowedAreRefusedAfterOneAttempt() throws Exception {
        try (SnowmintServer server = start(62);
                ServerSocket second = silentEndpoint();
                SnowmintClient wrong = SnowmintClient.builder(server.url(), address(second)).token(unknown.token()).build();
                SnowmintClient none = SnowmintClient.builder(server.url(), address(second)).build();
                SnowmintClient onlyUuids = SnowmintClient.builder(server.url(), address(second)).token(b.token()).build()) {
            assertRefused(Status.Code.UNAUTHENTICATED, () -> wrong.batch(1), unknown.token());
            assertEquals(1, server.metric("snowmint_unauthenticated_calls_total{reason=\"unknown_token\"}"));
            assertRefused(Status.Code.UNAUTHENTICATED, none::nextId, null);
            assertEquals(1, server.metric("snowmint_unauthenticated_calls_total{reason=\"missing\"}"));
            assertRefused(Status.Code.PERMISSION_DENIED, onlyUuids::nextId, b.token());
            assertRefused(Status.Code.PERMISSION_DENIED, () -> onlyUuids.batchAsync(2).join(), b.token());
            assertEquals(7, onlyUuids.nextUuid().version(), "tenant b's own calls go through");
            assertNoConnection(second);
        }
    }

    @Test
    void aQuotaRefusalIsWaitedOutOnTheSameEndpoint() throws Exception {
        try (SnowmintServer server = start(63, "--create-sequences-on-use");
                ServerSocket second = silentEndpoint();
                SnowmintClient client = SnowmintClient.builder(server.url(), address(second)).token(a.token()).build()) {
            assertEquals(1, client.batch(1).length); // the burst of 1: the bucket is empty after it
            // Each call right after the last finds the bucket empty, is refused with about 200 ms
            // to wait, waits and is served: blocking and Async forms alike.
            List<Supplier<Object>> calls = List.of(
                    () -> client.batch(1),
                    () -> client.batchAsync(1).join(),
                    client::nextId,
                    () -> client.nextIdAsync().join(),
                    () -> client.nextUuidAsync().join(),
                    () -> client.batchUuids(1),
                    () -> client.nextValue("s"),
                    () -> client.batchValuesAsync("s", 1).join(),
                    () -> client.batch(1, Duration.ofSeconds(5)));
            // Bounds with room for a busy machine (a pause between two calls refills the bucket
            // in part): about 1.8 s in all, each call served.
            long first = System.nanoTime();
            for (Supplier<Object> call : calls) {
                long start = System.nanoTime();
                call.get();
                long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                assertTrue(took < 3000, "took " + took + " ms");
            }
            long all = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - first);
            assertTrue(all >= 1000, calls.size() + " calls over the rate took " + all + " ms");
            double refusals = server.metric(String.format(QUOTA_REFUSALS, "a"));
            assertTrue(refusals >= calls.size() - 2, refusals + " quota refusals for " + calls.size() + " calls");
            assertNoConnection(second);
        }
    }

    @Test
    void aQuotaRefusalItCannotWaitOutEndsTheCallAtOnce() {
        try (SnowmintServer server = start(64);
                SnowmintClient client = SnowmintClient.builder(server.url()).token(c.token()).build();
                SnowmintClient once = SnowmintClient.builder(server.url()).token(c.token()).attempts(1).build()) {
            assertEquals(1, client.batch(1).length); // rate 1, burst 1: the next waits about 1 s
            // The caller's timeout comes before the delay: refused at once, as the server answered.
            long start = System.nanoTime();
            assertRefused(Status.Code.RESOURCE_EXHAUSTED, () -> client.batch(1, Duration.ofMillis(500)), c.token());
            assertRefused(Status.Code.RESOURCE_EXHAUSTED, () -> client.nextIdAsync(Duration.ofMillis(500)).join(), c.token());
            // No attempt left to use the wait on.
            assertRefused(Status.Code.RESOURCE_EXHAUSTED, () -> once.batch(1), c.token());
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(took < 900, "three refusals took " + took + " ms");
            // With time for the wait, the same call waits the delay out.
            start = System.nanoTime();
            assertEquals(1, client.batch(1, Duration.ofSeconds(5)).length);
            took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(took >= 400, "served after " + took + " ms");
        }
    }

    @Test
    void closeEndsAQuotaWaitAtOnce() throws Exception {
        try (SnowmintServer server = start(65)) {
            SnowmintClient client = SnowmintClient.builder(server.url()).token(c.token()).build();
            try {
                assertEquals(1, client.batch(1).length);
                CompletableFuture<long[]> waiting = client.batchAsync(1);
                long refusals = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
                while (server.metric(String.format(QUOTA_REFUSALS, "c")) < 1) {
                    assertTrue(System.nanoTime() < refusals, "no quota refusal");
                    Thread.sleep(10);
                }
                Thread.sleep(50);
                assertFalse(waiting.isDone(), "the call waits out the delay");
                long start = System.nanoTime();
                client.close();
                CompletionException error = assertThrows(CompletionException.class, waiting::join);
                long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                assertTrue(error.getCause() instanceof IllegalStateException, error.toString());
                assertTrue(took < 300, "ended " + took + " ms after close()");
                assertThrows(IllegalStateException.class, () -> client.batch(1));
            } finally {
                client.close(); // again, in case an assertion came first: it does nothing after the first
            }
        }
    }

    @Test
    void badTokensAreRefusedWithoutBeingShown() {
        String good = "smt_" + "x".repeat(40);
        for (String token : List.of("", "with space", "x".repeat(BearerToken.MAX_LENGTH + 1), "tab\there",
                "caf\u00e9-token", "line\nbreak", good + "\u007f")) {
            IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                    () -> SnowmintClient.builder("127.0.0.1:1").token(token));
            assertFalse(!token.isEmpty() && error.getMessage().contains(token), error.getMessage());
            assertFalse(error.getMessage().contains("smt_"), error.getMessage());
        }
        assertThrows(NullPointerException.class, () -> SnowmintClient.builder("127.0.0.1:1").token(null));
        SnowmintClient.builder("127.0.0.1:1").token("x".repeat(BearerToken.MAX_LENGTH)).build().close();
        SnowmintClient.builder("127.0.0.1:1").token("!~").build().close();
    }

    @Test
    void thePrintedFormDoesNotShowTheToken() {
        SnowmintClient.Builder builder = SnowmintClient.builder("127.0.0.1:1").token(a.token());
        assertFalse(builder.toString().contains(a.token()), builder.toString());
        try (SnowmintClient client = builder.build(); SnowmintClient none = SnowmintClient.builder("127.0.0.1:1").build()) {
            String printed = client.toString();
            assertTrue(printed.contains("127.0.0.1:1") && printed.contains("token=(redacted)"), printed);
            assertFalse(printed.contains(a.token()), printed);
            assertTrue(none.toString().contains("token=none"), none.toString());
        }
    }

    /**
     * {@code call} fails with a {@link SnowmintRejectedException} of {@code code} (through a
     * {@link CompletionException} too), whose message, status and printed form do not show
     * {@code token}.
     */
    private static void assertRefused(Status.Code code, Executable call, String token) {
        Throwable thrown = assertThrows(RuntimeException.class, call);
        Throwable error = thrown instanceof CompletionException ? thrown.getCause() : thrown;
        assertTrue(error instanceof SnowmintRejectedException, String.valueOf(error));
        SnowmintRejectedException rejected = (SnowmintRejectedException) error;
        assertEquals(code, rejected.status().getCode(), rejected.getMessage());
        if (token != null) {
            for (String shown : new String[] {rejected.getMessage(), rejected.toString(), rejected.status().toString()}) {
                assertFalse(shown.contains(token), shown);
            }
        }
    }

    /** A listening socket that never answers: a second endpoint that must never be called. */
    private static ServerSocket silentEndpoint() throws IOException {
        return new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    }

    private static String address(ServerSocket socket) {
        return "127.0.0.1:" + socket.getLocalPort();
    }

    /** No client connected to {@code socket}: nothing waits in its backlog. */
    private static void assertNoConnection(ServerSocket socket) throws IOException {
        socket.setSoTimeout(50);
        assertThrows(SocketTimeoutException.class, socket::accept, "a call went to the second endpoint");
    }
}
