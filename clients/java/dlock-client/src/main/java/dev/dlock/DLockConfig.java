package dev.dlock;

import java.time.Duration;
import java.util.Objects;

/**
 * Settings of a {@link DLockClient}; every one has a default.
 *
 * <pre>{@code
 * DLockConfig config = DLockConfig.builder().defaultLease(Duration.ofSeconds(10)).build();
 * }</pre>
 */
public final class DLockConfig {
    private final Duration defaultLease;
    private final int renewDivisor;
    private final Duration safetyMargin;
    private final double clockDrift;
    private final Duration waitMargin;
    private final Duration retryDelay;

    private DLockConfig(Builder b) {
        this.defaultLease = b.defaultLease;
        this.renewDivisor = b.renewDivisor;
        this.safetyMargin = b.safetyMargin;
        this.clockDrift = b.clockDrift;
        this.waitMargin = b.waitMargin;
        this.retryDelay = b.retryDelay;
    }

    /** @return the default settings */
    public static DLockConfig defaults() {
        return builder().build();
    }

    /** @return a builder holding the defaults */
    public static Builder builder() {
        return new Builder();
    }

    /** @return the lease of a hold taken without one, renewed by the watchdog (30 s) */
    public Duration defaultLease() {
        return defaultLease;
    }

    /** @return renewals happen every {@code lease / renewDivisor} (3) */
    public int renewDivisor() {
        return renewDivisor;
    }

    /** @return the fixed part of the lost-deadline margin (5 ms) */
    public Duration safetyMargin() {
        return safetyMargin;
    }

    /** @return the part of the margin proportional to the lease (0.01) */
    public double clockDrift() {
        return clockDrift;
    }

    /** @return added to a blocking wait to make its read timeout (2 s) */
    public Duration waitMargin() {
        return waitMargin;
    }

    /** @return delay before retrying a renewal that failed for a transient reason (50 ms) */
    public Duration retryDelay() {
        return retryDelay;
    }

    /**
     * @param leaseMs a lease
     * @return the margin by which a hold counts as lost before its lease ends
     */
    long marginNanos(long leaseMs) {
        return safetyMargin.toNanos() + (long) (leaseMs * 1_000_000L * clockDrift);
    }

    /** Builds a {@link DLockConfig}. */
    public static final class Builder {
        private Duration defaultLease = Duration.ofSeconds(30);
        private int renewDivisor = 3;
        private Duration safetyMargin = Duration.ofMillis(5);
        private double clockDrift = 0.01;
        private Duration waitMargin = Duration.ofSeconds(2);
        private Duration retryDelay = Duration.ofMillis(50);

        private Builder() {}

        /**
         * @param lease the lease of holds taken without one (at least 1 ms)
         * @return this builder
         */
        public Builder defaultLease(Duration lease) {
            Arguments.leaseMs(lease);
            this.defaultLease = lease;
            return this;
        }

        /**
         * @param divisor renew every {@code lease / divisor} (at least 2)
         * @return this builder
         */
        public Builder renewDivisor(int divisor) {
            if (divisor < 2) {
                throw new IllegalArgumentException("renewDivisor must be at least 2");
            }
            this.renewDivisor = divisor;
            return this;
        }

        /**
         * @param margin the fixed part of the lost-deadline margin
         * @return this builder
         */
        public Builder safetyMargin(Duration margin) {
            this.safetyMargin = Objects.requireNonNull(margin);
            return this;
        }

        /**
         * @param fraction the part of the margin proportional to the lease (0 to 0.5)
         * @return this builder
         */
        public Builder clockDrift(double fraction) {
            if (fraction < 0 || fraction > 0.5) {
                throw new IllegalArgumentException("clockDrift must be within 0..0.5");
            }
            this.clockDrift = fraction;
            return this;
        }

        /**
         * @param margin added to a blocking wait to make its read timeout
         * @return this builder
         */
        public Builder waitMargin(Duration margin) {
            this.waitMargin = Objects.requireNonNull(margin);
            return this;
        }

        /**
         * @param delay delay before retrying a renewal after a transient failure
         * @return this builder
         */
        public Builder retryDelay(Duration delay) {
            this.retryDelay = Objects.requireNonNull(delay);
            return this;
        }

        /** @return the settings */
        public DLockConfig build() {
            return new DLockConfig(this);
        }
    }
}
