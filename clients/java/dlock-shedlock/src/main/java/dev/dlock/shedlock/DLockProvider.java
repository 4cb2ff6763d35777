package dev.dlock.shedlock;

import dev.dlock.DLockClient;
import dev.dlock.Lease;
import dev.dlock.LockLostException;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;
import java.util.Optional;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;

/**
 * ShedLock's {@link ExtensibleLockProvider} on dlock.
 *
 * <ul>
 *   <li>{@code lock} makes one {@code DLOCK.ACQUIRE} with {@code lockAtMostFor} as the lease
 *       (never waits: ShedLock skips the run when the lock is held), with an owner of its own.
 *   <li>{@code unlock} releases the lock, or, while {@code lockAtLeastFor} has not passed, renews
 *       it to the rest of {@code lockAtLeastFor} and lets the server end it then.
 *   <li>{@code extend} is {@code DLOCK.RENEW} with the new {@code lockAtMostFor}.
 * </ul>
 *
 * <pre>{@code
 * @Bean
 * LockProvider lockProvider(DLockClient dlock) {
 *     return new DLockProvider(dlock);
 * }
 * }</pre>
 */
public final class DLockProvider implements ExtensibleLockProvider {
    private final DLockClient client;
    private final String prefix;

    /**
     * Keys are {@code shedlock:<name>}.
     *
     * @param client the dlock client
     */
    public DLockProvider(DLockClient client) {
        this(client, "shedlock:");
    }

    /**
     * @param client the dlock client
     * @param prefix prepended to each lock name to make its key
     */
    public DLockProvider(DLockClient client, String prefix) {
        this.client = Objects.requireNonNull(client);
        this.prefix = Objects.requireNonNull(prefix);
    }

    /**
     * @param name a ShedLock lock name
     * @return its key
     */
    public String key(String name) {
        return prefix + name;
    }

    @Override
    public Optional<SimpleLock> lock(LockConfiguration configuration) {
        // A lockAtMostUntil that has (nearly) passed still gets the lock, for the shortest lease
        // the server takes: ShedLock's contract locks with lockAtMostFor = 2 ms and expects a grant,
        // and its clock counts whole milliseconds, so the rest may already be 0 here.
        Duration lease = leaseUntil(configuration.getLockAtMostUntil());
        if (lease == null) {
            lease = Duration.ofMillis(1);
        }
        return client.getLock(key(configuration.getName())).tryAcquire(lease)
                .map(granted -> new DLockSimpleLock(granted, configuration));
    }

    private static Duration leaseUntil(Instant until) {
        Duration lease = Duration.between(ClockProvider.now(), until);
        return lease.toMillis() < 1 ? null : lease;
    }

    private final class DLockSimpleLock implements SimpleLock {
        private final Lease lease;
        private final LockConfiguration configuration;
        private boolean valid = true;

        DLockSimpleLock(Lease lease, LockConfiguration configuration) {
            this.lease = lease;
            this.configuration = configuration;
        }

        private void checkValid() {
            if (!valid) {
                throw new IllegalStateException("the lock '" + configuration.getName() + "' is no longer valid (unlocked or extended)");
            }
        }

        @Override
        public synchronized void unlock() {
            checkValid();
            valid = false;
            Duration rest = Duration.between(ClockProvider.now(), configuration.getLockAtLeastUntil());
            if (rest.toMillis() >= 1) {
                // Held until lockAtLeastFor has passed, then ended by the server.
                try {
                    lease.renew(rest);
                    lease.abandon();
                    return;
                } catch (LockLostException e) {
                    // gone already: the release below reports nothing
                }
            }
            lease.close();
        }

        @Override
        public synchronized Optional<SimpleLock> extend(Duration lockAtMostFor, Duration lockAtLeastFor) {
            checkValid();
            LockConfiguration extended = new LockConfiguration(ClockProvider.now(), configuration.getName(),
                    lockAtMostFor, lockAtLeastFor);
            Duration leaseFor = leaseUntil(extended.getLockAtMostUntil());
            if (leaseFor == null) {
                return Optional.empty();
            }
            try {
                lease.renew(leaseFor);
            } catch (LockLostException e) {
                return Optional.empty();
            }
            valid = false;
            return Optional.of(new DLockSimpleLock(lease, extended));
        }
    }
}
