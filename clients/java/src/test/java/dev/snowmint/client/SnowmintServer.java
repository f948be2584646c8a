package dev.snowmint.client;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * The real snowmint binary, run standalone on free loopback ports with its state in a temp
 * dir. Closing it kills the process (SIGKILL) and removes the dir, whatever the test did.
 */
final class SnowmintServer implements AutoCloseable {

    private static final Duration START_LIMIT = Duration.ofSeconds(30);
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    private final Process process;
    private final Path stateDir;
    private final String grpcAddr;
    private final String adminAddr;

    private SnowmintServer(Process process, Path stateDir, String grpcAddr, String adminAddr) {
        this.process = process;
        this.stateDir = stateDir;
        this.grpcAddr = grpcAddr;
        this.adminAddr = adminAddr;
    }

    /** The binary: {@code SNOWMINT_BIN}, or the debug build of this repository. */
    static Path binary() {
        String bin = System.getenv("SNOWMINT_BIN");
        Path path = bin != null && !bin.isEmpty() ? Paths.get(bin) : Paths.get("../../target/debug/snowmint");
        if (!Files.isExecutable(path)) {
            throw new IllegalStateException("no snowmint binary at " + path.toAbsolutePath()
                    + ": build it with `cargo build --locked --bin snowmint` or set SNOWMINT_BIN");
        }
        return path;
    }

    /** A server minting as worker {@code workerId}, with {@code extra} flags of {@code snowmint serve}. */
    static SnowmintServer start(int workerId, String... extra) {
        return start(workerId, tempDir(), extra);
    }

