package dev.dlock.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DCountDownLatch;
import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.DLockConfig;
import dev.dlock.DReadWriteLock;
import dev.dlock.DSemaphore;
import dev.dlock.DeadlockException;
import dev.dlock.LatchBrokenException;
import dev.dlock.Lease;
import dev.dlock.LockBusyException;
import dev.dlock.LockLostException;
import dev.dlock.LostReason;
import dev.dlock.Transport;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The rules every transport must keep, run against a real server: a transport module subclasses
 * this once per server kind and says how to build its transport.
 */
@ExtendWith(Servers.class)
public abstract class LockContractTests {
    /** The server of this run. */
    protected RedisServer server;
    /** A client with the default settings. */
    protected DLockClient dlock;
    /** A fresh key per test. */
    protected String key;
    private final List<AutoCloseable> closeables = new ArrayList<>();

    /** @return which server this class runs against */
    protected abstract RedisServer.Kind kind();

    /**
     * @param server the server
     * @return a new transport to it
     */
    protected abstract Transport transport(RedisServer server);

    /**
     * @param config the settings
     * @return a new client (closed after the test)
     */
    protected DLockClient client(DLockConfig config) {
        DLockClient client = new DLockClient(transport(server), config);
        closeables.add(client);
        return client;
    }

    @BeforeEach
    void setUp(TestInfo info) {
        server = Servers.get(kind());
        dlock = client(DLockConfig.defaults());
        key = "java:" + info.getTestMethod().map(m -> m.getName()).orElse("t") + ":" + UUID.randomUUID();
    }

    @AfterEach
    void tearDown() throws Exception {
        for (AutoCloseable c : closeables) {
            c.close();
        }
        closeables.clear();
    }

