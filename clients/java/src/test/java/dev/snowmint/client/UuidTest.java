package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * UUIDv7 text, bytes, order and local decoding against the shared vectors
 * (clients/testdata/uuid-vectors.json), which the server's code produced; the layouts they name
 * are those of clients/testdata/vectors.json.
 */
class UuidTest {

    private static final Path UUID_VECTORS = Path.of("../testdata/uuid-vectors.json");
    private static final Path LAYOUTS = Path.of("../testdata/vectors.json");

    private static JsonObject file;
    private static Map<String, Layout> layouts;

    @BeforeAll
    static void load() throws IOException {
        file = JsonParser.parseString(Files.readString(UUID_VECTORS, StandardCharsets.UTF_8)).getAsJsonObject();
        JsonObject definitions = JsonParser.parseString(Files.readString(LAYOUTS)).getAsJsonObject()
                .getAsJsonObject("layouts");
        layouts = new HashMap<>();
        for (Map.Entry<String, JsonElement> named : definitions.entrySet()) {
            layouts.put(named.getKey(), LayoutTest.ours(named.getKey(), named.getValue().getAsJsonObject()));
        }
    }

    private static List<JsonObject> section(String name) {
        List<JsonObject> entries = new ArrayList<>();
        for (JsonElement element : file.getAsJsonArray(name)) {
            entries.add(element.getAsJsonObject());
        }
        assertFalse(entries.isEmpty(), "an empty section " + name);
        return entries;
    }

    private static Layout layout(JsonObject entry) {
        Layout layout = layouts.get(entry.get("layout").getAsString());
        assertTrue(layout != null, "unknown layout in " + entry);
        return layout;
    }

    @Test
    void everyVectorParsesDecodesAndFormatsBack() {
        List<JsonObject> vectors = section("vectors");
        List<Executable> checks = new ArrayList<>();
        for (JsonObject v : vectors) {
            String text = v.get("uuid").getAsString();
            Layout layout = layout(v);
            UUID uuid = Uuids.parseUuid(text);
            DecodedUuid decoded = layout.decodeUuid(uuid);
            String at = layout.name() + " " + text;
            checks.add(() -> assertEquals(v.get("id").getAsString(), decoded.idString(), at + " id"));
            checks.add(() -> assertEquals(v.get("unix_ms").getAsLong(), decoded.unixMs(), at + " unix_ms"));
            checks.add(() -> assertEquals(v.get("slot").getAsLong(), decoded.slot(), at + " slot"));
            checks.add(() -> assertEquals(v.get("sequence").getAsLong(), decoded.sequence(), at + " sequence"));
            checks.add(() -> assertEquals(v.get("random").getAsLong(), decoded.random(), at + " random"));
            checks.add(() -> assertEquals(uuid, decoded.uuid(), at + " uuid"));
            checks.add(() -> assertEquals(layout, decoded.layout(), at + " layout"));
            checks.add(() -> assertEquals(text, Uuids.formatUuid(uuid), at + " formatUuid"));
            checks.add(() -> assertEquals(text, uuid.toString(), at + " toString"));
            checks.add(() -> assertEquals(uuid, Uuids.parseUuid(text.toUpperCase(Locale.ROOT)), at + " upper case"));
            checks.add(() -> assertEquals(uuid, UUID.fromString(text), at + " as java.util.UUID reads it"));
            checks.add(() -> assertEquals(uuid, Uuids.fromBytes(Uuids.toBytes(uuid)), at + " bytes"));
            // The ID decodes with the same layout to the same time, slot and sequence.
            checks.add(() -> {
                DecodedId id = layout.decode(decoded.id());
                assertEquals(List.of(decoded.unixMs(), decoded.tick(), decoded.slot(), decoded.sequence()),
                        List.of(id.unixMs(), id.tick(), id.workerId(), id.sequence()), at + " the ID's fields");
            });
        }
        assertAll(checks.stream());
        // Every layout of the file has vectors.
        assertEquals(layouts.keySet(),
                vectors.stream().map(v -> v.get("layout").getAsString()).collect(java.util.stream.Collectors.toSet()));
    }

    @Test
    void everyInvalidUuidIsRefusedWithItsKind() {
        List<Executable> checks = new ArrayList<>();
        for (JsonObject v : section("invalid")) {
            Layout layout = layout(v);
            UUID uuid = Uuids.parseUuid(v.get("uuid").getAsString());
            String why = layout.name() + " " + v.get("uuid").getAsString() + ": " + v.get("reason").getAsString();
            checks.add(() -> {
                InvalidUuidException error = assertThrows(InvalidUuidException.class, () -> layout.decodeUuid(uuid), why);
                assertEquals(v.get("kind").getAsString(), error.kind().label(), why + ": " + error.getMessage());
                assertTrue(error.getMessage().contains(uuid.toString()), error.getMessage());
            });
        }
        assertAll(checks.stream());
    }

    @Test
    void everyMalformedTextIsRefused() {
        List<Executable> checks = new ArrayList<>();
        for (JsonObject v : section("malformed")) {
            String text = v.get("text").getAsString();
            checks.add(() -> {
                InvalidUuidException error = assertThrows(InvalidUuidException.class, () -> Uuids.parseUuid(text),
                        "\"" + text + "\": " + v.get("reason").getAsString());
                assertEquals(InvalidUuidException.Kind.TEXT, error.kind());
            });
        }
        assertAll(checks.stream());
    }

