package dev.dlock.examples;

import dev.dlock.DLockClient;
import dev.dlock.jedis.JedisTransport;
import dev.dlock.shedlock.DLockProvider;
import dev.dlock.spring.DLockRegistry;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.locks.Lock;
import net.javacrumbs.shedlock.core.DefaultLockingTaskExecutor;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockingTaskExecutor;
import redis.clients.jedis.JedisPool;

/** ShedLock and Spring Integration on dlock, over Jedis this time. */
@SuppressWarnings("deprecation") // JedisPool
public final class IntegrationsExample {
    private IntegrationsExample() {}

    /**
     * @param args unused
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        java.net.URI url = java.net.URI.create(System.getenv().getOrDefault("DLOCK_URL", "redis://127.0.0.1:6379"));
        try (JedisPool pool = new JedisPool(url.getHost(), url.getPort());
                DLockClient dlock = new DLockClient(JedisTransport.create(pool))) {
            LockingTaskExecutor executor = new DefaultLockingTaskExecutor(new DLockProvider(dlock));
            executor.executeWithLock((Runnable) () -> System.out.println("the nightly job runs on one node"),
                    new LockConfiguration(Instant.now(), "nightly", Duration.ofMinutes(10), Duration.ofSeconds(5)));

            DLockRegistry registry = new DLockRegistry(dlock, "orders");
            Lock lock = registry.obtain("order-42");
            lock.lock();
            try {
                System.out.println("order 42 under Spring's LockRegistry");
            } finally {
                lock.unlock();
            }
        }
    }
}