    /**
     * A server on a state dir where {@code snowmint sequence create} made each of
     * {@code sequences} (a name, then its flags after the name, such as {@code --ordered}).
     */
    static SnowmintServer startWithSequences(int workerId, Map<String, List<String>> sequences) {
        Path dir = tempDir();
        try {
            for (Map.Entry<String, List<String>> sequence : sequences.entrySet()) {
                List<String> command = new ArrayList<>(List.of(binary().toString(), "sequence", "create",
                        sequence.getKey(), "--state-dir", dir.toString()));
                command.addAll(sequence.getValue());
                Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
                String output = new String(process.getInputStream().readAllBytes());
                if (process.waitFor() != 0) {
                    throw new IllegalStateException("sequence create " + sequence.getKey() + ": " + output);
                }
            }
        } catch (IOException e) {
            deleteTree(dir);
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            deleteTree(dir);
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        return start(workerId, dir);
    }

    /**
     * A server started with a policy ({@code --policy-file}, the TOML {@code policy}) and a token
     * file ({@code --token-file}, the {@code tokenLines} of {@link #newToken(String)}), both in its
     * state dir, and {@code extra} flags of {@code snowmint serve}.
     */
    static SnowmintServer startWithPolicy(int workerId, String policy, List<String> tokenLines, String... extra) {
        Path dir = tempDir();
        List<String> flags = new ArrayList<>(List.of("--policy-file", dir.resolve("policy.toml").toString(),
                "--token-file", dir.resolve("tokens").toString()));
        flags.addAll(List.of(extra));
        try {
            Files.writeString(dir.resolve("policy.toml"), policy);
            Files.write(dir.resolve("tokens"), tokenLines);
        } catch (IOException e) {
            deleteTree(dir);
            throw new UncheckedIOException(e);
        }
        return start(workerId, dir, flags.toArray(String[]::new));
    }

    /** A token of {@code snowmint token new NAME}, and its line of the token file. */
    record Token(String token, String line) {
        @Override
        public String toString() {
            return "Token[" + line + "]"; // its hash, never the token
        }
    }

    /** A new token named {@code name}, made by {@code snowmint token new}. */
    static Token newToken(String name) {
        try {
            Process process = new ProcessBuilder(binary().toString(), "token", "new", name)
                    .redirectError(ProcessBuilder.Redirect.DISCARD)
                    .start();
            List<String> lines = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8).lines().toList();
            if (process.waitFor() != 0 || lines.size() < 2) {
                throw new IllegalStateException("snowmint token new " + name + " failed");
            }
            return new Token(lines.get(0), lines.get(1));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /**
     * A server that refuses to mint: its state file says a previous run reserved the hour
     * ahead, so it must wait for the clock to pass that before minting, and answers
     * {@code UNAVAILABLE} meanwhile.
     */
    static SnowmintServer startRefusing(int workerId) {
        Path dir = tempDir();
        long now = System.currentTimeMillis();
        long reserved = now + 3_600_000;
        String state = String.format("{\"version\":1,\"worker_id\":%d,\"layout\":{\"name\":\"snowmint\","
                        + "\"epoch_ms\":1767225600000,\"tick_ms\":1,\"time_bits\":41,\"worker_bits\":10,"
                        + "\"sequence_bits\":12,\"order\":\"worker_sequence\"},\"reserved_until_ms\":%d,"
                        + "\"reserved_until\":\"%s\",\"saved_at\":\"%s\"}",
                workerId, reserved, Instant.ofEpochMilli(reserved), Instant.ofEpochMilli(now));
        try {
            Files.writeString(dir.resolve("worker-" + workerId + ".json"), state);
        } catch (IOException e) {
            deleteTree(dir);
            throw new UncheckedIOException(e);
        }
        return start(workerId, dir);
    }

    private static SnowmintServer start(int workerId, Path stateDir, String... extra) {
        List<String> command = new ArrayList<>(List.of(binary().toString(), "serve",
                "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json",
                "--state-dir", stateDir.toString(), "--worker-id", Integer.toString(workerId)));
        command.addAll(List.of(extra));
        Process process;
        try {
            process = new ProcessBuilder(command)
                    .redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .start();
        } catch (IOException e) {
            deleteTree(stateDir);
            throw new UncheckedIOException(e);
        }
        // Drain stderr for the whole life of the process, so the pipe never fills.
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Thread drain = new Thread(() -> {
            try (BufferedReader reader = new BufferedReader(
                    new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = reader.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException e) {
                // The process ended.
            }
        }, "snowmint-stderr-" + workerId);
        drain.setDaemon(true);
        drain.start();

        List<String> seen = new ArrayList<>();
        long limit = System.nanoTime() + START_LIMIT.toNanos();
        try {
            while (System.nanoTime() < limit) {
                String line = lines.poll(100, TimeUnit.MILLISECONDS);
                if (line == null) {
                    if (!process.isAlive()) {
                        break;
                    }
                    continue;
                }
                JsonObject json = parseObject(line);
                if (json != null && json.has("grpc_addr") && json.has("admin_addr")) {
                    return new SnowmintServer(process, stateDir,
                            json.get("grpc_addr").getAsString(), json.get("admin_addr").getAsString());
                }
                seen.add(line);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        process.destroyForcibly();
        deleteTree(stateDir);
        throw new IllegalStateException("snowmint did not start within " + START_LIMIT + "; output:\n"
                + String.join("\n", seen));
    }

    private static JsonObject parseObject(String line) {
        try {
            JsonElement json = JsonParser.parseString(line);
            return json.isJsonObject() ? json.getAsJsonObject() : null;
        } catch (RuntimeException e) {
            return null; // not a JSON line
        }
    }

    /** The gRPC endpoint URL. */
    String url() {
        return "http://" + grpcAddr;
    }

    /** The gRPC endpoint as host:port. */
    String address() {
        return grpcAddr;
    }

    /** Kills the process with SIGKILL, as a crash would, and waits for it to be gone. */
    void kill() {
        process.destroyForcibly();
        try {
            if (!process.waitFor(10, TimeUnit.SECONDS)) {
                throw new IllegalStateException("snowmint did not die within 10 s of SIGKILL");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * Pauses the process (SIGSTOP), and waits until every thread has stopped: it keeps its
     * connections but answers nothing.
     */
    void pause() throws IOException, InterruptedException {
        Process kill = new ProcessBuilder("kill", "-STOP", Long.toString(process.pid())).inheritIO().start();
        if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
            throw new IllegalStateException("kill -STOP " + process.pid() + " failed");
        }
        Path threads = Path.of("/proc/" + process.pid() + "/task");
        long limit = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!allStopped(threads)) {
            if (System.nanoTime() > limit) {
                throw new IllegalStateException("snowmint " + process.pid() + " did not stop within 10 s of SIGSTOP");
            }
            Thread.sleep(5);
        }
    }

    /** Resumes a paused process (SIGCONT). */
    void resume() throws IOException, InterruptedException {
        Process cont = new ProcessBuilder("kill", "-CONT", Long.toString(process.pid())).inheritIO().start();
        if (!cont.waitFor(10, TimeUnit.SECONDS) || cont.exitValue() != 0) {
            throw new IllegalStateException("kill -CONT " + process.pid() + " failed");
        }
    }

    /** Whether every thread under {@code /proc/<pid>/task} is in state T (stopped). */
    private static boolean allStopped(Path threads) throws IOException {
        try (Stream<Path> tasks = Files.list(threads)) {
            for (Path task : (Iterable<Path>) tasks::iterator) {
                if (!Files.readString(task.resolve("stat")).matches("(?s)\\d+ \\(.*\\) T .*")) {
                    return false;
                }
            }
        }
        return true;
    }

    /** The value of one series of the server's metrics, e.g. {@code x{a="b"}}. */
    double metric(String series) {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://" + adminAddr + "/metrics"))
                .timeout(Duration.ofSeconds(5))
                .build();
        String body;
        try {
            body = HTTP.send(request, HttpResponse.BodyHandlers.ofString()).body();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        return body.lines()
                .filter(line -> line.startsWith(series + " "))
                .mapToDouble(line -> Double.parseDouble(line.substring(series.length() + 1).trim()))
                .findFirst()
                .orElseThrow(() -> new IllegalStateException("no series " + series + " in\n" + body));
    }

    @Override
    public void close() {
        kill();
        deleteTree(stateDir);
    }

    private static Path tempDir() {
        try {
            return Files.createTempDirectory("snowmint-java-test");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void deleteTree(Path dir) {
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(path -> path.toFile().delete());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
