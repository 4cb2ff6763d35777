package dev.dlock.jedis;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.DLockConfig;
import dev.dlock.Lease;
import dev.dlock.testkit.ClusterStall;
import dev.dlock.testkit.LockInfo;
import dev.dlock.testkit.Poll;
import dev.dlock.testkit.RedisClusterServers;
import dev.dlock.testkit.RedisServer;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** The Jedis cluster transport on a three-master Redis Cluster, of redis-server and of Valkey. */
@SuppressWarnings("deprecation")
class JedisClusterTest {
    @ParameterizedTest
    @EnumSource(RedisServer.Kind.class)
    void locksAreRoutedToTheirSlotsRenewedAndCancelled(RedisServer.Kind kind) throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(RedisServer.binary(kind) != null, "no " + kind + " binary");
        try (RedisClusterServers cluster = RedisClusterServers.start(kind);
                DLockClient dlock = new DLockClient(JedisClusterTransport.create(
                        Set.of(new HostAndPort("127.0.0.1", cluster.nodes().get(0).port()))),
                        DLockConfig.builder().defaultLease(Duration.ofMillis(1200)).build())) {
            // The first command connects to the cluster (topology, node connections), which a lease
            // taken in it would count against itself: connect first.
            for (int i = 0; i < 12; i++) {
                assertNull(dlock.getLock("cluster:" + i).tryAcquire().map(lease -> {
                    lease.close();
                    return (Object) null;
                }).orElse(null));
            }
            // Keys spread over the three masters, each held where its slot lives.
            List<Lease> leases = new ArrayList<>();
            Set<Integer> ports = new HashSet<>();
            for (int i = 0; i < 12; i++) {
                String key = "cluster:" + i;
                Lease lease = dlock.getLock(key).acquire(Duration.ZERO);
                leases.add(lease);
                RedisServer node = cluster.nodeFor(key);
                ports.add(node.port());
                assertEquals(lease.owner(), LockInfo.of(node, key).owner());
            }
            assertEquals(3, ports.size(), "the keys live on every master");
            // The watchdog renews them all past a lease (still held after it: renewed). 1.2 s: each
            // round of renewals has 0.8 s before the local deadline, which a loaded machine's late
            // watchdog thread or I/O does not use up (a 400 ms lease left it 0.25 s).
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1300);
            while (System.nanoTime() < end) {
                Thread.sleep(50);
            }
            for (Lease lease : leases) {
                assertTrue(lease.isValid(), "renewed on its node: " + lease);
                assertEquals(lease.token(), LockInfo.of(cluster.nodeFor(lease.key()), lease.key()).token());
                lease.close();
                assertNull(LockInfo.of(cluster.nodeFor(lease.key()), lease.key()));
            }

            // A wait blocks on the key's node and is ended there by CLIENT UNBLOCK.
            String key = "cluster:wait";
            RedisServer node = cluster.nodeFor(key);
            DLock lock = dlock.getLock(key);
            try (Lease held = lock.acquire(Duration.ZERO)) {
                CompletableFuture<Lease> waiting = lock.acquireAsync(Duration.ofSeconds(30));
                Poll.until("the waiter on its node", () -> LockInfo.of(node, key).waiting() == 1);
                waiting.cancel(true);
                assertThrows(CancellationException.class, waiting::join);
                Poll.until("the waiter to leave", () -> LockInfo.of(node, key).waiting() == 0);
                CompletableFuture<Lease> next = lock.acquireAsync(Duration.ofSeconds(10));
                Poll.until("the second waiter", () -> LockInfo.of(node, key).waiting() == 1);
                held.close();
                try (Lease handed = next.get(5, TimeUnit.SECONDS)) {
                    assertEquals(handed.owner(), LockInfo.of(node, key).owner());
                }
            }

            // A multi-lock's keys share a slot through a hash tag.
            try (Lease both = dlock.getMultiLock("{order:7}:a", "{order:7}:b").acquire(Duration.ofSeconds(1))) {
                RedisServer tagged = cluster.nodeFor("{order:7}:a");
                assertEquals(both.tokens()[1], LockInfo.of(tagged, "{order:7}:b").token());
            }

            // R4.6, R4.7: a frozen node (on one server kind: it takes the freeze's 10 s).
            // The application's JedisCluster has socket timeouts longer than the calls' bounds
            // (15 s): the transport bounds each call, and each connection it opens, itself.
            if (kind == RedisServer.Kind.REDIS) {
                try (JedisCluster application = new JedisCluster(
                        Set.of(new HostAndPort("127.0.0.1", cluster.nodes().get(0).port())), 15_000)) {
                    ClusterStall.frozenNodeBoundsEachCall(cluster, () -> JedisClusterTransport.create(application));
                }
            }
        }
    }
}
