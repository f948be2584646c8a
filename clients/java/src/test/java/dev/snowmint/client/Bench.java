package dev.snowmint.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * IDs per second to one caller looping on a buffered {@code nextId()}, with the buffer settings
 * of {@code snowmint bench --method buffered} (batch 4096, low water 16384, 4 refills), so the
 * two compare. Run by {@code bench.sh}; not a test.
 *
 * <pre>{@code bench.sh --addr http://127.0.0.1:50051 --duration 5}</pre>
 */
public final class Bench {

    private static final int CHUNK = 1 << 20;

    private Bench() {}

    public static void main(String[] args) {
        String addr = "http://127.0.0.1:50051";
        double seconds = 5;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--addr" -> addr = args[++i];
                case "--duration" -> seconds = Double.parseDouble(args[++i]);
                default -> {
                    System.err.println("usage: bench.sh [--addr URL] [--duration SECONDS]");
                    System.exit(2);
                }
            }
        }
        BufferConfig buffer = BufferConfig.defaults().withLowWater(4 * 4096).withMaxRefills(4);
        long duplicates;
        try (SnowmintClient client = SnowmintClient.builder(addr).buffer(buffer).build()) {
            duplicates = run(client, seconds);
        } catch (SnowmintException e) {
            System.err.println("bench: " + e.getMessage());
            System.exit(1);
            return;
        }
        System.exit(duplicates == 0 ? 0 : 1);
    }

    /** Runs the load and prints the rate; the number of duplicate IDs. */
    private static long run(SnowmintClient client, double seconds) {
        // Warm up: the JIT and the first refills, before the clock starts.
        long warmUntil = System.nanoTime() + Duration.ofSeconds(1).toNanos();
        while (System.nanoTime() < warmUntil) {
            client.nextId();
        }
        // IDs go into fixed chunks, so no growing array stalls the loop.
        List<long[]> chunks = new ArrayList<>();
        long[] chunk = new long[CHUNK];
        int used = 0;
        long start = System.nanoTime();
        long until = start + (long) (seconds * 1e9);
        long ids = 0;
        while ((ids & 1023) != 0 || System.nanoTime() < until) {
            if (used == CHUNK) {
                chunks.add(chunk);
                chunk = new long[CHUNK];
                used = 0;
            }
            chunk[used++] = client.nextId();
            ids++;
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        chunks.add(Arrays.copyOf(chunk, used));

        long[] all = new long[(int) ids];
        int at = 0;
        for (long[] c : chunks) {
            System.arraycopy(c, 0, all, at, c.length);
            at += c.length;
        }
        Arrays.sort(all);
        long duplicates = 0;
        for (int i = 1; i < all.length; i++) {
            if (all[i] == all[i - 1]) {
                duplicates++;
            }
        }
        System.out.printf("java buffered nextId, 1 caller: %d IDs in %.2f s = %.0f IDs/s, %s%n",
                ids, elapsed, ids / elapsed, duplicates == 0 ? "all unique" : duplicates + " DUPLICATES");
        return duplicates;
    }
}