    /** Runs {@code body} on a new thread and waits for it. */
    protected static <T> T onOtherThread(java.util.concurrent.Callable<T> body) throws Exception {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread thread = new Thread(() -> {
            try {
                result.complete(body.call());
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        });
        thread.start();
        try {
            return result.get(20, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception) {
                throw (Exception) e.getCause();
            }
            throw e;
        }
    }

    // ---- bad arguments (R9.2) ---------------------------------------------------------------

    @Test
    void badArgumentsAreRefusedBeforeAnythingIsSent() throws Exception {
        DLock lock = dlock.getLock(key);
        // A lease of 0 or less, whatever the overload (lock(0) and lock(-5) alike), or above 2^53-1 ms.
        assertThrows(IllegalArgumentException.class, () -> lock.acquire(Duration.ZERO, Duration.ofSeconds(-5)));
        assertThrows(IllegalArgumentException.class, () -> lock.tryAcquire(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> lock.lock(0, TimeUnit.SECONDS));
        assertThrows(IllegalArgumentException.class, () -> lock.lock(-5, TimeUnit.SECONDS));
        assertThrows(IllegalArgumentException.class, () -> lock.lockInterruptibly(-5, TimeUnit.SECONDS));
        assertThrows(IllegalArgumentException.class, () -> lock.tryLock(0, -5, TimeUnit.SECONDS));
        assertThrows(IllegalArgumentException.class, () -> lock.tryAcquire(Duration.ofSeconds(Long.MAX_VALUE)));
        assertThrows(IllegalArgumentException.class, () -> lock.tryAcquire(Duration.ofMillis(1L << 53)));
        assertThrows(IllegalArgumentException.class,
                () -> dev.dlock.AcquireOptions.defaults().lease(Duration.ofSeconds(Long.MAX_VALUE)));
        // The owner "*" (the server would generate one) and owners outside 1 to 512 bytes.
        assertThrows(IllegalArgumentException.class, () -> dev.dlock.AcquireOptions.defaults().owner("*"));
        assertThrows(IllegalArgumentException.class, () -> dev.dlock.AcquireOptions.defaults().owner(""));
        assertThrows(IllegalArgumentException.class,
                () -> dev.dlock.AcquireOptions.defaults().owner("x".repeat(513)));
        // Null keys.
        assertThrows(NullPointerException.class, () -> dlock.getLock(null));
        assertThrows(NullPointerException.class, () -> dlock.getSemaphore(null, 2));
        assertThrows(NullPointerException.class, () -> dlock.getMultiLock(key, null));
        assertNull(LockInfo.of(server, key), "nothing reached the server");
        // A wait too long for nanoseconds waits as long as it can instead of overflowing.
        try (Lease lease = lock.acquire(Duration.ofSeconds(Long.MAX_VALUE))) {
            assertThrows(IllegalArgumentException.class, () -> lease.renew(Duration.ZERO));
            assertEquals(lease.token(), LockInfo.of(server, key).token());
        }
    }

    // ---- the thread facade ------------------------------------------------------------------

    @Test
    void lockUnlockShowsInTheServerWithAUuidOwnerAndAToken() {
        DLock lock = dlock.getLock(key);
        lock.lock();
        LockInfo info = LockInfo.of(server, key);
        assertNotNull(info);
        assertEquals(1, info.holds());
        assertEquals(info.token(), lock.getToken());
        assertEquals(info.owner(), UUID.fromString(info.owner()).toString(), "the owner is a UUID");
        assertTrue(lock.isLocked());
        assertTrue(lock.isHeldByCurrentThread());
        lock.unlock();
        assertNull(LockInfo.of(server, key), "the key is gone after the last unlock");
        assertFalse(lock.isLocked());
        assertFalse(lock.isHeldByCurrentThread());
    }

    @Test
    void reentryIsCountedInTheServerUnderOneOwner() {
        DLock lock = dlock.getLock(key);
        lock.lock();
        String owner = LockInfo.of(server, key).owner();
        long token = lock.getToken();
        assertTrue(lock.tryLock());
        assertEquals(2, lock.getHoldCount());
        LockInfo info = LockInfo.of(server, key);
        assertEquals(2, info.holds());
        assertEquals(owner, info.owner());
        assertEquals(token, info.token());
        lock.unlock();
        assertEquals(1, LockInfo.of(server, key).holds());
        assertEquals(1, lock.getHoldCount());
        lock.unlock();
        assertNull(LockInfo.of(server, key));
        assertEquals(0, lock.getHoldCount());
    }

    @Test
    void eachAcquisitionHasANewOwnerAndAHigherToken() {
        DLock lock = dlock.getLock(key);
        lock.lock();
        String first = LockInfo.of(server, key).owner();
        long firstToken = lock.getToken();
        lock.unlock();
        lock.lock();
        assertNotEquals(first, LockInfo.of(server, key).owner());
        assertTrue(lock.getToken() > firstToken);
        lock.unlock();
    }

    @Test
    void unlockFromAnotherThreadThrowsAndLeavesTheHold() throws Exception {
        DLock lock = dlock.getLock(key);
        lock.lock();
        Exception thrown = onOtherThread(() -> {
            try {
                lock.unlock();
                return null;
            } catch (IllegalMonitorStateException e) {
                return e;
            }
        });
        assertNotNull(thrown);
        assertFalse(thrown instanceof LockLostException, "a non-holder's unlock is not a lost lock");
        assertEquals(1, LockInfo.of(server, key).holds());
        assertFalse(onOtherThread(() -> lock.isHeldByCurrentThread()));
        lock.unlock();
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void otherThreadsWaitAndAreHandedTheLock() throws Exception {
        DLock lock = dlock.getLock(key);
        lock.lock();
        assertFalse(onOtherThread(() -> lock.tryLock()));
        AtomicLong token = new AtomicLong();
        Thread waiter = new Thread(() -> {
            lock.lock();
            token.set(lock.getToken());
            lock.unlock();
        });
        waiter.start();
        Poll.until("the waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
        long mine = lock.getToken();
        lock.unlock();
        waiter.join(10_000);
        assertFalse(waiter.isAlive());
        assertTrue(token.get() > mine, "the waiter got a new, higher token");
        assertNull(LockInfo.of(server, key));
    }

    @Test
    void tryLockWithAWaitTimesOutAndLeavesNoWaiter() throws Exception {
        DLock lock = dlock.getLock(key);
        lock.lock();
        long start = System.nanoTime();
        boolean got = onOtherThread(() -> lock.tryLock(150, TimeUnit.MILLISECONDS));
        assertFalse(got);
        assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(150));
        assertEquals(0, LockInfo.of(server, key).waiting());
        lock.unlock();
    }

    @Test
    void interruptDuringLockInterruptiblyLeavesNoWaiterAndNoHold() throws Exception {
        DLock lock = dlock.getLock(key);
        lock.lock();
        AtomicReference<Throwable> outcome = new AtomicReference<>();
        Thread waiter = new Thread(() -> {
            try {
                lock.lockInterruptibly();
                outcome.set(new AssertionError("granted"));
            } catch (Throwable e) {
                outcome.set(e);
            }
        });
        waiter.start();
        Poll.until("the waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
        waiter.interrupt();
        waiter.join(10_000);
        assertTrue(outcome.get() instanceof InterruptedException, String.valueOf(outcome.get()));
        // The clean-up (CLIENT UNBLOCK) runs in the background (R4.7).
        Poll.until("no waiter left in the queue", () -> LockInfo.of(server, key).waiting() == 0);
        assertEquals(1, LockInfo.of(server, key).holders().size(), "no hold but ours");
        lock.unlock();
        assertNull(LockInfo.of(server, key), "nothing left behind");
    }

    @Test
    void aLockWaiterWhoseConnectionIsKilledFailsAndLeavesNoWaiterAndNoHold() throws Exception {
        DLock lock = dlock.getLock(key);
        lock.lock();
        AtomicReference<Throwable> outcome = new AtomicReference<>();
        Thread waiter = new Thread(() -> {
            try {
                lock.lock();
                outcome.set(new AssertionError("granted"));
            } catch (Throwable e) {
                outcome.set(e);
            }
        });
        waiter.start();
        Poll.until("the waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
        String blocked = null;
        for (String line : String.valueOf(server.call("CLIENT", "LIST")).split("\n")) {
            if (line.contains("cmd=dlock.acquire") && line.contains("flags=b")) {
                blocked = line.split(" ")[0].substring("id=".length());
            }
        }
        assertNotNull(blocked, "the waiter's connection is blocked in DLOCK.ACQUIRE");
        assertEquals(1L, server.call("CLIENT", "KILL", "ID", blocked));
        waiter.join(10_000);
        assertFalse(waiter.isAlive());
        assertTrue(outcome.get() instanceof dev.dlock.DLockConnectionException, String.valueOf(outcome.get()));
        Poll.until("no waiter left in the queue", () -> LockInfo.of(server, key).waiting() == 0);
        assertEquals(1, LockInfo.of(server, key).holders().size(), "no hold but ours");
        lock.unlock();
        assertNull(LockInfo.of(server, key), "nothing left behind");
    }

    @Test
    void theWatchdogKeepsAShortLeaseAlive() throws Exception {
        // 1.2 s held for 2.5 leases: renewals every 400 ms leave a watchdog 0.8 s of scheduling delay
        // (a 600 ms lease left 0.4 s, and a loaded machine's late timer once lost it).
        DLockClient client = client(DLockConfig.builder().defaultLease(Duration.ofMillis(1200)).build());
        DLock lock = client.getLock(key);
        lock.lock();
        long token = lock.getToken();
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(3000);
        while (System.nanoTime() < end) {
            LockInfo info = LockInfo.of(server, key);
            if (info == null) {
                CompletableFuture<LostReason> lost = lock.lostByCurrentThread().toCompletableFuture();
                Assertions.fail("the lease must not end while renewed (lost: " + (lost.isDone() ? lost.join() : "no") + ")");
            }
            assertEquals(token, info.token());
            Thread.sleep(20);
        }
        assertTrue(lock.isHeldByCurrentThread());
        lock.unlock();
        assertNull(LockInfo.of(server, key));
    }

    @Test
    void aDeletedLockIsReportedLostAndItsUnlockThrowsLockLost() throws Exception {
        DLockClient client = client(DLockConfig.builder().defaultLease(Duration.ofMillis(300)).build());
        DLock lock = client.getLock(key);
        lock.lock();
        CompletableFuture<LostReason> lost = lock.lostByCurrentThread().toCompletableFuture();
        server.call("DEL", key);
        assertEquals(LostReason.NOT_OWNER, lost.get(5, TimeUnit.SECONDS));
        assertFalse(lock.isHeldByCurrentThread());
        LockLostException e = assertThrows(LockLostException.class, lock::unlock);
        assertEquals(LostReason.NOT_OWNER, e.reason());
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
    }

    @Test
    void aFixedLeaseIsNotRenewedAndEndsAsLost() throws Exception {
        DLock lock = dlock.getLock(key);
        // 500 ms: what load does to the timings here only delays the look below, which then
        // passes, so the lease need not be long.
        lock.lock(500, TimeUnit.MILLISECONDS);
        // The grant was sent before lock() returned, so R3.2's local deadline (send + lease -
        // margin) is at or before this instant: a look at the guard from then on must find it
        // lost, however late the watchdog's thread runs on a loaded machine. A client whose
        // deadline came after the server's lease end (no margin, or counted from the reply of a
        // slow grant) fails here on an idle machine; one that never reports the loss, always.
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500) - margin(500);
        CompletableFuture<LostReason> lost = lock.lostByCurrentThread().toCompletableFuture();
        sleepUntil(deadline);
        assertFalse(lock.isHeldByCurrentThread(), "held past its local deadline");
        assertEquals(LostReason.DEADLINE, lost.getNow(null), "lost signal by the first look past the deadline");
        Poll.until("the server's lease to end", () -> LockInfo.of(server, key) == null);
        assertThrows(LockLostException.class, lock::unlock);
    }

    /** R3.2's safety margin for a lease of {@code leaseMs} under the default settings. */
    protected static long margin(long leaseMs) {
        DLockConfig config = DLockConfig.defaults();
        return config.safetyMargin().toNanos() + (long) (leaseMs * 1_000_000L * config.clockDrift());
    }

    /** Waits until System.nanoTime reaches {@code at} (at least: a late wake-up is harmless). */
    protected static void sleepUntil(long at) throws InterruptedException {
        for (long left = at - System.nanoTime(); left > 0; left = at - System.nanoTime()) {
            TimeUnit.NANOSECONDS.sleep(left);
        }
    }

    @Test
    void aKilledServerIsReportedLostBeforeTheLeaseEnds() throws Exception {
        RedisServer own = RedisServer.start(kind());
        try {
            DLockClient client = new DLockClient(transport(own),
                    DLockConfig.builder().defaultLease(Duration.ofMillis(500)).build());
            closeables.add(client);
            // Connect first: the lease below must measure the lost signal, not the first connect.
            client.getLock(key + ":warm-up").tryAcquire().ifPresent(Lease::close);
            Lease unseen = client.getLock(key + ":unseen").acquire(Duration.ZERO);
            Lease lease = client.getLock(key).acquire(Duration.ZERO);
            own.kill();
            // The last grant or renewal that succeeded was sent before the server died, so before
            // kill() returned: the local deadlines (R3.2) are at or before this instant plus the
            // lease minus the margin, which is before the server's lease end, and no reply is
            // needed to reach them. A look from then on finds the lease lost, however loaded the
            // machine.
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500) - margin(500);
            sleepUntil(deadline);
            assertFalse(lease.isValid(), "valid past its local deadline with the server gone");
            assertEquals(LostReason.DEADLINE, lease.lost().toCompletableFuture().getNow(null));
            // Nobody looks at the other one: the watchdog's timer fires its signal by itself (its
            // lateness on a loaded machine is the scheduler's, so it is bounded loosely here).
            assertEquals(LostReason.DEADLINE, unseen.lost().toCompletableFuture().get(5, TimeUnit.SECONDS));
            assertFalse(unseen.isValid());
        } finally {
            own.close();
        }
    }

    // ---- the handle API -----------------------------------------------------------------------

    @Test
    void leasesAreReleasedByTryWithResourcesAndCloseIsIdempotent() throws Exception {
        DLock lock = dlock.getLock(key);
        Lease kept;
        try (Lease lease = lock.acquire(Duration.ofSeconds(1))) {
            kept = lease;
            assertTrue(lease.isValid());
            LockInfo info = LockInfo.of(server, key);
            assertEquals(lease.owner(), info.owner());
            assertEquals(lease.token(), info.token());
            assertTrue(lock.tryAcquire().isEmpty(), "a second lease has another owner: no re-entry");
        }
        assertFalse(kept.isValid());
        assertNull(LockInfo.of(server, key));
        kept.close();
        assertFalse(kept.lost().toCompletableFuture().isDone(), "a closed lease is not lost");
    }

    @Test
    void aReleaseAnsweredNotOwnerFailsAndLeavesTheLeaseLost() throws Exception {
        Lease lease = dlock.getLock(key).acquire(Duration.ZERO);
        server.call("DEL", key);
        assertThrows(dev.dlock.NotOwnerException.class, lease::close);
        assertEquals(LostReason.NOT_OWNER, lease.lost().toCompletableFuture().get(1, TimeUnit.SECONDS));
        assertFalse(lease.isValid());
        lease.close();
        assertThrows(LockLostException.class, () -> lease.renew(Duration.ofSeconds(1)));
    }

    @Test
    void leasesAreNotTiedToThreads() throws Exception {
        DLock lock = dlock.getLock(key);
        Lease lease = onOtherThread(() -> lock.acquire(Duration.ZERO));
        assertEquals(1, LockInfo.of(server, key).holds());
        lease.close();
        assertNull(LockInfo.of(server, key));
    }

    @Test
    void acquireThrowsBusyWhenNotGrantedInTime() throws Exception {
        DLock lock = dlock.getLock(key);
        try (Lease held = lock.acquire(Duration.ZERO)) {
            assertThrows(LockBusyException.class, () -> lock.acquire(Duration.ofMillis(100)));
            assertThrows(LockBusyException.class, () -> lock.acquire(Duration.ZERO));
            assertEquals(0, LockInfo.of(server, key).waiting());
            assertEquals(held.token(), LockInfo.of(server, key).token());
        }
    }

    @Test
    void tokensAreExactLongs() throws Exception {
        DLock lock = dlock.getLock(key);
        try (Lease lease = lock.acquire(Duration.ZERO)) {
            assertTrue(lease.token() > 0);
            assertEquals(LockInfo.of(server, key).token(), lease.token());
        }
    }

    @Test
    void cancellingAnAsyncAcquireLeavesNoWaiterAndNoHold() throws Exception {
        DLock lock = dlock.getLock(key);
        try (Lease held = lock.acquire(Duration.ZERO)) {
            CompletableFuture<Lease> waiting = lock.acquireAsync(Duration.ofSeconds(30));
            Poll.until("the async waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
            waiting.cancel(true);
            assertThrows(CancellationException.class, waiting::join);
            Poll.until("the waiter to leave", () -> LockInfo.of(server, key).waiting() == 0);
            assertEquals(1, LockInfo.of(server, key).holders().size());
        }
        assertNull(LockInfo.of(server, key));
    }

    @Test
    void aCancelThatRacesAHandOffLeavesNothing() throws Exception {
        DLock lock = dlock.getLock(key);
        // 50 times: Future.cancel(true) as the holder releases (the grant races the cancel).
        for (int round = 0; round < 50; round++) {
            Lease held = lock.acquire(Duration.ZERO);
            CompletableFuture<Lease> waiting = lock.acquireAsync(Duration.ofSeconds(10));
            Poll.until("the waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
            held.close();
            if (!waiting.cancel(true) && !waiting.isCompletedExceptionally()) {
                waiting.join().close();
            }
            int r = round;
            Poll.until("nothing left after round " + r + ": " + LockInfo.of(server, key), Duration.ofSeconds(3),
                    () -> LockInfo.of(server, key) == null);
        }
    }

    @Test
    void anAsyncAcquireCompletesOnTheHandOff() throws Exception {
        DLock lock = dlock.getLock(key);
        Lease held = lock.acquire(Duration.ZERO);
        CompletableFuture<Lease> waiting = lock.acquireAsync(Duration.ofSeconds(30));
        Poll.until("the async waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
        held.close();
        try (Lease next = waiting.get(10, TimeUnit.SECONDS)) {
            assertTrue(next.token() > held.token());
            assertEquals(next.owner(), LockInfo.of(server, key).owner());
        }
    }

    @Test
    void aLeaseGrantedAfterAWaitIsRenewed() throws Exception {
        // 1 s: each renewal has 0.65 s before the local deadline, which a loaded machine's late
        // watchdog thread or I/O does not use up (a 500 ms lease left it 0.3 s).
        DLockClient client = client(DLockConfig.builder().defaultLease(Duration.ofMillis(1000)).build());
        DLock lock = client.getLock(key);
        Lease first = lock.acquire(Duration.ZERO);
        CompletableFuture<Lease> waiting = lock.acquireAsync(Duration.ofSeconds(10));
        Poll.until("the waiter", () -> LockInfo.of(server, key).waiting() == 1);
        Thread.sleep(1100); // longer than a lease: the waiter's own lease starts at the grant
        first.close();
        try (Lease second = waiting.get(5, TimeUnit.SECONDS)) {
            Thread.sleep(1100); // longer than a lease: still held, so renewed
            assertTrue(second.isValid(), "renewed after a wait longer than its lease: " + second);
            assertEquals(second.token(), LockInfo.of(server, key).token());
        }
    }

    @Test
    void concurrentHoldersNeverOverlap() throws Exception {
        DLock lock = dlock.getLock(key);
        AtomicLong inside = new AtomicLong();
        AtomicLong lastToken = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        for (int t = 0; t < 6; t++) {
            Thread thread = new Thread(() -> {
                try {
                    for (int i = 0; i < 15; i++) {
                        lock.lock();
                        try {
                            if (inside.incrementAndGet() != 1) {
                                throw new AssertionError("two holders at once");
                            }
                            long token = lock.getToken();
                            if (token <= lastToken.get()) {
                                throw new AssertionError("token went backwards");
                            }
                            lastToken.set(token);
                            inside.decrementAndGet();
                        } finally {
                            lock.unlock();
                        }
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) {
            thread.join(30_000);
        }
        assertNull(failure.get());
        assertNull(LockInfo.of(server, key));
    }

    // ---- other primitives ---------------------------------------------------------------------

    @Test
    void readersShareAndAWriterExcludes() throws Exception {
        DReadWriteLock rw = dlock.getReadWriteLock(key);
        rw.readLock().lock();
        assertTrue(onOtherThread(() -> {
            boolean got = rw.readLock().tryLock();
            rw.readLock().unlock();
            return got;
        }));
        assertFalse(onOtherThread(() -> rw.writeLock().tryLock()));
        assertEquals(1, LockInfo.of(server, key).shared());
        rw.readLock().unlock();
        assertTrue(onOtherThread(() -> {
            boolean got = rw.writeLock().tryLock();
            rw.writeLock().unlock();
            return got;
        }));
    }

    @Test
    void theOnlyReaderUpgradesAndAWriterDowngrades() throws Exception {
        DReadWriteLock rw = dlock.getReadWriteLock(key);
        rw.readLock().lock();
        assertTrue(rw.writeLock().tryLock(1, TimeUnit.SECONDS), "the only reader upgrades");
        LockInfo info = LockInfo.of(server, key);
        assertEquals(1, info.holds());
        assertEquals(1, info.shared());
        rw.writeLock().unlock();
        assertEquals(1, LockInfo.of(server, key).shared(), "downgraded to the read hold");
        rw.readLock().unlock();
        assertNull(LockInfo.of(server, key));
    }

    @Test
    void aSecondUpgraderGetsDeadlock() throws Exception {
        DReadWriteLock rw = dlock.getReadWriteLock(key);
        CompletableFuture<Void> reading = new CompletableFuture<>();
        CompletableFuture<Void> go = new CompletableFuture<>();
        CompletableFuture<Boolean> upgraded = new CompletableFuture<>();
        Thread first = new Thread(() -> {
            try {
                rw.readLock().lock();
                reading.complete(null);
                go.get(5, TimeUnit.SECONDS);
                boolean got = rw.writeLock().tryLock(10, TimeUnit.SECONDS);
                if (got) {
                    rw.writeLock().unlock();
                }
                rw.readLock().unlock();
                upgraded.complete(got);
            } catch (Throwable e) {
                upgraded.completeExceptionally(e);
            }
        });
        first.start();
        reading.get(5, TimeUnit.SECONDS);
        rw.readLock().lock();
        go.complete(null);
        Poll.until("the first upgrade waiting", () -> LockInfo.of(server, key).waiting() == 1);
        assertThrows(DeadlockException.class, () -> rw.writeLock().tryLock(1, TimeUnit.SECONDS));
        assertFalse(rw.writeLock().isHeldByCurrentThread());
        rw.readLock().unlock();
        assertTrue(upgraded.get(10, TimeUnit.SECONDS), "the first upgrade is granted once the other reader left");
        Poll.until("the lock to be free", () -> LockInfo.of(server, key) == null);
    }

    @Test
    void aSemaphoreGrantsAtMostItsPermits() throws Exception {
        DSemaphore semaphore = dlock.getSemaphore(key, 2);
        Lease a = semaphore.acquire(Duration.ZERO);
        Lease b = semaphore.tryAcquire().orElseThrow();
        assertTrue(semaphore.tryAcquire().isEmpty());
        assertEquals(2, LockInfo.of(server, key).shared());
        assertEquals(2, semaphore.holders());
        CompletableFuture<Lease> third = semaphore.acquireAsync(Duration.ofSeconds(10));
        Poll.until("the third in the queue", () -> LockInfo.of(server, key).waiting() == 1);
        a.close();
        try (Lease c = third.get(5, TimeUnit.SECONDS)) {
            assertNotEquals(a.owner(), c.owner());
            assertEquals(2, LockInfo.of(server, key).shared());
        }
        b.close();
        assertNull(LockInfo.of(server, key));
    }

    @Test
    void aLatchOpensItsAwaiters() throws Exception {
        DCountDownLatch latch = dlock.getCountDownLatch(key);
        assertTrue(latch.trySetCount(2, Duration.ofSeconds(30)));
        assertFalse(latch.trySetCount(5, Duration.ofSeconds(30)));
        assertEquals(2, latch.getCount());
        assertFalse(latch.await(Duration.ofMillis(50)));
        CompletableFuture<Boolean> awaiting = latch.awaitAsync(Duration.ofSeconds(10));
        Poll.until("the awaiter", () -> server.call("DLOCK.INFO", key).toString().contains("waiting, 1"));
        assertEquals(1, latch.countDown());
        assertEquals(0, latch.countDown());
        assertTrue(awaiting.get(5, TimeUnit.SECONDS));
        assertEquals(0, latch.getCount());
        assertTrue(latch.await(Duration.ofSeconds(1)), "an opened latch is gone: await returns at once");
    }

    @Test
    void aLatchThatExpiresBreaksItsAwaiters() throws Exception {
        DCountDownLatch latch = dlock.getCountDownLatch(key);
        // 2 s, and the awaiter seen queued before the latch ends: a latch already gone when the
        // await arrives reads as opened (its awaiters were let go), and a loaded machine took
        // longer than the 150 ms this test used to give it.
        assertTrue(latch.trySetCount(1, Duration.ofSeconds(2)));
        CompletableFuture<Boolean> awaiting = CompletableFuture.supplyAsync(() -> {
            try {
                return latch.await(Duration.ofSeconds(10));
            } catch (InterruptedException e) {
                throw new java.util.concurrent.CompletionException(e);
            }
        });
        Poll.until("the awaiter", () -> server.call("DLOCK.INFO", key).toString().contains("waiting, 1"));
        ExecutionException broken = assertThrows(ExecutionException.class, () -> awaiting.get(10, TimeUnit.SECONDS));
        assertTrue(broken.getCause() instanceof LatchBrokenException, "broken, not " + broken.getCause());
    }

    @Test
    void aMultiLockTakesEveryKeyInOneStep() throws Exception {
        String k1 = "{" + key + "}:a";
        String k2 = "{" + key + "}:b";
        DLock other = dlock.getLock(k2);
        Lease blocker = other.acquire(Duration.ZERO);
        DLock multi = dlock.getMultiLock(k1, k2);
        assertTrue(multi.tryAcquire().isEmpty());
        assertNull(LockInfo.of(server, k1), "all or nothing");
        blocker.close();
        try (Lease both = multi.acquire(Duration.ofSeconds(1))) {
            assertEquals(2, both.tokens().length);
            assertEquals(both.tokens()[0], LockInfo.of(server, k1).token());
            assertEquals(both.tokens()[1], LockInfo.of(server, k2).token());
            assertEquals(both.owner(), LockInfo.of(server, k2).owner());
        }
        assertNull(LockInfo.of(server, k1));
        assertNull(LockInfo.of(server, k2));
        multi.lock();
        assertTrue(multi.isLocked());
        multi.unlock();
        assertNull(LockInfo.of(server, k2));
    }

    // ---- election ---------------------------------------------------------------------------

    private void assumeCommand(String command) {
        org.junit.jupiter.api.Assumptions.assumeTrue(server.hasCommand(command),
                () -> "skipped: this " + kind() + " server's module has no " + command);
    }

    @Test
    void anElectionHandsLeadershipOverAndObserversSeeEveryTerm() throws Exception {
        assumeCommand("DLOCK.WATCH");
        dev.dlock.DElection election = dlock.getElection(key);
        assertTrue(election.leader().isEmpty());
        List<Optional<dev.dlock.Leader>> seen = new java.util.concurrent.CopyOnWriteArrayList<>();
        try (dev.dlock.DElection.Observer observer = election.observe(seen::add)) {
            Poll.until("the first observation", () -> seen.size() == 1);
            assertTrue(seen.get(0).isEmpty());
            Lease first = election.campaign("node-a");
            assertTrue(first.owner().startsWith("node-a#"));
            // R7.6: the campaign id is 32 lowercase hex digits.
            assertTrue(first.owner().substring("node-a#".length()).matches("[0-9a-f]{32}"));
            assertEquals("a#b", dev.dlock.DElection.identityOf("a#b#" + UUID.randomUUID()));
            assertEquals("plain-owner", dev.dlock.DElection.identityOf("plain-owner"));
            assertEquals("x", dev.dlock.DElection.identityOf("x#0123"));
            assertEquals("node-a", election.leader().orElseThrow().identity());
            assertEquals(first.token(), election.leader().orElseThrow().term());
            Poll.until("the observer to see node-a", () -> observer.latest().isPresent()
                    && observer.latest().get().term() == first.token());
            CompletableFuture<Lease> second = dlock.getElection(key)
                    .campaignAsync("node-b", dev.dlock.AcquireOptions.defaults().waitFor(Duration.ofSeconds(10)));
            Poll.until("the second candidate queued", () -> LockInfo.of(server, key).waiting() == 1);
            election.resign(first);
            try (Lease leadership = second.get(5, TimeUnit.SECONDS)) {
                assertTrue(leadership.token() > first.token(), "terms only grow");
                Poll.until("the observer to see node-b", () -> observer.latest().isPresent()
                        && observer.latest().get().identity().equals("node-b"));
            }
            Poll.until("the observer to see nobody", () -> observer.latest().isEmpty());
        }
        Poll.until("the observer's wait to leave the server", () -> {
            Object info = server.call("INFO", "dlock");
            return info.toString().contains("dlock_watchers:0");
        });
    }

    @Test
    void aWaitConnectionDiscardedRightAfterItsSendLeavesNoWaitInTheServer() throws Exception {
        assumeCommand("DLOCK.WATCH");
        // The observer's close() (and every abandoned wait) discards a wait's connection, possibly
        // before the transport has written the command: the command must then never be written
        // (a library that reconnects on write would carry it on a new socket nobody closes), or
        // be written on the socket being closed, which ends it in the server.
        Transport transport = transport(server);
        closeables.add(transport);
        byte[] keyBytes = key.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        for (int i = 0; i < 20; i++) {
            dev.dlock.BlockingConnection connection = transport.openBlocking(keyBytes);
            CompletableFuture<Object> reply = connection.send("DLOCK.WATCH".getBytes(java.nio.charset.StandardCharsets.UTF_8),
                    keyBytes, "0".getBytes(java.nio.charset.StandardCharsets.UTF_8),
                    "30000".getBytes(java.nio.charset.StandardCharsets.UTF_8));
            connection.discard();
            assertThrows(ExecutionException.class, () -> reply.get(5, TimeUnit.SECONDS),
                    "a discarded connection's wait ends (round " + i + ")");
            Poll.until("the discarded wait to leave the server (round " + i + ")", Duration.ofSeconds(5),
                    () -> server.call("INFO", "dlock").toString().contains("dlock_watchers:0"));
        }
    }

    @Test
    void aPublisherOfLeadershipStopsWhenCancelled() throws Exception {
        assumeCommand("DLOCK.WATCH");
        dev.dlock.DElection election = dlock.getElection(key);
        List<Optional<dev.dlock.Leader>> seen = new java.util.concurrent.CopyOnWriteArrayList<>();
        AtomicReference<java.util.concurrent.Flow.Subscription> subscription = new AtomicReference<>();
        election.observations().subscribe(new java.util.concurrent.Flow.Subscriber<>() {
            @Override
            public void onSubscribe(java.util.concurrent.Flow.Subscription s) {
                subscription.set(s);
                s.request(Long.MAX_VALUE);
            }

            @Override
            public void onNext(Optional<dev.dlock.Leader> item) {
                seen.add(item);
            }

            @Override
            public void onError(Throwable throwable) {
            }

            @Override
            public void onComplete() {
            }
        });
        try (Lease leadership = election.campaign("node-x", dev.dlock.AcquireOptions.defaults())) {
            Poll.until("the publisher to deliver node-x", () -> seen.stream()
                    .anyMatch(s -> s.isPresent() && s.get().term() == leadership.token()));
        }
        subscription.get().cancel();
        Poll.until("the observer's wait to leave the server", () -> server.call("INFO", "dlock").toString().contains("dlock_watchers:0"));
    }

    @Test
    void weightedPermitsAddUpToTheLimit() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(
                !String.valueOf(server.call("DLOCK.ACQUIRE", key + ":probe", "p", "10", "SHARED", "LIMIT", "2", "WEIGHT", "1")).startsWith("ERR"),
                () -> "skipped: this " + kind() + " server's module has no WEIGHT");
        server.call("DEL", key + ":probe");
        DSemaphore semaphore = dlock.getSemaphore(key, 5);
        Lease three = semaphore.acquire(3, Duration.ZERO);
        assertTrue(semaphore.tryAcquire(3).isEmpty(), "3 + 3 > 5");
        Lease two = semaphore.tryAcquire(2).orElseThrow();
        assertTrue(semaphore.tryAcquire().isEmpty());
        three.close();
        semaphore.tryAcquire(3).orElseThrow().close();
        two.close();
        assertNull(LockInfo.of(server, key));
    }

    // ---- a stalled server (R4.6, R4.7, R5.3) ---------------------------------------------------

    /**
     * A frozen server (SIGSTOP for 3 s): a wait of 200 ms ends with a timeout by its bound (wait +
     * 2 s), not at the thaw, and its request, run at the thaw, leaves no hold (R5.3); a try
     * without wait that times out on a read leaves no hold either (Jedis: a hold for the whole
     * lease); a renewal by hand ends by the lease's local deadline (1.5 s) with the hold lost; and
     * after the thaw the next call is not delayed by the clean-ups (Lettuce: a release waited on
     * the event loop, 10 s). Run on one server kind (it takes the 3 s of the freeze).
     */
    @Test
    void aFrozenServerBoundsEachCallAndLeavesNoHold() throws Exception {
        Assumptions.assumeTrue(kind() == RedisServer.Kind.REDIS, "one server kind is enough");
        String waited = key + ":waited";
        String tried = key + ":tried";
        Lease renewed = dlock.getLock(key + ":renewed").acquire(Duration.ZERO, Duration.ofMillis(1500));
        java.util.concurrent.ExecutorService threads = java.util.concurrent.Executors.newCachedThreadPool();
        long frozenAt = System.nanoTime();
        server.freeze();
        try {
            threads.submit(() -> {
                Thread.sleep(3000);
                server.thaw();
                return null;
            });
            Future<Outcome> waitCall = threads.submit(() -> timed(() -> dlock.getLock(waited).acquire(Duration.ofMillis(200))));
            Future<Outcome> tryCall = threads.submit(() -> timed(() -> dlock.getLock(tried).tryAcquire()));
            Future<Outcome> renewCall = threads.submit(() -> timed(() -> {
                renewed.renew(Duration.ofMillis(1500));
                return null;
            }));
            Outcome wait = waitCall.get(10, TimeUnit.SECONDS);
            assertEquals("timeout", wait.kind(), "the wait timed out, it did not wait for the thaw: " + wait);
            assertTrue(wait.ms() <= 200 + 2000 + 600, "the wait ended by its bound: " + wait);
            Outcome renewal = renewCall.get(10, TimeUnit.SECONDS);
            assertTrue(renewal.kind().equals("lost") || renewal.kind().equals("timeout"),
                    "the renewal failed, it did not wait for the thaw: " + renewal);
            assertTrue(renewal.ms() <= 1500 + 500, "the renewal ended by the lease's local deadline: " + renewal);
            Poll.until("the renewed hold lost by its deadline", Duration.ofSeconds(1), () -> !renewed.isValid());
            Outcome tryOutcome = tryCall.get(15, TimeUnit.SECONDS);
            assertTrue(tryOutcome.kind().equals("returned") || tryOutcome.kind().equals("timeout"), tryOutcome.toString());
        } finally {
            long frozenMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - frozenAt);
            if (frozenMs < 3000) {
                Thread.sleep(3000 - frozenMs);
            }
            server.thaw();
            threads.shutdown();
        }
        Poll.until("the server answers", Duration.ofSeconds(10), () -> "PONG".equals(String.valueOf(server.call("PING"))));
        long start = System.nanoTime();
        try (Lease next = dlock.getLock(key + ":next").acquire(Duration.ofSeconds(1))) {
            assertTrue(next.isValid());
        }
        long nextMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        assertTrue(nextMs < 1000, "the next call is not delayed by the clean-ups: " + nextMs + " ms");
        Poll.until("no hold left by the timed-out wait: " + LockInfo.of(server, waited), Duration.ofSeconds(3),
                () -> LockInfo.of(server, waited) == null);
        Poll.until("no hold left by the timed-out try: " + LockInfo.of(server, tried), Duration.ofSeconds(3),
                () -> LockInfo.of(server, tried) == null);
        // And none appears later (a request buffered in the server that runs after a release).
        Thread.sleep(300);
        assertNull(LockInfo.of(server, waited));
        assertNull(LockInfo.of(server, tried));
    }

    /** How a call ended: "returned", "timeout", "lost" or "connection", after {@code ms}. */
    private record Outcome(String kind, long ms) {}

    /** Runs a call that returns a lease, an optional one or nothing, and closes what it got. */
    private static Outcome timed(java.util.concurrent.Callable<Object> call) throws Exception {
        long start = System.nanoTime();
        String kind = "returned";
        try {
            Object got = call.call();
            if (got instanceof Lease) {
                ((Lease) got).close();
            } else if (got instanceof Optional) {
                ((Optional<?>) got).ifPresent(lease -> ((Lease) lease).close());
            }
        } catch (dev.dlock.DLockTimeoutException e) {
            kind = "timeout";
        } catch (LockLostException e) {
            kind = "lost";
        } catch (dev.dlock.DLockConnectionException e) {
            kind = "connection";
        }
        return new Outcome(kind, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
    }

    /** R8: a thread that polls a fair lock keeps its place (one owner for all its tries). */
    @Test
    void aFairPollerKeepsItsPlace() throws Exception {
        Lease held = dlock.getLock(key).acquire(Duration.ZERO);
        DLock fair = dlock.getFairLock(key);
        // The second poller: one thread, polling as a loop would.
        java.util.concurrent.ExecutorService second = java.util.concurrent.Executors.newSingleThreadExecutor();
        java.util.concurrent.Callable<Boolean> secondTry = () -> {
            DLock mine = dlock.getFairLock(key);
            if (mine.tryLock()) {
                mine.unlock();
                return true;
            }
            return false;
        };
        try {
            assertFalse(fair.tryLock());
            assertTrue(dlock.getFairLock(key).tryAcquire().isEmpty(), "another DLock object, the handle API");
            assertEquals(1, LockInfo.of(server, key).waiting(), "one reservation, not one per try");
            assertFalse(second.submit(secondTry).get(10, TimeUnit.SECONDS), "another poller");
            assertEquals(2, LockInfo.of(server, key).waiting());
            held.close();
            assertFalse(second.submit(secondTry).get(10, TimeUnit.SECONDS), "the second poller waits its turn");
            assertTrue(fair.tryLock(), "the first poller, back under its owner, is first");
            fair.unlock();
            assertTrue(second.submit(secondTry).get(10, TimeUnit.SECONDS), "then the second poller's turn");
        } finally {
            second.shutdown();
        }
        assertNull(LockInfo.of(server, key));
    }

    /**
     * R4.4, 250 times: lockInterruptibly() interrupted as the holder releases (the grant races the
     * interrupt) throws InterruptedException and leaves no hold and no waiter.
     */
    @Test
    void anInterruptThatRacesAHandOffThrowsAndLeavesNothing() throws Exception {
        Assumptions.assumeTrue(kind() == RedisServer.Kind.REDIS, "one server kind is enough");
        DLock lock = dlock.getLock(key);
        DLock holder = dlock.getLock(key);
        for (int round = 0; round < 250; round++) {
            Lease held = holder.acquire(Duration.ZERO);
            AtomicReference<Object> outcome = new AtomicReference<>();
            Thread waiter = new Thread(() -> {
                try {
                    lock.lockInterruptibly();
                    outcome.set("returned normally, holding the lock (interrupted: " + Thread.currentThread().isInterrupted() + ")");
                    lock.unlock();
                } catch (Throwable e) {
                    outcome.set(e);
                }
            });
            waiter.start();
            Poll.until("the waiter in the queue", () -> LockInfo.of(server, key).waiting() == 1);
            waiter.interrupt();
            held.close();
            waiter.join(10_000);
            int r = round;
            assertTrue(outcome.get() instanceof InterruptedException, "round " + r + ": " + outcome.get());
            Poll.until("nothing left after round " + r, Duration.ofSeconds(3), () -> LockInfo.of(server, key) == null,
                    () -> String.valueOf(LockInfo.of(server, key)));
        }
    }

    /**
     * 50 times: a timed tryLock whose wait ends as the holder releases either holds the lock
     * (and it is its) or returns false leaving nothing behind.
     */
    @Test
    void aTimedTryLockThatRacesAHandOffIsAllOrNothing() throws Exception {
        Assumptions.assumeTrue(kind() == RedisServer.Kind.REDIS, "one server kind is enough");
        DLock lock = dlock.getLock(key);
        DLock holder = dlock.getLock(key);
        int got = 0;
        for (int round = 0; round < 50; round++) {
            Lease held = holder.acquire(Duration.ZERO);
            CompletableFuture<Object> outcome = new CompletableFuture<>();
            Thread waiter = new Thread(() -> {
                try {
                    if (lock.tryLock(20, TimeUnit.MILLISECONDS)) {
                        LockInfo info = LockInfo.of(server, key);
                        outcome.complete(info != null && info.token() == lock.getToken() ? "held" : "granted but not held: " + info);
                        lock.unlock();
                    } else {
                        outcome.complete("refused");
                    }
                } catch (Throwable e) {
                    outcome.complete(e);
                }
            });
            waiter.start();
            Thread.sleep(15 + round % 10); // around the wait's end: a race, not a synchronisation
            held.close();
            Object result = outcome.get(10, TimeUnit.SECONDS);
            int r = round;
            assertTrue(result.equals("held") || result.equals("refused"), "round " + r + ": " + result);
            got += result.equals("held") ? 1 : 0;
            Poll.until("nothing left after round " + r, Duration.ofSeconds(3), () -> LockInfo.of(server, key) == null,
                    () -> String.valueOf(LockInfo.of(server, key)));
        }
        System.out.println("timed tryLock against a hand-off: granted " + got + " of 50");
    }

    @Test
    void aFairTryLeavesAReservation() throws Exception {
        DLock fair = dlock.getFairLock(key);
        Lease held = dlock.getLock(key).acquire(Duration.ZERO);
        Optional<Lease> none = fair.tryAcquire();
        assertTrue(none.isEmpty());
        assertEquals(1, LockInfo.of(server, key).waiting(), "DLOCK.FAIR keeps a place in the queue");
        held.close();
    }
}
