package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.function.Executable;

/** Local decoding against the shared vectors, which the server's own decode produced. */
class LayoutTest {

    private static final Path VECTORS = Path.of("../testdata/vectors.json");

    /** One test per layout of the file: its definition, every vector, every invalid ID. */
    @TestFactory
    Stream<DynamicTest> decodesEveryVectorAndRejectsEveryInvalidId() throws IOException {
        JsonObject file = JsonParser.parseString(Files.readString(VECTORS)).getAsJsonObject();
        JsonObject layouts = file.getAsJsonObject("layouts");
        List<JsonObject> vectors = objects(file, "vectors");
        List<JsonObject> invalid = objects(file, "invalid");
        assertFalse(layouts.isEmpty() || vectors.isEmpty() || invalid.isEmpty(), "an empty vector file");
        for (JsonObject entry : vectors) {
            assertTrue(layouts.has(entry.get("layout").getAsString()), "unknown layout in " + entry);
        }
        return layouts.entrySet().stream().map(named -> DynamicTest.dynamicTest(named.getKey(), () -> {
            String name = named.getKey();
            Layout layout = ours(name, named.getValue().getAsJsonObject());
            List<Executable> checks = new ArrayList<>();
            for (JsonObject v : vectors) {
                if (!v.get("layout").getAsString().equals(name)) {
                    continue;
                }
                DecodedId decoded = layout.decode(Long.parseUnsignedLong(v.get("id").getAsString()));
                String id = v.get("id").getAsString();
                checks.add(() -> assertEquals(id, decoded.idString(), "id"));
                checks.add(() -> assertEquals(v.get("unix_ms").getAsLong(), decoded.unixMs(), id + " unix_ms"));
                checks.add(() -> assertEquals(v.get("tick").getAsString(),
                        Long.toUnsignedString(decoded.tick()), id + " tick"));
                checks.add(() -> assertEquals(v.get("worker_id").getAsLong(), decoded.workerId(), id + " worker_id"));
                checks.add(() -> assertEquals(v.get("sequence").getAsLong(), decoded.sequence(), id + " sequence"));
                checks.add(() -> assertEquals(v.get("time").getAsString(), decoded.time(), id + " time"));
            }
            for (JsonObject bad : invalid) {
                if (bad.get("layout").getAsString().equals(name)) {
                    long id = Long.parseUnsignedLong(bad.get("id").getAsString());
                    checks.add(() -> assertThrows(IllegalArgumentException.class, () -> layout.decode(id),
                            bad.get("reason").getAsString()));
                }
            }
            assertFalse(checks.isEmpty(), "no vectors for " + name);
            assertAll(name, checks.stream());
        }));
    }

    /**
     * The client's own layout for a name of the file: a preset by name, or a snowmint layout
     * built from its widths. Either way it must match the file's definition field by field.
     */
    static Layout ours(String name, JsonObject definition) {
        Layout file = new Layout(name,
                definition.get("epoch_ms").getAsLong(),
                definition.get("tick_ms").getAsLong(),
                definition.get("time_bits").getAsInt(),
                definition.get("worker_bits").getAsInt(),
                definition.get("sequence_bits").getAsInt(),
                Layout.Order.valueOf(definition.get("order").getAsString().toUpperCase()));
        Layout ours = Layout.NAMES.contains(name)
                ? Layout.named(name)
                : Layout.snowmint(file.epochMs(), file.workerBits(), file.sequenceBits());
        assertEquals(file, new Layout(name, ours.epochMs(), ours.tickMs(), ours.timeBits(), ours.workerBits(),
                ours.sequenceBits(), ours.order()), "layout " + name + " differs from the vector file");
        return ours;
    }

    private static List<JsonObject> objects(JsonObject file, String key) {
        List<JsonObject> out = new ArrayList<>();
        for (JsonElement element : file.getAsJsonArray(key)) {
            out.add(element.getAsJsonObject());
        }
        return out;
    }

    @Test
    void discordIdsAboveTheSignBitDecodeAsUnsigned() {
        DecodedId decoded = Layout.named("discord").decode(-1L);
        assertEquals("18446744073709551615", decoded.idString());
        assertEquals((1L << 42) - 1, decoded.tick());
        assertEquals(1023, decoded.workerId());
        assertEquals(4095, decoded.sequence());
    }

    @Test
    void sonyflakePutsTheSequenceAboveTheMachine() {
        long id = (5L << 24) | (7L << 16) | 0x1234;
        DecodedId decoded = Layout.named("sonyflake").decode(id);
        assertEquals(Map.of("tick", 5L, "worker", 0x1234L, "sequence", 7L),
                Map.of("tick", decoded.tick(), "worker", decoded.workerId(), "sequence", decoded.sequence()));
        assertEquals(Layout.named("sonyflake").epochMs() + 50, decoded.unixMs());
    }

    @Test
    void badLayoutsAreRefusedWithTheReason() {
        IllegalArgumentException unknown = assertThrows(IllegalArgumentException.class, () -> Layout.named("uuid"));
        for (String name : Layout.NAMES) {
            assertTrue(unknown.getMessage().contains(name), unknown.getMessage());
        }
        IllegalArgumentException wide = assertThrows(IllegalArgumentException.class,
                () -> new Layout("x", 0, 1, 42, 10, 13, Layout.Order.WORKER_SEQUENCE));
        assertTrue(wide.getMessage().contains("fit 64 bits"), wide.getMessage());
        assertThrows(IllegalArgumentException.class,
                () -> new Layout("x", 0, 0, 41, 10, 12, Layout.Order.WORKER_SEQUENCE));
    }
}
