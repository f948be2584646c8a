package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The string form of opaque IDs against the shared vectors, which the server's code produced. */
class OpaqueIdTest {

    private static final Path VECTORS = Path.of("../testdata/opaque-strings.json");
    private static JsonObject file;

    @BeforeAll
    static void load() throws IOException {
        file = JsonParser.parseString(Files.readString(VECTORS, StandardCharsets.UTF_8)).getAsJsonObject();
    }

    private static List<JsonObject> section(String name) {
        List<JsonObject> entries = new ArrayList<>();
        for (JsonElement element : file.getAsJsonArray(name)) {
            entries.add(element.getAsJsonObject());
        }
        assertFalse(entries.isEmpty(), "an empty section " + name);
        return entries;
    }

    private static long value(JsonObject entry) {
        return Long.parseUnsignedLong(entry.get("value").getAsString());
    }

    @Test
    void everyValidStringReadsAndWrites() {
        for (JsonObject v : section("valid")) {
            OpaqueId opaque = new OpaqueId(v.get("key_version").getAsInt(), value(v));
            String text = v.get("text").getAsString();
            assertEquals(text, opaque.toString());
            assertEquals(opaque, OpaqueId.parse(text));
        }
    }

    @Test
    void everyAliasReadsAsItsCanonicalString() {
        for (JsonObject v : section("aliases")) {
            OpaqueId opaque = OpaqueId.parse(v.get("text").getAsString());
            assertEquals(new OpaqueId(v.get("key_version").getAsInt(), value(v)), opaque, v.toString());
            assertEquals(v.get("canonical").getAsString(), opaque.toString());
        }
    }

    @Test
    void everyInvalidStringIsRefusedByTheFirstCheckItFails() {
        for (JsonObject v : section("invalid")) {
            OpaqueId.FormatException error = assertThrows(OpaqueId.FormatException.class,
                    () -> OpaqueId.parse(v.get("text").getAsString()), v.get("reason").getAsString());
            assertEquals(v.get("kind").getAsString().toUpperCase(Locale.ROOT), error.kind().name(), v.toString());
        }
    }

    @Test
    void everyUnencodablePairIsRefused() {
        for (JsonObject v : section("unencodable")) {
            assertThrows(OpaqueId.FormatException.class,
                    () -> new OpaqueId(v.get("key_version").getAsInt(), value(v)), v.get("reason").getAsString());
        }
    }
}
