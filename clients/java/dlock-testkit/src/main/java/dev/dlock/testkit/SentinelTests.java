package dev.dlock.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DLockClient;
import dev.dlock.DLockConfig;
import dev.dlock.DLockConnectionException;
import dev.dlock.Lease;
import dev.dlock.LostReason;
import dev.dlock.Transport;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A transport through Redis Sentinel (a master and a replica with the module, one Sentinel), with
 * a failover: a transport module subclasses this once per server kind and says how to build its
 * transport from the Sentinel. Each test starts servers of its own and stops them.
 *
 * <p>What must happen in a failover (docs/operations.md, "Failover"): the promoted replica has
 * every hold it received, with the same owner, token and deadline, and its owner keeps renewing
 * it there; a hold whose lease ends before a master can answer again is lost, reported before
 * its lease ends; new acquires and new waits go to the new master.
 */
public abstract class SentinelTests {
    /** Every connection of the transport under test carries this name ({@code CLIENT SETNAME}). */
    protected static final String CLIENT_NAME = "dlock-sentinel-test";

    /** Closed after each test, last added first (transports, pools, clients). */
    protected final Deque<AutoCloseable> closeables = new ArrayDeque<>();
    private RedisSentinelServers servers;
    private String prefix;

    /** @return which server this class runs against */
    protected abstract RedisServer.Kind kind();

    /**
     * @param servers the master, replica and Sentinel
     * @return a new transport that finds the master through {@link RedisSentinelServers#sentinel()}
     *     (master name {@link RedisSentinelServers#MASTER_NAME}), whose connections to data
     *     servers are named {@link #CLIENT_NAME}; anything else to close goes to {@link #closeables}
     */
    protected abstract Transport transport(RedisSentinelServers servers);

    @BeforeEach
    void startServers() {
        Assumptions.assumeTrue(RedisServer.binary(kind()) != null, "no " + kind() + " binary");
        servers = RedisSentinelServers.start(kind());
        prefix = "sentinel:" + UUID.randomUUID() + ":";
    }

    @AfterEach
    void stopServers() throws Exception {
        AutoCloseable closeable;
        while ((closeable = closeables.pollFirst()) != null) {
            closeable.close();
        }
        if (servers != null) {
            servers.close();
        }
    }

    private DLockClient client(Duration lease) {
        DLockClient client = new DLockClient(transport(servers), DLockConfig.builder().defaultLease(lease).build());
        closeables.addFirst(client);
        // The transport must hear the Sentinel's +switch-master before the failover.
        Poll.until("the transport to subscribe to the Sentinel", () -> servers.sentinelClients(" sub=1 ") >= 1);
        return client;
    }

    private static long namedClients(RedisServer server) {
        return String.valueOf(server.call("CLIENT", "LIST")).lines()
                .filter(line -> line.contains(" name=" + CLIENT_NAME + " ")).count();
    }

    /** Acquires with a wait on a held lock: the waiter must queue on {@code master}, then get it. */
    private static void waitIsServedBy(DLockClient dlock, RedisServer master, String key) throws Exception {
        Lease held = dlock.getLock(key).acquire(Duration.ZERO);
        CompletableFuture<Lease> waiting = dlock.getLock(key).acquireAsync(Duration.ofSeconds(10));
        Poll.until("the waiter queued on port " + master.port(), () -> {
            LockInfo info = LockInfo.of(master, key);
            return info != null && info.waiting() == 1;
        }, () -> "info " + LockInfo.of(master, key) + ", the wait " + waiting);
        held.close();
        try (Lease handed = waiting.get(5, TimeUnit.SECONDS)) {
            assertEquals(handed.owner(), LockInfo.of(master, key).owner());
        }
        assertNull(LockInfo.of(master, key));
    }

