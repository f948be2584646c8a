package dev.snowmint.client;

import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * The one timer thread every client shares (a daemon): the buffer's next decisions and the
 * pauses between attempts. Tasks must be short; they hand real work to other threads.
 */
final class Timers {

    private static final ScheduledExecutorService TIMER;

    static {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, runnable -> {
            Thread thread = new Thread(runnable, "snowmint-timer");
            thread.setDaemon(true);
            return thread;
        });
        timer.setRemoveOnCancelPolicy(true);
        TIMER = timer;
    }

    private Timers() {}

    static ScheduledFuture<?> after(long nanos, Runnable task) {
        return TIMER.schedule(task, Math.max(0, nanos), TimeUnit.NANOSECONDS);
    }
}
