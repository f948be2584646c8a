package dev.snowmint.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.grpc.Status;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** {@code nextValue} and {@code batchValues} of named sequences against real snowmint processes. */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class SequenceClientTest {

    @Test
    void valuesComeDenseAndAMissingSequenceIsNotFound() {
        try (SnowmintServer creating = SnowmintServer.start(31, "--create-sequences-on-use");
                SnowmintServer strict = SnowmintServer.start(32);
                SnowmintClient client = SnowmintClient.builder(creating.url()).build();
                SnowmintClient other = SnowmintClient.builder(strict.url()).build()) {
            assertEquals(1, client.nextValue("orders"));
            assertArrayEquals(new long[] {2, 3, 4, 5, 6}, client.batchValues("orders", 5));
            assertEquals(7, client.nextValue("orders", Duration.ofSeconds(5)));
            assertEquals(8, client.batchValuesAsync("orders", 1000).join()[0]);
            SnowmintRejectedException missing =
                    assertThrows(SnowmintRejectedException.class, () -> other.nextValue("orders"));
            assertEquals(Status.Code.NOT_FOUND, missing.status().getCode(), missing.toString());
            SnowmintRejectedException zero =
                    assertThrows(SnowmintRejectedException.class, () -> client.batchValues("orders", 0));
            assertEquals(Status.Code.INVALID_ARGUMENT, zero.status().getCode(), zero.toString());
            assertThrows(IllegalArgumentException.class, () -> client.batchValues("orders", -1));
        }
    }
}
