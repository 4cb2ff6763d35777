package dev.dlock.shedlock;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.dlock.DLockClient;
import dev.dlock.lettuce.LettuceTransport;
import dev.dlock.testkit.LockInfo;
import dev.dlock.testkit.Poll;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.Servers;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.UUID;
import net.javacrumbs.shedlock.core.ClockProvider;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.test.support.AbstractExtensibleLockProviderIntegrationTest;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * ShedLock's own provider contract ({@link AbstractExtensibleLockProviderIntegrationTest} from
 * shedlock-test-support) against a real server, plus the behaviours that contract does not check
 * (a retired or stale {@link SimpleLock} must not release anything, an extended lock keeps its own
 * {@code lockAtLeastFor} and then ends). {@link #assertLocked} and {@link #assertUnlocked} read
 * the lock's state in the server with {@code DLOCK.INFO}.
 */
@ExtendWith(Servers.class)
abstract class ShedLockProviderTests extends AbstractExtensibleLockProviderIntegrationTest {
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

    @Override
    protected ExtensibleLockProvider getLockProvider() {
        return provider;
    }

    @Override
    protected void assertLocked(String lockName) {
        LockInfo info = LockInfo.of(server, provider.key(lockName));
        assertNotNull(info, lockName + " should be locked");
        assertEquals(1, info.holds());
    }

    @Override
    protected void assertUnlocked(String lockName) {
        assertNull(LockInfo.of(server, provider.key(lockName)), lockName + " should be unlocked");
    }

    private LockConfiguration config(String lockName, Duration atMost, Duration atLeast) {
        return new LockConfiguration(ClockProvider.now(), lockName, atMost, atLeast);
    }

    @Test
    void unlockTwiceFails() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        lock.unlock();
        assertThrows(IllegalStateException.class, lock::unlock);
    }

    @Test
    void aStaleLockDoesNotUnlockItsSuccessor() {
        SimpleLock lock = provider.lock(config(name, Duration.ofMillis(100), Duration.ZERO)).orElseThrow();
        Poll.until("the lease to end", () -> LockInfo.of(server, provider.key(name)) == null);
        SimpleLock next = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        lock.unlock();
        assertLocked(name);
        next.unlock();
        assertUnlocked(name);
    }

    @Test
    void extendedLockHonoursItsOwnLockAtLeastForThenEnds() {
        SimpleLock lock = provider.lock(config(name, LONG, Duration.ZERO)).orElseThrow();
        SimpleLock extended = lock.extend(LONG, Duration.ofMillis(300)).orElseThrow();
        extended.unlock();
        assertLocked(name);
        Poll.until("lockAtLeastFor to pass", () -> LockInfo.of(server, provider.key(name)) == null);
    }
}
