package dev.dlock.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DLockClient;
import dev.dlock.DLockConfig;
import dev.dlock.LockLostException;
import dev.dlock.lettuce.LettuceTransport;
import dev.dlock.testkit.LockInfo;
import dev.dlock.testkit.Poll;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.Servers;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.integration.leader.Context;
import org.springframework.integration.leader.DefaultCandidate;
import org.springframework.integration.support.leader.LockRegistryLeaderInitiator;

/** The registry and Spring's own leader election on it, against a real server. */
@ExtendWith(Servers.class)
abstract class RegistryTests {
    private RedisServer server;
    private DLockClient dlock;
    private DLockClient other;
    private String registryKey;

    abstract RedisServer.Kind kind();

    @BeforeEach
    void setUp() {
        server = Servers.get(kind());
        DLockConfig config = DLockConfig.builder().defaultLease(Duration.ofSeconds(2)).build();
        dlock = new DLockClient(LettuceTransport.create(RedisURI.create(server.uri())), config);
        other = new DLockClient(LettuceTransport.create(RedisURI.create(server.uri())), config);
        registryKey = "spring-" + UUID.randomUUID();
    }

    @AfterEach
    void tearDown() {
        dlock.close();
        other.close();
    }

    private static <T> T onOtherThread(java.util.concurrent.Callable<T> body) throws Exception {
        CompletableFuture<T> result = new CompletableFuture<>();
        new Thread(() -> {
            try {
                result.complete(body.call());
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        }).start();
        return result.get(20, TimeUnit.SECONDS);
    }

    @Test
    void locksOfOneKeyExcludeEachOtherAcrossRegistries() throws Exception {
        DLockRegistry a = new DLockRegistry(dlock, registryKey);
        DLockRegistry b = new DLockRegistry(other, registryKey);
        Lock lock = a.obtain("order-1");
        assertSame(lock, a.obtain("order-1"));
        lock.lock();
        assertNotNull(LockInfo.of(server, a.key("order-1")));
        assertFalse(onOtherThread(() -> b.obtain("order-1").tryLock(100, TimeUnit.MILLISECONDS)));
        assertTrue(onOtherThread(() -> {
            Lock l = b.obtain("order-2");
            boolean got = l.tryLock();
            l.unlock();
            return got;
        }));
        lock.unlock();
        assertNull(LockInfo.of(server, a.key("order-1")));
    }

    @Test
    void reentryAndUnlockByANonHolder() throws Exception {
        DLockRegistry registry = new DLockRegistry(dlock, registryKey);
        Lock lock = registry.obtain("k");
        lock.lock();
        lock.lock();
        assertEquals(2, LockInfo.of(server, registry.key("k")).holds());
        Throwable e = onOtherThread(() -> {
            try {
                lock.unlock();
                return null;
            } catch (IllegalMonitorStateException x) {
                return x;
            }
        });
        assertTrue(e instanceof IllegalMonitorStateException);
        lock.unlock();
        lock.unlock();
        assertNull(LockInfo.of(server, registry.key("k")));
    }

    @Test
    void executeLockedRunsUnderTheLock() throws Exception {
        DLockRegistry registry = new DLockRegistry(dlock, registryKey);
        String seen = registry.executeLocked("job", () -> LockInfo.of(server, registry.key("job")).owner());
        assertNotNull(seen);
        assertNull(LockInfo.of(server, registry.key("job")));
    }

    @Test
    void expireUnusedForgetsOnlyFreeLocks() {
        DLockRegistry registry = new DLockRegistry(dlock, registryKey);
        Lock held = registry.obtain("held");
        Lock free = registry.obtain("free");
        held.lock();
        free.lock();
        free.unlock();
        registry.expireUnusedOlderThan(-1);
        assertEquals(1, registry.size());
        assertSame(held, registry.obtain("held"));
        assertNotSame(free, registry.obtain("free"));
        held.unlock();
    }

    @Test
    void renewLockRenewsTheHolderAndRefusesOthers() throws Exception {
        DLockRegistry registry = new DLockRegistry(dlock, registryKey);
        assertThrows(IllegalStateException.class, () -> registry.renewLock("none"));
        Lock lock = registry.obtain("r");
        lock.lock();
        Poll.until("the lease to run down a little", () -> LockInfo.of(server, registry.key("r")).pttl() < 1950);
        long before = LockInfo.of(server, registry.key("r")).pttl();
        registry.renewLock("r");
        assertTrue(LockInfo.of(server, registry.key("r")).pttl() > before, "renewLock reset the lease");
        Throwable e = onOtherThread(() -> {
            try {
                registry.renewLock("r");
                return null;
            } catch (IllegalStateException x) {
                return x;
            }
        });
        assertNotNull(e);
        lock.unlock();
    }

    @Test
    void unlockOfALostLockThrowsLockLost() {
        DLockRegistry registry = new DLockRegistry(dlock, registryKey);
        Lock lock = registry.obtain("lost");
        lock.lock();
        server.call("DEL", registry.key("lost"));
        assertThrows(LockLostException.class, lock::unlock);
    }

    /** A candidate that records its events. */
    private static final class Recorder extends DefaultCandidate {
        final List<String> events = new CopyOnWriteArrayList<>();

        Recorder(String id, String role) {
            super(id, role);
        }

        @Override
        public void onGranted(Context ctx) {
            events.add("granted");
        }

        @Override
        public void onRevoked(Context ctx) {
            events.add("revoked");
        }
    }

    @Test
    void springLeaderElectionFailsOverBetweenRegistries() {
        String role = "role-" + UUID.randomUUID();
        Recorder first = new Recorder("first", role);
        Recorder second = new Recorder("second", role);
        LockRegistryLeaderInitiator a = new LockRegistryLeaderInitiator(new DLockRegistry(dlock, registryKey), first);
        LockRegistryLeaderInitiator b = new LockRegistryLeaderInitiator(new DLockRegistry(other, registryKey), second);
        for (LockRegistryLeaderInitiator initiator : List.of(a, b)) {
            initiator.setHeartBeatMillis(50);
            initiator.setBusyWaitMillis(50);
        }
        try {
            a.start();
            Poll.until("the first to lead", () -> a.getContext().isLeader());
            b.start();
            assertNotNull(LockInfo.of(server, registryKey + ":" + role));
            assertFalse(b.getContext().isLeader());
            a.stop();
            Poll.until("the second to lead", () -> b.getContext().isLeader());
            assertTrue(first.events.contains("revoked"));
            assertTrue(second.events.contains("granted"));
            assertFalse(a.getContext().isLeader());
        } finally {
            a.stop();
            b.stop();
        }
        Poll.until("the leader lock to be released", () -> LockInfo.of(server, registryKey + ":" + role) == null);
    }
}
