package dev.dlock.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DLockClient;
import dev.dlock.DLockConfig;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockTimeoutException;
import dev.dlock.Lease;
import dev.dlock.LockLostException;
import dev.dlock.Transport;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * R4.6 and R4.7 in a Redis Cluster: the node that owns a key is frozen (SIGSTOP: the kernel still
 * accepts connections and buffers requests, nothing answers) while the client calls it. Each
 * call ends by its own bound with a timeout (or lost), opening a connection included (a wait's
 * connection of its own is opened during the freeze); a call to another node is not held up by
 * them; after the thaw the next call is not delayed, no waiter is left, and no hold of an owner
 * the client never returned remains.
 */
public final class ClusterStall {
    private ClusterStall() {}

    /** How a call ended ("returned", "timeout", "lost", "connection") and after how long. */
    public record Outcome(String kind, long ms, String detail) {}

    /** Slack over a bound for a loaded machine (the bound itself is the spec's). */
    private static final long SLACK_MS = 700;

    /**
     * @param cluster a running cluster (its nodes are frozen one at a time, then thawed)
     * @param transports makes a transport to the cluster (a fresh client is built on it)
     */
    public static void frozenNodeBoundsEachCall(RedisClusterServers cluster, Supplier<Transport> transports)
            throws Exception {
        // All the keys of the frozen node share a slot; "other" lives on another node.
        String tag = "{stall}";
        RedisServer node = cluster.nodeFor(tag + ":x");
        String other = null;
        for (int i = 0; other == null; i++) {
            if (cluster.nodeFor("stall-other:" + i).port() != node.port()) {
                other = "stall-other:" + i;
            }
        }
        String waited = tag + ":waited";
        String fair = tag + ":fair";
        String tried = tag + ":tried";
        String stranger = "stranger";
        for (String held : List.of(waited, fair)) {
            assertNotNull(node.call("DLOCK.ACQUIRE", held, stranger, "60000"));
        }
        ExecutorService threads = Executors.newCachedThreadPool();
        try (DLockClient dlock = new DLockClient(transports.get(), DLockConfig.defaults())) {
            // Connected to every node (topology, shared connections), no wait connection yet.
            for (int i = 0; i < 12; i++) {
                dlock.getLock("stall-warm:" + i).tryAcquire().ifPresent(Lease::close);
            }
            dlock.getLock(tag + ":warm").tryAcquire().ifPresent(Lease::close);
            Lease renewed = dlock.getLock(tag + ":renewed").acquire(Duration.ZERO, Duration.ofMillis(1500));
            Lease released = dlock.getLock(tag + ":released").acquire(Duration.ZERO, Duration.ofSeconds(20));

            long frozenAt = System.nanoTime();
            node.freeze();
            List<Outcome> outcomes;
            Outcome elsewhere;
            List<Future<Outcome>> calls;
            List<String> heldEventLoops;
            try {
                Future<Outcome> waitCall = threads.submit(() -> timed(() -> dlock.getLock(waited).acquire(Duration.ofSeconds(1))));
                Future<Outcome> fairCall = threads.submit(() -> timed(() -> dlock.getFairLock(fair).acquire(Duration.ofSeconds(1))));
                Future<Outcome> tryCall = threads.submit(() -> timed(() -> dlock.getLock(tried).tryAcquire()));
                Future<Outcome> renewCall = threads.submit(() -> timed(() -> {
                    renewed.renew(Duration.ofMillis(1500));
                    return null;
                }));
                Future<Outcome> releaseCall = threads.submit(() -> timed(() -> {
                    released.close();
                    return null;
                }));
                // Once the waits are (or should be) past their bound, and their clean-ups run, a
                // call to another node is not held up by any of it.
                Thread.sleep(3500);
                heldEventLoops = eventLoopsWaitingInDlock();
                String otherKey = other;
                elsewhere = outcome(threads.submit(() -> timed(() -> dlock.getLock(otherKey).acquire(Duration.ofSeconds(1)))),
                        System.nanoTime() + TimeUnit.SECONDS.toNanos(12));
                // Every bound has passed 12 s after the freeze: a call still running is held up.
                long end = frozenAt + TimeUnit.SECONDS.toNanos(12);
                outcomes = new ArrayList<>();
                calls = List.of(waitCall, fairCall, tryCall, renewCall, releaseCall);
                for (Future<Outcome> call : calls) {
                    outcomes.add(outcome(call, end));
                }
            } finally {
                node.thaw();
            }
            long frozenMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - frozenAt);
            String all = "frozen " + frozenMs + " ms; wait, fair wait, try, renew, release: " + outcomes
                    + "; another node's call: " + elsewhere;
            if (outcomes.stream().anyMatch(o -> o.ms() < 0)) {
                // How long the calls held up past the thaw took in the end (for the message).
                List<Outcome> later = new ArrayList<>();
                for (Future<Outcome> call : calls) {
                    later.add(outcome(call, System.nanoTime() + TimeUnit.SECONDS.toNanos(30)));
                }
                all += "; after the thaw: " + later;
            }
            // A wait of 1 s: wait + margin (2 s). A try and a release: the reply timeout (10 s).
            // A renewal by hand: the hold's local deadline (1.5 s), then lost.
            assertBound(outcomes.get(0), "timeout", 1000 + 2000, all);
            assertBound(outcomes.get(1), "timeout", 1000 + 2000, all);
            assertBound(outcomes.get(2), "timeout", 10_000, all);
            assertTrue(outcomes.get(3).kind().equals("lost") || outcomes.get(3).kind().equals("timeout"), all);
            assertTrue(outcomes.get(3).ms() <= 1500 + SLACK_MS, all);
            assertBound(outcomes.get(4), "timeout", 10_000, all);
            assertTrue(heldEventLoops.isEmpty(), "no I/O thread of the library waits in dlock's code: " + heldEventLoops);
            assertEquals("returned", elsewhere.kind(), all);
            // Granted (a free lock), not timed out: nothing held it up; within its bound besides.
            assertTrue(elsewhere.ms() <= 1000 + 2000 + SLACK_MS, "a call to another node is not held up: " + all);

            // After the thaw: the node answers, the next call there is not delayed, nothing stays
            // queued, and the holds left are the stranger's (and the hold whose release timed out,
            // which the caller has).
            Poll.until("the node answers", Duration.ofSeconds(10), () -> "PONG".equals(String.valueOf(node.call("PING"))));
            Poll.until("the cluster to be ok again", Duration.ofSeconds(20), () -> {
                for (RedisServer n : cluster.nodes()) {
                    if (!String.valueOf(n.call("CLUSTER", "INFO")).contains("cluster_state:ok")) {
                        return false;
                    }
                }
                return true;
            });
            Outcome next = timed(() -> dlock.getLock(tag + ":next").acquire(Duration.ofSeconds(1)));
            assertEquals("returned", next.kind(), "the next call after the thaw: " + next + "; " + all);
            assertTrue(next.ms() <= 1000 + 2000 + SLACK_MS, "the next call is not delayed by the clean-ups: " + next + "; " + all);
            for (String held : List.of(waited, fair)) {
                Poll.until("only the stranger on " + held + ", no waiter", Duration.ofSeconds(5), () -> {
                    LockInfo info = LockInfo.of(node, held);
                    return info != null && stranger.equals(info.owner()) && info.holds() == 1 && info.waiting() == 0;
                }, () -> String.valueOf(LockInfo.of(node, held)));
            }
            Poll.until("no hold left by the timed-out try", Duration.ofSeconds(5), () -> LockInfo.of(node, tried) == null,
                    () -> String.valueOf(LockInfo.of(node, tried)));
            // And none appears later (a request buffered in the node that runs after a release).
            Thread.sleep(300);
            assertNull(LockInfo.of(node, tried));
            for (String held : List.of(waited, fair)) {
                LockInfo info = LockInfo.of(node, held);
                assertTrue(stranger.equals(info.owner()) && info.waiting() == 0, held + ": " + info);
            }
            System.out.println("ClusterStall: " + all + "; the next call after the thaw: " + next
                    + "; settled " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - frozenAt - TimeUnit.MILLISECONDS.toNanos(frozenMs)) + " ms after the thaw");
        } finally {
            threads.shutdownNow();
            for (String key : List.of(waited, fair, tried, tag + ":renewed", tag + ":released")) {
                node.call("DEL", key);
            }
        }
    }

    /** The library's I/O threads (Netty's event loops) that wait somewhere in dlock's code. */
    private static List<String> eventLoopsWaitingInDlock() {
        List<String> held = new ArrayList<>();
        for (var entry : Thread.getAllStackTraces().entrySet()) {
            Thread thread = entry.getKey();
            Thread.State state = thread.getState();
            if (!thread.getName().contains("EventLoop")
                    || (state != Thread.State.WAITING && state != Thread.State.TIMED_WAITING && state != Thread.State.BLOCKED)) {
                continue;
            }
            for (StackTraceElement frame : entry.getValue()) {
                if (frame.getClassName().startsWith("dev.dlock.")) {
                    held.add(thread.getName() + " at " + frame);
                    break;
                }
            }
        }
        return held;
    }

    /** The call's outcome, or "still running" if it has not returned by {@code end}. */
    private static Outcome outcome(Future<Outcome> call, long end) throws Exception {
        try {
            return call.get(Math.max(0, end - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            return new Outcome("still running", -1, "");
        }
    }

    private static void assertBound(Outcome outcome, String kind, long boundMs, String all) {
        assertEquals(kind, outcome.kind(), all);
        assertTrue(outcome.ms() <= boundMs + SLACK_MS, "within " + boundMs + " ms: " + all);
    }

    /** Runs a call that returns a lease, an optional one or nothing, and closes what it got. */
    private static Outcome timed(Callable<Object> call) throws Exception {
        long start = System.nanoTime();
        String kind = "returned";
        String detail = "";
        try {
            Object got = call.call();
            if (got instanceof Lease) {
                ((Lease) got).close();
            } else if (got instanceof Optional) {
                ((Optional<?>) got).ifPresent(lease -> ((Lease) lease).close());
            }
        } catch (DLockTimeoutException e) {
            kind = "timeout";
            detail = e.getMessage();
        } catch (LockLostException e) {
            kind = "lost";
        } catch (DLockConnectionException e) {
            kind = "connection";
            detail = e.getMessage();
        }
        return new Outcome(kind, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start), detail);
    }
}