    /**
     * {@code SENTINEL FAILOVER}: new locks and waits reach the new master, no connection (and no
     * wait) stays on the old one, and a replicated lease is renewed at the new master.
     *
     * @throws Exception on failure
     */
    @Test
    protected void aSentinelFailoverMovesNewLocksAndWaitsToTheNewMasterAndAReplicatedLeaseIsRenewedThere() throws Exception {
        RedisServer oldMaster = servers.master();
        RedisServer newMaster = servers.replica();
        // Renewed every 1.5 s: the promoted replica keeps the grant (or the last renewal it received)
        // for 3 s at least, longer than the Sentinel takes to switch.
        DLockClient dlock = client(Duration.ofMillis(4500));

        // Through the Sentinel to the master: acquire, release, and a wait (which leaves an idle
        // blocking connection to the old master behind, in a transport that pools them).
        try (Lease lease = dlock.getLock(prefix + "first").acquire(Duration.ZERO)) {
            assertEquals(lease.owner(), LockInfo.of(oldMaster, prefix + "first").owner());
        }
        assertNull(LockInfo.of(oldMaster, prefix + "first"));
        waitIsServedBy(dlock, oldMaster, prefix + "wait");

        // A renewed lease whose grant reached the replica.
        String kept = prefix + "kept";
        Lease lease = dlock.getLock(kept).acquire(Duration.ZERO);
        Poll.until("the grant on the replica", () -> {
            LockInfo info = LockInfo.of(newMaster, kept);
            return info != null && lease.owner().equals(info.owner()) && info.token() == lease.token();
        });

        // A wait blocked on the old master across the failover: the old master, still a master
        // until the Sentinel demotes it, must not be left to grant it.
        String stale = prefix + "stale";
        Lease staleHolder = dlock.getLock(stale).acquire(Duration.ZERO);
        CompletableFuture<Lease> staleWait = dlock.getLock(stale).acquireAsync(Duration.ofSeconds(30));
        Poll.until("the waiter on the old master", () -> LockInfo.of(oldMaster, stale).waiting() == 1);

        assertTrue(namedClients(oldMaster) > 0, "the transport's connections carry their name");
        servers.failover();
        // The transport drops every connection to the old master (which stays a master until the
        // Sentinel demotes it, seconds later): none may carry a new command there.
        Poll.until("the transport to leave the old master", () -> namedClients(oldMaster) == 0,
                () -> namedClients(oldMaster) + " connections left");
        ExecutionException ended = assertThrows(ExecutionException.class, () -> staleWait.get(10, TimeUnit.SECONDS));
        Throwable cause = ended.getCause() instanceof CompletionException ? ended.getCause().getCause() : ended.getCause();
        assertInstanceOf(DLockConnectionException.class, cause, "the wait on the old master ends with a connection error");
        LockInfo staleInfo = LockInfo.of(oldMaster, stale);
        assertTrue(staleInfo == null || staleInfo.waiting() == 0, "no waiter left on the old master: " + staleInfo);
        staleHolder.close();

        // New locks and new waits go to the new master.
        try (Lease moved = dlock.getLock(prefix + "after").acquire(Duration.ZERO)) {
            assertEquals(moved.owner(), LockInfo.of(newMaster, prefix + "after").owner());
            assertNull(LockInfo.of(oldMaster, prefix + "after"));
        }
        waitIsServedBy(dlock, newMaster, prefix + "wait-after");
        assertEquals(0, namedClients(oldMaster), "nothing went back to the old master");

        // The replicated hold carries on at the new master, renewed there: same owner and token,
        // and a deadline that moves forward (without a renewal its pttl only goes down).
        long deadline = System.currentTimeMillis() + LockInfo.of(newMaster, kept).pttl();
        Poll.until("a renewal at the new master", () -> {
            long now = System.currentTimeMillis();
            LockInfo info = LockInfo.of(newMaster, kept);
            return info != null && now + info.pttl() > deadline + 200;
        }, () -> "lease " + lease + " lost " + lease.lost() + " info " + LockInfo.of(newMaster, kept));
        LockInfo info = LockInfo.of(newMaster, kept);
        assertEquals(lease.owner(), info.owner());
        assertEquals(lease.token(), info.token());
        assertTrue(lease.isValid(), "a replicated lease survives the failover");
        assertFalse(lease.lost().toCompletableFuture().isDone());
        lease.close();
        assertNull(LockInfo.of(newMaster, kept));
    }

    /**
     * A killed master: a lease that no master can renew in time is reported lost within it, then
     * the promoted replica grants the lock with a larger token.
     *
     * @throws Exception on failure
     */
    @Test
    protected void aKilledMasterIsReplacedAndALeaseThatCannotBeRenewedInTimeIsLostWithinIt() throws Exception {
        RedisServer oldMaster = servers.master();
        RedisServer newMaster = servers.replica();
        // Shorter than the fastest failover (the Sentinel waits down-after-milliseconds), so no
        // master can renew this lease before it ends.
        long leaseMs = 3000;
        assertTrue(leaseMs < RedisSentinelServers.DOWN_AFTER_MS);
        DLockClient dlock = client(Duration.ofMillis(leaseMs));
        dlock.getLock(prefix + "warm-up").tryAcquire().ifPresent(Lease::close);

        String key = prefix + "lost";
        Lease lease = dlock.getLock(key).acquire(Duration.ZERO);
        oldMaster.kill();
        // The last grant or renewal that succeeded was sent before the master died, so before
        // kill() returned: its local deadline (R3.2) is at or before this instant plus the lease
        // minus the margin, which is before the lease ends in the server. A look from then on
        // finds the lease lost, however long the machine keeps the watchdog's thread off the CPU
        // while the transport tries to reconnect.
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(leaseMs) - LockContractTests.margin(leaseMs);
        LockContractTests.sleepUntil(deadline);
        assertFalse(lease.isValid(), "valid past its local deadline with the master gone");
        assertEquals(LostReason.DEADLINE, lease.lost().toCompletableFuture().getNow(null));

        servers.awaitPromotion();
        // The transport hears of the new master a moment after the Sentinel names it (a pool
        // listening to +switch-master); until then a command fails with a connection error (the
        // old master is dead) and is not re-sent.
        Poll.until("a command to reach the new master", () -> {
            try {
                dlock.getLock(prefix + "probe").tryAcquire().ifPresent(Lease::close);
                return true;
            } catch (DLockConnectionException e) {
                return false;
            }
        });
        // The same lock, at the new master, with a larger token; and a wait there.
        try (Lease next = dlock.getLock(key).acquire(Duration.ofSeconds(5))) {
            LockInfo info = LockInfo.of(newMaster, key);
            assertEquals(next.owner(), info.owner());
            assertTrue(next.token() > lease.token(), "tokens keep increasing across the failover");
        }
        waitIsServedBy(dlock, newMaster, prefix + "wait-after");
    }
}
