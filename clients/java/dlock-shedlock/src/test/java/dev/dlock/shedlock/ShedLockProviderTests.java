package dev.dlock.shedlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DLockClient;
import dev.dlock.lettuce.LettuceTransport;
import dev.dlock.testkit.LockInfo;
import dev.dlock.testkit.Poll;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.Servers;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.Optional;
import java.util.UUID;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * ShedLock's provider contract (the behaviours its AbstractExtensibleLockProviderIntegrationTest
 * checks: shedlock-test-support is not published to Maven Central, so they are written out here),
 * against a real server. {@link #assertLocked} and {@link #assertUnlocked} read the server.
 */
@ExtendWith(Servers.class)
abstract class ShedLockProviderTests {
    private static final Duration LONG = Duration.ofSeconds(10);

    private RedisServer server;
    private DLockClient dlock;
    private DLockProvider provider;
    private String name;

    abstract RedisServer.Kind kind();

    @BeforeEach
    void setUp() {
        server = Servers.get(kind());
        dlock = new DLockClient(LettuceTransport.create(RedisURI.create(server.uri())));
        provider = new DLockProvider(dlock);
        name = "job-" + UUID.randomUUID();
    }

    @AfterEach
    void tearDown() {
        dlock.close();
    }

    private LockConfiguration config(String lockName, Duration atMost, Duration atLeast) {
        return new LockConfiguration(ClockProvider.now(), lockName, atMost, atLeast);
    }

    private void assertLocked(String lockName) {
        LockInfo info = LockInfo.of(server, provider.key(lockName));
        assertNotNull(info, lockName + " should be locked");
        assertEquals(1, info.holds());
    }

    private void assertUnlocked(String lockName) {
        assertNull(LockInfo.of(server, provider.key(lockName)), lockName + " should be unlocked");
    }

    @Test
    void lockThenUnlock() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        assertLocked(name);
        lock.unlock();
        assertUnlocked(name);
    }

    @Test
    void aHeldLockIsNotGrantedTwiceAndNeverWaits() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        long start = System.nanoTime();
        assertTrue(provider.lock(config(name, LONG, Duration.ZERO)).isEmpty());
        assertTrue(System.nanoTime() - start < Duration.ofSeconds(2).toNanos());
        lock.unlock();
        SimpleLock again = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        again.unlock();
    }

    @Test
    void namesAreIndependent() {
        SimpleLock a = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        SimpleLock b = provider.lock(config(name + "-other", LONG, Duration.ZERO)).orElseThrow();
        assertLocked(name);
        assertLocked(name + "-other");
        a.unlock();
        b.unlock();
    }

    @Test
    void lockAtMostForEndsTheLock() {
        provider.lock(config(name, Duration.ofMillis(150), Duration.ZERO)).orElseThrow();
        assertLocked(name);
        Poll.until("lockAtMostFor to pass", () -> LockInfo.of(server, provider.key(name)) == null);
        SimpleLock next = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        next.unlock();
    }

    @Test
    void lockAtLeastForIsHonouredAtUnlock() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ofMillis(400))).orElseThrow();
        lock.unlock();
        assertLocked(name);
        assertTrue(LockInfo.of(server, provider.key(name)).pttl() <= 400);
        assertTrue(provider.lock(config(name, LONG, Duration.ZERO)).isEmpty());
        Poll.until("lockAtLeastFor to pass", () -> LockInfo.of(server, provider.key(name)) == null);
        provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow().unlock();
    }

    @Test
    void unlockAfterLockAtLeastForReleasesAtOnce() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ofMillis(1))).orElseThrow();
        long end = System.nanoTime() + 2_000_000;
        Poll.until("lockAtLeastFor to pass", () -> System.nanoTime() > end);
        lock.unlock();
        Poll.until("the release", Duration.ofMillis(500), () -> LockInfo.of(server, provider.key(name)) == null);
    }

    @Test
    void extendRenewsTheLeaseAndRetiresTheOldLock() {
        SimpleLock lock = provider.lock(config(name, Duration.ofMillis(300), Duration.ZERO)).orElseThrow();
        Optional<SimpleLock> extended = lock.extend(Duration.ofSeconds(5), Duration.ZERO);
        assertTrue(extended.isPresent());
        assertTrue(LockInfo.of(server, provider.key(name)).pttl() > 1000, "the lease is the new lockAtMostFor");
        assertThrows(IllegalStateException.class, lock::unlock);
        assertThrows(IllegalStateException.class, () -> lock.extend(Duration.ofSeconds(5), Duration.ZERO));
        extended.get().unlock();
        assertUnlocked(name);
    }

    @Test
    void extendOfAnExpiredLockFails() {
        SimpleLock lock = provider.lock(config(name, Duration.ofMillis(100), Duration.ZERO)).orElseThrow();
        Poll.until("the lease to end", () -> LockInfo.of(server, provider.key(name)) == null);
        assertTrue(lock.extend(Duration.ofSeconds(5), Duration.ZERO).isEmpty());
        assertUnlocked(name);
    }

    @Test
    void extendedLockHonoursItsOwnLockAtLeastFor() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        SimpleLock extended = lock.extend(LONG, Duration.ofMillis(300)).orElseThrow();
        extended.unlock();
        assertLocked(name);
        Poll.until("lockAtLeastFor to pass", () -> LockInfo.of(server, provider.key(name)) == null);
    }

    @Test
    void unlockTwiceFails() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        lock.unlock();
        assertThrows(IllegalStateException.class, lock::unlock);
    }

    @Test
    void anotherOwnerCannotBeUnlocked() {
        SimpleLock lock = provider.lock(config(name, Duration.ofMillis(100), Duration.ZERO)).orElseThrow();
        Poll.until("the lease to end", () -> LockInfo.of(server, provider.key(name)) == null);
        SimpleLock next = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        lock.unlock();
        assertLocked(name);
        next.unlock();
        assertUnlocked(name);
    }
}
