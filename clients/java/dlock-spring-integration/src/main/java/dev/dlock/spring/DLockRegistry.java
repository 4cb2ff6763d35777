package dev.dlock.spring;

import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.LockLostException;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.Lock;
import org.springframework.integration.support.locks.ExpirableLockRegistry;
import org.springframework.integration.support.locks.RenewableLockRegistry;

/**
 * A Spring Integration {@link org.springframework.integration.support.locks.LockRegistry} on
 * dlock, in place of {@code RedisLockRegistry}. Its locks are {@link DLock}s: thread-owned,
 * re-entrant (counted in the server), renewed by the client's watchdog while held (so {@link
 * #renewLock} is never needed, though it works), queued in the server instead of polled or woken
 * by pub/sub, and an {@code unlock()} of a lock that was lost throws {@link LockLostException}.
 *
 * <pre>{@code
 * @Bean
 * DLockRegistry lockRegistry(DLockClient dlock) {
 *     return new DLockRegistry(dlock, "orders");
 * }
 * }</pre>
 */
public final class DLockRegistry implements ExpirableLockRegistry, RenewableLockRegistry {
    private final DLockClient client;
    private final String registryKey;
    private final Map<String, RegistryLock> locks = new ConcurrentHashMap<>();

    /**
     * @param client the dlock client
     * @param registryKey the prefix of every key: {@code <registryKey>:<lockKey>}
     */
    public DLockRegistry(DLockClient client, String registryKey) {
        this.client = Objects.requireNonNull(client);
        this.registryKey = Objects.requireNonNull(registryKey);
    }

    /**
     * @param lockKey a lock key given to {@link #obtain}
     * @return its Redis key
     */
    public String key(Object lockKey) {
        return registryKey + ":" + lockKey;
    }

    @Override
    public Lock obtain(Object lockKey) {
        String name = lockKey.toString();
        return locks.computeIfAbsent(name, k -> new RegistryLock(client.getLock(key(k))));
    }

    /** Forgets the locks that no thread of this registry holds and that were last taken more than {@code age} ms ago. */
    @Override
    public void expireUnusedOlderThan(long age) {
        long now = System.currentTimeMillis();
        locks.entrySet().removeIf(e -> e.getValue().holders.get() == 0 && now - e.getValue().lastUsed > age);
    }

    /**
     * Renews the calling thread's hold of {@code lockKey} now.
     *
     * @throws IllegalStateException when the registry has no such lock or the thread does not hold it
     */
    @Override
    public void renewLock(Object lockKey) {
        RegistryLock lock = locks.get(lockKey.toString());
        if (lock == null) {
            throw new IllegalStateException("no lock '" + lockKey + "' in this registry");
        }
        try {
            lock.lock.renew();
        } catch (IllegalMonitorStateException e) {
            throw new IllegalStateException("the current thread does not hold the lock '" + lockKey + "'", e);
        }
    }

    /** @return how many locks the registry keeps now */
    public int size() {
        return locks.size();
    }

    /** A registry lock: the {@link DLock} plus what {@link #expireUnusedOlderThan} needs. */
    private static final class RegistryLock implements Lock {
        final DLock lock;
        final AtomicInteger holders = new AtomicInteger();
        volatile long lastUsed = System.currentTimeMillis();

        RegistryLock(DLock lock) {
            this.lock = lock;
        }

        private boolean took(boolean granted) {
            if (granted) {
                holders.incrementAndGet();
                lastUsed = System.currentTimeMillis();
            }
            return granted;
        }

        @Override
        public void lock() {
            lock.lock();
            took(true);
        }

        @Override
        public void lockInterruptibly() throws InterruptedException {
            lock.lockInterruptibly();
            took(true);
        }

        @Override
        public boolean tryLock() {
            return took(lock.tryLock());
        }

        @Override
        public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
            return took(lock.tryLock(time, unit));
        }

        @Override
        public void unlock() {
            boolean held = lock.getHoldCount() > 0;
            try {
                lock.unlock();
            } finally {
                if (held) {
                    holders.decrementAndGet();
                }
            }
        }

        @Override
        public Condition newCondition() {
            throw new UnsupportedOperationException("dlock locks have no conditions");
        }

        @Override
        public String toString() {
            return lock.toString();
        }
    }
}
