package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The sequence prefetch buffer ({@code sequencePrefetch}) against a real snowmint process:
 * values of an unordered sequence in runs of n from about one call per n, an ordered sequence
 * never buffered, the last values before a maximum still handed out, many callers sharing
 * refills, and the setting's range.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SequencePrefetchTest {

    private static double calls(SnowmintServer server, String method) {
        return server.metric("snowmint_requests_total{code=\"OK\",method=\"" + method + "\",protocol=\"grpc\"}");
    }

    private static void assertRuns(List<Long> values) {
        int jumps = 0;
        for (int i = 1; i < values.size(); i++) {
            assertTrue(values.get(i) > values.get(i - 1), "not increasing: " + values);
            if (i > 1 && values.get(i) != values.get(i - 1) + 1) {
                jumps++;
            }
        }
        assertTrue(jumps <= 5, jumps + " jumps, want runs of 10: " + values);
    }

    @Test
    void onlyUnorderedSequencesAreBuffered() {
        Map<String, List<String>> sequences =
                Map.of("orders", List.of(), "invoices", List.of("--ordered"), "short", List.of("--max", "25"));
        try (SnowmintServer server = SnowmintServer.startWithSequences(61, sequences);
                SnowmintClient a = SnowmintClient.builder(server.url()).sequencePrefetch(10).build();
                SnowmintClient b = SnowmintClient.builder(server.url()).sequencePrefetch(10).build()) {
            List<Long> fromA = new ArrayList<>();
            List<Long> fromB = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                fromA.add(a.nextValue("orders"));
                fromB.add(b.nextValue("orders"));
            }
            assertRuns(fromA);
            assertRuns(fromB);
            HashSet<Long> all = new HashSet<>(fromA);
            all.addAll(fromB);
            assertEquals(100, all.size());
            assertEquals(2.0, calls(server, "NextValue"));
            assertEquals(10.0, calls(server, "BatchValues"));

            for (int i = 0; i < 10; i++) {
                long x = a.nextValue("invoices");
                long y = b.nextValue("invoices");
                long z = a.nextValue("invoices");
                assertTrue(x < y && y < z, x + ", " + y + ", " + z);
            }
            assertEquals(2.0 + 30, calls(server, "NextValue"));

            List<Long> shortValues = new ArrayList<>();
            SnowmintRejectedException end = null;
            while (shortValues.size() <= 25 && end == null) {
                try {
                    shortValues.add(a.nextValue("short"));
                } catch (SnowmintRejectedException e) {
                    end = e;
                }
            }
            assertTrue(end != null && end.status().getCode() == Status.Code.OUT_OF_RANGE, String.valueOf(end));
            assertEquals(25, shortValues.size());
            assertEquals(1L, shortValues.get(0));
            assertEquals(25L, shortValues.get(24));
            SnowmintRejectedException missing =
                    assertThrows(SnowmintRejectedException.class, () -> a.nextValue("missing"));
            assertEquals(Status.Code.NOT_FOUND, missing.status().getCode());
            a.close();
            assertThrows(IllegalStateException.class, () -> a.nextValue("orders"));
        }
    }

    @Test
    void concurrentCallersShareRefillsAndGetDistinctValues() throws Exception {
        try (SnowmintServer server = SnowmintServer.startWithSequences(62, Map.of("orders", List.of()));
                SnowmintClient client = SnowmintClient.builder(server.url()).sequencePrefetch(100).build()) {
            List<CompletableFuture<Long>> futures = new ArrayList<>();
            for (int i = 0; i < 500; i++) {
                futures.add(client.nextValueAsync("orders", java.time.Duration.ofSeconds(30)));
            }
            HashSet<Long> values = new HashSet<>();
            for (CompletableFuture<Long> future : futures) {
                values.add(future.get(30, TimeUnit.SECONDS));
            }
            assertEquals(500, values.size());
            double made = calls(server, "NextValue") + calls(server, "BatchValues");
            assertTrue(made <= 7, "500 values took " + made + " calls");
        }
    }

    @Test
    void theSettingIsChecked() {
        for (int n : new int[] {0, SnowmintClient.MAX_SEQUENCE_PREFETCH}) {
            SnowmintClient.builder("127.0.0.1:1").sequencePrefetch(n).build().close();
        }
        for (int n : new int[] {-1, SnowmintClient.MAX_SEQUENCE_PREFETCH + 1}) {
            IllegalArgumentException error = assertThrows(IllegalArgumentException.class,
                    () -> SnowmintClient.builder("127.0.0.1:1").sequencePrefetch(n));
            assertTrue(error.getMessage().contains("65536"), error.getMessage());
        }
    }
}