    @Test
    void parsingIsStricterThanJavaUtilUuid() {
        for (String lenient : List.of("1-1-1-1-1", "0-0-0-0-0", "00000000-0000-0000-0000-00000000000",
                "0190163d-8694-739b-aea5-6d2a3f0b1c4e".replace('e', 'E') + "0")) {
            assertThrows(IllegalArgumentException.class, () -> Uuids.parseUuid(lenient), lenient);
        }
        // Hyphen positions: all four, and only there; mixed case reads the same.
        assertEquals(Uuids.parseUuid("0190163d-8694-739b-aea5-6d2a3f0b1c4e"),
                Uuids.parseUuid("0190163D-8694-739B-AeA5-6D2a3F0B1C4e"));
        assertThrows(IllegalArgumentException.class, () -> Uuids.parseUuid("0190163d-8694-739b-aea5-6d2a3f0b1c-e"));
        assertThrows(IllegalArgumentException.class, () -> Uuids.parseUuid("0190163d-8694-739b-aea5-6d2a3f0b1c\u0660e"));
        // Full-width digits are digits to Character.digit, not here.
        assertThrows(IllegalArgumentException.class, () -> Uuids.parseUuid("0190163d-8694-739b-aea5-6d2a3f0b1c\uff11e"));
        assertThrows(NullPointerException.class, () -> Uuids.parseUuid(null));
        assertEquals("00000000-0000-0000-0000-000000000000", Uuids.formatUuid(new UUID(0, 0)));
        assertEquals("ffffffff-ffff-ffff-ffff-ffffffffffff", Uuids.formatUuid(new UUID(-1, -1)));
        assertEquals(new UUID(-1, -1), Uuids.parseUuid("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"));
    }

    @Test
    void bytesAreMostSignificantFirst() {
        UUID uuid = Uuids.parseUuid("0190163d-8694-739b-aea5-6d2a3f0b1c4e");
        byte[] bytes = Uuids.toBytes(uuid);
        assertArrayEquals(new byte[] {0x01, (byte) 0x90, 0x16, 0x3d, (byte) 0x86, (byte) 0x94, 0x73, (byte) 0x9b,
                (byte) 0xae, (byte) 0xa5, 0x6d, 0x2a, 0x3f, 0x0b, 0x1c, 0x4e}, bytes);
        assertEquals(uuid, Uuids.fromBytes(bytes));
        assertThrows(IllegalArgumentException.class, () -> Uuids.fromBytes(new byte[15]));
        assertThrows(IllegalArgumentException.class, () -> Uuids.fromBytes(new byte[17]));
    }

    @Test
    void theOrderIsUnsignedAndThatOfTheText() {
        List<UUID> ascending = List.of(
                new UUID(0, 0), new UUID(0, 1), new UUID(0, Long.MAX_VALUE), new UUID(0, Long.MIN_VALUE),
                new UUID(0, -1), new UUID(1, 0), new UUID(Long.MAX_VALUE, -1), new UUID(Long.MIN_VALUE, 0),
                new UUID(-1, -1));
        for (int i = 0; i < ascending.size(); i++) {
            for (int j = 0; j < ascending.size(); j++) {
                UUID a = ascending.get(i);
                UUID b = ascending.get(j);
                assertEquals(Integer.signum(Integer.compare(i, j)), Integer.signum(Uuids.ORDER.compare(a, b)), a + " " + b);
                assertEquals(Integer.signum(Integer.compare(i, j)),
                        Integer.signum(Uuids.formatUuid(a).compareTo(Uuids.formatUuid(b))), a + " " + b + " as text");
            }
        }
    }

    @Test
    void aUuidOfAnIdDecodesToIt() {
        // Made by hand from the rule, for sonyflake (10 ms ticks, time | sequence | worker).
        Layout sonyflake = Layout.named("sonyflake");
        long tick = 123_456;
        long slot = 0xbeef;
        long sequence = 0x5a;
        long unixMs = sonyflake.epochMs() + tick * 10;
        long minted = slot << 22 | sequence;
        long most = unixMs << 16 | 7L << 12 | minted >>> 30;
        long least = 0b10L << 62 | (minted & ((1L << 30) - 1)) << 32 | 0xdeadbeefL;
        DecodedUuid decoded = sonyflake.decodeUuid(new UUID(most, least));
        assertEquals(tick << 24 | sequence << 16 | slot, decoded.id());
        assertEquals(List.of(unixMs, tick, slot, sequence, 0xdeadbeefL),
                List.of(decoded.unixMs(), decoded.tick(), decoded.slot(), decoded.sequence(), decoded.random()));
        assertEquals(Layout.rfc3339(unixMs), decoded.time());
        // One millisecond later is between two ticks.
        InvalidUuidException between = assertThrows(InvalidUuidException.class,
                () -> sonyflake.decodeUuid(new UUID(most + (1L << 16), least)));
        assertEquals(InvalidUuidException.Kind.TICK, between.kind());
        // Past the last tick of a layout with a short time field.
        Layout short_ = new Layout("short", 0, 1, 8, 10, 12, Layout.Order.WORKER_SEQUENCE);
        assertEquals(255, short_.decodeUuid(new UUID(255L << 16 | 7L << 12, 0b10L << 62)).tick());
        InvalidUuidException past = assertThrows(InvalidUuidException.class,
                () -> short_.decodeUuid(new UUID(256L << 16 | 7L << 12, 0b10L << 62)));
        assertEquals(InvalidUuidException.Kind.TICK, past.kind());
        // An epoch so far back that the time since it overflows a long.
        Layout ancient = new Layout("ancient", Long.MIN_VALUE, 1, 63, 0, 0, Layout.Order.WORKER_SEQUENCE);
        assertEquals(InvalidUuidException.Kind.TICK, assertThrows(InvalidUuidException.class,
                () -> ancient.decodeUuid(new UUID(1L << 16 | 7L << 12, 0b10L << 62))).kind());
    }
}
