package dev.dlock.testkit;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * A master and a replica (each with the module) watched by one Sentinel, on free ports of
 * 127.0.0.1; {@link #close()} stops all three. The Sentinel runs with quorum 1 and short timers
 * ({@link #DOWN_AFTER_MS}), so that a killed master is replaced within a few seconds.
 */
public final class RedisSentinelServers implements AutoCloseable {
    /** The master's name in the Sentinel ({@code sentinel monitor <name> ...}). */
    public static final String MASTER_NAME = "m";

    /**
     * The Sentinel's {@code down-after-milliseconds}: a killed master is replaced no sooner than
     * this after its last answer to the Sentinel.
     */
    public static final int DOWN_AFTER_MS = 3500;

    private final List<RedisServer> data = new ArrayList<>();
    private RedisServer sentinel;

    private RedisSentinelServers() {}

    /**
     * Starts the master, then the replica, and once the replica is in sync, the Sentinel; returns
     * when the Sentinel knows the replica (a failover can then promote it).
     *
     * @param kind which server binary (for the Sentinel too)
     * @return the three running servers
     */
    public static RedisSentinelServers start(RedisServer.Kind kind) {
        RedisSentinelServers servers = new RedisSentinelServers();
        try {
            // No delay before a diskless full sync (5 s by default), on both: the replica is master later.
            RedisServer master = RedisServer.start(kind, "--repl-diskless-sync-delay", "0");
            servers.data.add(master);
            RedisServer replica = RedisServer.start(kind, "--repl-diskless-sync-delay", "0",
                    "--replicaof", "127.0.0.1", Integer.toString(master.port()));
            servers.data.add(replica);
            Poll.until("the replica in sync", Duration.ofSeconds(20),
                    () -> info(replica, "replication").contains("master_link_status:up")
                            && info(master, "replication").contains("connected_slaves:1"));
            servers.sentinel = RedisServer.startSentinel(kind, List.of(
                    "sentinel monitor " + MASTER_NAME + " 127.0.0.1 " + master.port() + " 1",
                    "sentinel down-after-milliseconds " + MASTER_NAME + " " + DOWN_AFTER_MS,
                    "sentinel failover-timeout " + MASTER_NAME + " 5000"));
            Poll.until("the Sentinel to know the replica", Duration.ofSeconds(20), () -> {
                Object replicas = servers.sentinel.call("SENTINEL", "REPLICAS", MASTER_NAME);
                if (!(replicas instanceof List) || ((List<?>) replicas).size() != 1) {
                    return false;
                }
                List<?> fields = (List<?>) ((List<?>) replicas).get(0);
                return "slave".equals(field(fields, "flags")) && "ok".equals(field(fields, "master-link-status"));
            });
            return servers;
        } catch (RuntimeException | Error e) {
            servers.close();
            throw e;
        }
    }

    private static String info(RedisServer server, String section) {
        return String.valueOf(server.call("INFO", section));
    }

    private static String field(List<?> fields, String name) {
        for (int i = 0; i + 1 < fields.size(); i += 2) {
            if (name.equals(String.valueOf(fields.get(i)))) {
                return String.valueOf(fields.get(i + 1));
            }
        }
        return null;
    }

    /** @return the first master (the one the Sentinel was told to monitor) */
    public RedisServer master() {
        return data.get(0);
    }

    /** @return the replica (the only candidate for promotion) */
    public RedisServer replica() {
        return data.get(1);
    }

    /** @return the Sentinel */
    public RedisServer sentinel() {
        return sentinel;
    }

    /** @return the port of the master the Sentinel names now ({@code SENTINEL GET-MASTER-ADDR-BY-NAME}) */
    public int masterPortNow() {
        Object reply = sentinel.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME);
        if (!(reply instanceof List) || ((List<?>) reply).size() != 2) {
            throw new IllegalStateException("SENTINEL GET-MASTER-ADDR-BY-NAME: " + reply);
        }
        return Integer.parseInt(String.valueOf(((List<?>) reply).get(1)));
    }

    /**
     * Asks the Sentinel for a failover now ({@code SENTINEL FAILOVER}: the master stays up and is
     * demoted later) and waits, with a deadline, until the Sentinel names the replica as master
     * and the replica says so itself.
     */
    public void failover() {
        Object reply = sentinel.call("SENTINEL", "FAILOVER", MASTER_NAME);
        if (reply instanceof RedisServer.RedisError) {
            throw new IllegalStateException("SENTINEL FAILOVER: " + reply);
        }
        awaitPromotion();
    }

    /**
     * Waits, with a deadline, until the Sentinel names the replica as master and the replica says
     * so itself (after {@link RedisServer#kill() killing} the master, or a {@link #failover()}).
     */
    public void awaitPromotion() {
        RedisServer replica = replica();
        Poll.until("the Sentinel to name the replica as master", Duration.ofSeconds(20),
                () -> masterPortNow() == replica.port() && info(replica, "replication").contains("role:master"));
    }

    /**
     * @param pattern a pattern of {@code CLIENT LIST}, such as {@code "sub=1"}
     * @return how many of the Sentinel's clients match it (to see that a transport subscribed)
     */
    public long sentinelClients(String pattern) {
        return String.valueOf(sentinel.call("CLIENT", "LIST")).lines().filter(line -> line.contains(pattern)).count();
    }

    @Override
    public void close() {
        if (sentinel != null) {
            sentinel.close();
        }
        data.forEach(RedisServer::close);
    }
}
