package dev.dlock.testkit;

import java.util.ArrayList;
import java.util.List;

/** A Redis Cluster of three masters (no replicas) with the module, on free ports; close() stops it. */
public final class RedisClusterServers implements AutoCloseable {
    private final List<RedisServer> nodes = new ArrayList<>();

    private RedisClusterServers() {}

    /**
     * @param kind which server binary
     * @return a cluster whose state is ok on every node
     */
    public static RedisClusterServers start(RedisServer.Kind kind) {
        RedisClusterServers cluster = new RedisClusterServers();
        try {
            // No replicas, so no failover: a long node timeout keeps a node frozen by a test (up
            // to about 12 s, ClusterStall) from being marked failed by the others meanwhile.
            for (int i = 0; i < 3; i++) {
                cluster.nodes.add(RedisServer.start(kind, "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "30000"));
            }
            int[][] ranges = {{0, 5460}, {5461, 10922}, {10923, 16383}};
            for (int i = 0; i < 3; i++) {
                check(cluster.nodes.get(i).call("CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]));
            }
            RedisServer first = cluster.nodes.get(0);
            for (int i = 1; i < 3; i++) {
                check(first.call("CLUSTER", "MEET", "127.0.0.1", cluster.nodes.get(i).port()));
            }
            Poll.until("the cluster to be ok on every node", java.time.Duration.ofSeconds(30), () -> {
                for (RedisServer node : cluster.nodes) {
                    String info = String.valueOf(node.call("CLUSTER", "INFO"));
                    if (!info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:3")) {
                        return false;
                    }
                }
                return true;
            });
            return cluster;
        } catch (RuntimeException | Error e) {
            cluster.close();
            throw e;
        }
    }

    private static void check(Object reply) {
        if (reply instanceof RedisServer.RedisError) {
            throw new IllegalStateException(reply.toString());
        }
    }

    /** @return the masters */
    public List<RedisServer> nodes() {
        return nodes;
    }

    /**
     * @param key a key
     * @return the node that serves it (the one that does not answer MOVED)
     */
    public RedisServer nodeFor(String key) {
        for (RedisServer node : nodes) {
            Object reply = node.call("DLOCK.INFO", key);
            if (!(reply instanceof RedisServer.RedisError) || !reply.toString().startsWith("MOVED")) {
                return node;
            }
        }
        throw new IllegalStateException("no node serves " + key);
    }

    @Override
    public void close() {
        nodes.forEach(RedisServer::close);
    }
}
