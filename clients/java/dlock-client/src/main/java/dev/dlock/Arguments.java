package dev.dlock;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.TimeUnit;

/**
 * Checks of the caller's arguments, made before anything is sent (docs/clients.md R9.2): a bad
 * argument is refused with {@link IllegalArgumentException} (or {@link NullPointerException} for a
 * null), never quietly changed into another value.
 */
final class Arguments {
    /** The longest lease the server and every client hold exactly: 2^53-1 ms (R2.1). */
    static final long MAX_LEASE_MS = (1L << 53) - 1;
    /** The longest owner (R1.3). */
    static final int MAX_OWNER_BYTES = 512;

    private Arguments() {
    }

    /**
     * @param lease a lease
     * @return it in whole milliseconds, 1 to 2^53-1
     */
    static long leaseMs(Duration lease) {
        Objects.requireNonNull(lease, "lease");
        long ms;
        try {
            ms = lease.toMillis();
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException("lease must be at most 2^53-1 ms: " + lease, e);
        }
        return leaseMs(ms);
    }

    /**
     * @param time a lease
     * @param unit its unit
     * @return it in whole milliseconds, 1 to 2^53-1
     */
    static long leaseMs(long time, TimeUnit unit) {
        Objects.requireNonNull(unit, "unit");
        if (time <= 0) {
            throw new IllegalArgumentException("lease must be at least 1 ms: " + time + " " + unit);
        }
        return leaseMs(unit.toMillis(time));
    }

    private static long leaseMs(long ms) {
        if (ms < 1) {
            throw new IllegalArgumentException("lease must be at least 1 ms");
        }
        if (ms > MAX_LEASE_MS) {
            throw new IllegalArgumentException("lease must be at most 2^53-1 ms");
        }
        return ms;
    }

    /** A wait this long or longer waits without end: its deadline in nanoseconds could overflow. */
    private static final Duration ENDLESS_WAIT = Duration.ofDays(100L * 365);

    /**
     * @param wait a wait, where a negative one means one try (java.util.concurrent's convention)
     * @return it in nanoseconds, 0 for none, -1 (without end) from 100 years on (such as {@code
     *     Duration.ofSeconds(Long.MAX_VALUE)}, whose nanoseconds a long cannot hold)
     */
    static long waitNanos(Duration wait) {
        Objects.requireNonNull(wait, "wait");
        if (wait.isNegative() || wait.isZero()) {
            return 0;
        }
        if (wait.compareTo(ENDLESS_WAIT) >= 0) {
            return -1;
        }
        return Math.max(1, wait.toNanos());
    }

    /**
     * @param owner an owner of the caller's own
     * @return it, when it is 1 to 512 bytes and not {@code *} (the server would generate an owner
     *     the client does not know)
     */
    static String owner(String owner) {
        Objects.requireNonNull(owner, "owner");
        int bytes = owner.getBytes(StandardCharsets.UTF_8).length;
        if (owner.equals("*") || bytes < 1 || bytes > MAX_OWNER_BYTES) {
            throw new IllegalArgumentException("owner must be 1 to 512 bytes and not \"*\"");
        }
        return owner;
    }

    /**
     * @param key a key
     * @return it, when not null
     */
    static String key(String key) {
        return Objects.requireNonNull(key, "key");
    }
}
