package dev.dlock.testkit;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.junit.jupiter.api.Assertions;

/** Polls a condition with a deadline (events are awaited, never slept for). */
public final class Poll {
    private Poll() {}

    /**
     * @param what the condition, for the failure message
     * @param timeout the deadline
     * @param condition the condition
     */
    public static void until(String what, Duration timeout, BooleanSupplier condition) {
        until(what, timeout, condition, () -> "");
    }

    /**
     * @param what the condition, for the failure message
     * @param timeout the deadline
     * @param condition the condition
     * @param state what the failure message adds (the state the condition saw last)
     */
    public static void until(String what, Duration timeout, BooleanSupplier condition, Supplier<String> state) {
        long end = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > end) {
                String seen = state.get();
                Assertions.fail("timed out after " + timeout.toMillis() + " ms waiting for " + what
                        + (seen.isEmpty() ? "" : ": " + seen));
            }
            try {
                Thread.sleep(2);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                Assertions.fail("interrupted");
            }
        }
    }

    /**
     * @param what the condition
     * @param condition the condition (10 s deadline)
     */
    public static void until(String what, BooleanSupplier condition) {
        until(what, Duration.ofSeconds(10), condition);
    }

    /**
     * @param what the condition, for the failure message
     * @param condition the condition (10 s deadline)
     * @param state what the failure message adds (the state the condition saw last)
     */
    public static void until(String what, BooleanSupplier condition, Supplier<String> state) {
        until(what, Duration.ofSeconds(10), condition, state);
    }
}
