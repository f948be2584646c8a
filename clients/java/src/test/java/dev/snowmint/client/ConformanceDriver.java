package dev.snowmint.client;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.grpc.TlsChannelCredentials;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/**
 * The Java client's driver for the conformance suite ({@code clients/conformance}): reads one
 * JSON request a line on stdin and answers each on stdout once its call has ended, many at
 * once. The ops and the error kinds are described in {@code clients/conformance/drivers.py}.
 * Not a test; run by the suite with the test classpath.
 */
public final class ConformanceDriver {

    private static final Gson GSON = new Gson();
    private static final PrintStream OUT = new PrintStream(System.out, false, StandardCharsets.UTF_8);

    private final Map<String, SnowmintClient> clients = new ConcurrentHashMap<>();
    private final ExecutorService requests = Executors.newCachedThreadPool(runnable -> {
        Thread thread = new Thread(runnable, "conformance-request");
        thread.setDaemon(true);
        return thread;
    });

    private ConformanceDriver() {}

    public static void main(String[] args) throws Exception {
        ConformanceDriver driver = new ConformanceDriver();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.isBlank()) {
                JsonObject request = JsonParser.parseString(line).getAsJsonObject();
                driver.requests.execute(() -> driver.answer(request));
            }
        }
        driver.requests.shutdown();
        driver.requests.awaitTermination(60, TimeUnit.SECONDS);
        System.exit(0);
    }

    private void answer(JsonObject request) {
        long start = System.nanoTime();
        JsonObject reply;
        try {
            reply = run(request);
            reply.addProperty("ok", true);
        } catch (Throwable error) {
            reply = new JsonObject();
            reply.addProperty("ok", false);
            reply.add("error", errorOf(error));
        }
        reply.add("id", request.get("id"));
        reply.addProperty("elapsed_ms", (System.nanoTime() - start) / 1e6);
        String text = GSON.toJson(reply);
        synchronized (OUT) {
            OUT.println(text);
            OUT.flush();
        }
    }

    /** The suite's form of an error: its kind, gRPC code and message. */
    private static JsonObject errorOf(Throwable error) {
        Throwable cause = error instanceof CompletionException && error.getCause() != null ? error.getCause() : error;
        JsonObject json = new JsonObject();
        String kind = "other";
        String code = null;
        if (cause instanceof SnowmintUnavailableException e) {
            kind = "unavailable";
            code = e.status().getCode().name();
        } else if (cause instanceof SnowmintRejectedException e) {
            kind = "rejected";
            code = e.status().getCode().name();
        } else if (cause instanceof SnowmintDeadlineExceededException e) {
            kind = "deadline";
            code = e.status().getCode().name();
        } else if (cause instanceof IllegalStateException e && String.valueOf(e.getMessage()).contains("closed")) {
            kind = "closed";
        } else if (cause instanceof OpaqueId.FormatException e) {
            kind = "opaque";
            json.addProperty("opaque_kind", e.kind().name().toLowerCase());
        } else if (cause instanceof IllegalArgumentException) {
            kind = "invalid";
        }
        json.addProperty("kind", kind);
        json.addProperty("code", code);
        json.addProperty("message", String.valueOf(cause));
        return json;
    }

    private JsonObject run(JsonObject request) throws Exception {
        String op = request.get("op").getAsString();
        switch (op) {
            case "client" -> {
                clients.put(request.get("name").getAsString(), newClient(request));
                return new JsonObject();
            }
            case "decode" -> {
                return decode(request);
            }
            case "opaque_format", "opaque_parse" -> {
                return opaque(request);
            }
            default -> {}
        }
        SnowmintClient client = clients.get(request.get("client").getAsString());
        Duration deadline = request.has("deadline_ms")
                ? Duration.ofNanos((long) (request.get("deadline_ms").getAsDouble() * 1e6))
                : null;
        JsonObject reply = new JsonObject();
        switch (op) {
            case "next_id" -> reply.add("ids", ids(new long[] {nextId(client, deadline)}));
            case "batch" -> {
                int n = request.get("n").getAsInt();
                reply.add("ids", ids(deadline == null ? client.batch(n) : client.batch(n, deadline)));
            }
            case "next_value" -> {
                String sequence = request.get("sequence").getAsString();
                long value = deadline == null ? client.nextValue(sequence) : client.nextValue(sequence, deadline);
                reply.addProperty("value", Long.toString(value));
            }
            case "close" -> client.close();
            case "burst" -> reply.add("results", burst(client, request.get("n").getAsInt()));
            case "loop" -> reply.add("calls", loop(client, request, deadline));
            default -> throw new IllegalArgumentException("unknown op " + op);
        }
        return reply;
    }

    private static long nextId(SnowmintClient client, Duration deadline) {
        return deadline == null ? client.nextId() : client.nextId(deadline);
    }

    private static JsonArray ids(long[] ids) {
        JsonArray array = new JsonArray();
        for (long id : ids) {
            array.add(Long.toUnsignedString(id));
        }
        return array;
    }

    private static JsonArray burst(SnowmintClient client, int n) {
        List<CompletableFuture<Long>> calls = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            calls.add(client.nextIdAsync());
        }
        JsonArray results = new JsonArray();
        for (CompletableFuture<Long> call : calls) {
            JsonObject result = new JsonObject();
            try {
                result.addProperty("id", Long.toUnsignedString(call.join()));
                result.addProperty("ok", true);
            } catch (CompletionException e) {
                result.addProperty("ok", false);
                result.add("error", errorOf(e));
            }
            results.add(result);
        }
        return results;
    }

    private static JsonArray loop(SnowmintClient client, JsonObject request, Duration deadline)
            throws InterruptedException {
        long every = (long) (request.get("every_ms").getAsDouble() * 1e6);
        long duration = (long) (request.get("duration_ms").getAsDouble() * 1e6);
        long start = System.nanoTime();
        JsonArray calls = new JsonArray();
        for (long n = 0; System.nanoTime() - start < duration; n++) {
            long wait = start + n * every - System.nanoTime();
            if (wait > 0) {
                TimeUnit.NANOSECONDS.sleep(wait);
            }
            double at = System.currentTimeMillis();
            long begun = System.nanoTime();
            JsonArray call = new JsonArray();
            JsonElement id = JsonNull.INSTANCE;
            JsonElement kind = JsonNull.INSTANCE;
            try {
                id = GSON.toJsonTree(Long.toUnsignedString(nextId(client, deadline)));
            } catch (RuntimeException e) {
                kind = errorOf(e).get("kind");
            }
            call.add(at);
            call.add((System.nanoTime() - begun) / 1e6);
            call.add(id);
            call.add(kind);
            calls.add(call);
        }
        return calls;
    }

    private static SnowmintClient newClient(JsonObject request) {
        List<String> endpoints = new ArrayList<>();
        request.getAsJsonArray("endpoints").forEach(e -> endpoints.add(e.getAsString()));
        SnowmintClient.Builder builder = SnowmintClient.builder(endpoints);
        if (request.has("timeout_ms")) {
            builder.timeout(Duration.ofMillis(request.get("timeout_ms").getAsLong()));
        }
        if (request.has("attempts")) {
            builder.attempts(request.get("attempts").getAsInt());
        }
        if (request.has("sequence_prefetch")) {
            builder.sequencePrefetch(request.get("sequence_prefetch").getAsInt());
        }
        if (request.has("buffer") && !request.get("buffer").isJsonNull()) {
            JsonObject b = request.getAsJsonObject("buffer");
            BufferConfig config = BufferConfig.defaults();
            if (b.has("batch")) {
                config = config.withBatch(b.get("batch").getAsInt());
            }
            if (b.has("low_water")) {
                config = config.withLowWater(b.get("low_water").getAsInt());
            }
            if (b.has("max_refills")) {
                config = config.withMaxRefills(b.get("max_refills").getAsInt());
            }
            if (b.has("max_age_ms")) {
                config = config.withMaxAge(Duration.ofNanos((long) (b.get("max_age_ms").getAsDouble() * 1e6)));
            }
            builder.buffer(config);
        }
        if (request.has("tls")) {
            JsonObject tls = request.getAsJsonObject("tls");
            TlsChannelCredentials.Builder credentials = TlsChannelCredentials.newBuilder();
            try {
                if (tls.has("ca")) {
                    credentials.trustManager(new File(tls.get("ca").getAsString()));
                }
                if (tls.has("cert")) {
                    credentials.keyManager(new File(tls.get("cert").getAsString()), new File(tls.get("key").getAsString()));
                }
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            builder.credentials(credentials.build());
        }
        if (request.has("token") && !request.get("token").isJsonNull()) {
            builder.token(request.get("token").getAsString());
        }
        return builder.build();
    }

    private static JsonObject decode(JsonObject request) {
        JsonObject spec = request.getAsJsonObject("layout");
        Layout layout = new Layout("test", spec.get("epoch_ms").getAsLong(), spec.get("tick_ms").getAsLong(),
                spec.get("time_bits").getAsInt(), spec.get("worker_bits").getAsInt(),
                spec.get("sequence_bits").getAsInt(),
                Layout.Order.valueOf(spec.get("order").getAsString().toUpperCase()));
        DecodedId d = layout.decode(Long.parseUnsignedLong(request.get("value").getAsString()));
        JsonObject reply = new JsonObject();
        reply.addProperty("unix_ms", Long.toString(d.unixMs()));
        reply.addProperty("tick", Long.toUnsignedString(d.tick()));
        reply.addProperty("worker_id", d.workerId());
        reply.addProperty("sequence", d.sequence());
        reply.addProperty("time", d.time().toString());
        return reply;
    }

    private static JsonObject opaque(JsonObject request) {
        JsonObject reply = new JsonObject();
        if (request.get("op").getAsString().equals("opaque_format")) {
            long value;
            try {
                value = Long.parseLong(request.get("value").getAsString());
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("not a 63-bit value: " + request.get("value"));
            }
            reply.addProperty("text", new OpaqueId(request.get("key_version").getAsInt(), value).toString());
            return reply;
        }
        OpaqueId opaque = OpaqueId.parse(request.get("text").getAsString());
        reply.addProperty("key_version", opaque.keyVersion());
        reply.addProperty("value", Long.toString(opaque.value()));
        return reply;
    }
}
