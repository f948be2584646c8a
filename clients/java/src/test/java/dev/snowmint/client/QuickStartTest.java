package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * The Java quick start of clients/README.md, run against a real server, and checked to be the
 * README's text, so the README cannot drift from code that compiles and works.
 */
class QuickStartTest {

    private static final Path README = Path.of("../README.md");
    private static final Path THIS_FILE = Path.of("src/test/java/dev/snowmint/client/QuickStartTest.java");

    @Test
    void theReadmeQuickStartRuns() {
        try (SnowmintServer server = SnowmintServer.start(9)) {
            quickStart(server.url());
        }
    }

    @Test
    void theReadmeShowsThisQuickStart() throws IOException {
        String source = Files.readString(THIS_FILE);
        Matcher marked = Pattern.compile("// quick-start:begin\n(.*?)\n[ ]*// quick-start:end", Pattern.DOTALL)
                .matcher(source);
        assertTrue(marked.find(), "no quick-start markers in " + THIS_FILE);
        String snippet = dedent(marked.group(1));
        Matcher blocks = Pattern.compile("```java\n(.*?)```", Pattern.DOTALL).matcher(Files.readString(README));
        while (blocks.find()) {
            if (blocks.group(1).contains(snippet)) {
                return;
            }
        }
        throw new AssertionError(README + " has no ```java block containing the quick start of " + THIS_FILE
                + "; copy it there:\n" + snippet);
    }

    static void quickStart(String... endpoints) {
        // quick-start:begin
        try (SnowmintClient client = SnowmintClient.builder(endpoints)
                .timeout(Duration.ofMillis(500))    // per attempt on a server; 1 s by default
                .buffer(BufferConfig.defaults())    // optional: prefetch IDs in the background
                .build()) {
            long id = client.nextId();              // positive; unique across every server
            long[] ids = client.batch(100);         // strictly increasing, from one server
            DecodedId decoded = Layout.snowmint().decode(id);
            System.out.printf("%d minted at %s by worker %d; %d more%n",
                    id, decoded.time(), decoded.workerId(), ids.length);
        }
        // quick-start:end
    }

    private static String dedent(String text) {
        List<String> lines = Arrays.asList(text.split("\n", -1));
        int indent = lines.stream()
                .filter(line -> !line.isBlank())
                .mapToInt(line -> line.length() - line.stripLeading().length())
                .min()
                .orElse(0);
        return String.join("\n", lines.stream().map(line -> line.isBlank() ? "" : line.substring(indent)).toList());
    }
}
