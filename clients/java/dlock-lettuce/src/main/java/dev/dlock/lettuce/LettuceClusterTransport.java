package dev.dlock.lettuce;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockServerException;
import dev.dlock.Transport;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.ClusterClientOptions;
import io.lettuce.core.cluster.RedisClusterClient;
import io.lettuce.core.cluster.SlotHash;
import io.lettuce.core.cluster.api.StatefulRedisClusterConnection;
import io.lettuce.core.cluster.models.partitions.RedisClusterNode;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.resource.ClientResources;
import io.lettuce.core.resource.DefaultClientResources;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.TimeUnit;

/**
 * dlock over Lettuce on a Redis Cluster. Every command goes to the master of its routing key's
 * slot (the key of a lock, the first key of a multi-lock, the waiter's key for {@code CLIENT
 * UNBLOCK}, which must reach the node the waiter blocks on), on that node's connection of the
 * cluster connection; a {@code MOVED} or {@code ASK} reply (the command did not run) refreshes
 * the topology and sends it once more to the new owner. Blocking waits run on connections of
 * their own to that master. As in {@link LettuceTransport}, nothing is re-sent after a
 * reconnect.
 */
public final class LettuceClusterTransport implements Transport {
    private static final byte[] CLIENT = "CLIENT".getBytes();
    private static final byte[] ID = "ID".getBytes();

    private final ClientResources resources;
    private final boolean ownsResources;
    private final RedisClusterClient cluster;
    private final RedisClient nodes;
    private final Map<String, ConcurrentLinkedDeque<Dedicated>> idle = new ConcurrentHashMap<>();
    private final Object connectLock = new Object();
    private volatile StatefulRedisClusterConnection<byte[], byte[]> shared;
    private volatile boolean closed;

    private LettuceClusterTransport(ClientResources resources, boolean ownsResources, List<RedisURI> seeds) {
        this.resources = resources;
        this.ownsResources = ownsResources;
        this.cluster = RedisClusterClient.create(resources, seeds);
        this.cluster.setOptions(ClusterClientOptions.builder()
                .autoReconnect(false)
                .disconnectedBehavior(io.lettuce.core.ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
                .protocolVersion(ProtocolVersion.RESP2)
                .timeoutOptions(TimeoutOptions.builder().timeoutCommands(false).build())
                .build());
        this.nodes = RedisClient.create(resources);
        this.nodes.setOptions(LettuceTransport.options());
    }

    /**
     * @param seeds one or more nodes of the cluster
     * @return a transport with resources of its own
     */
    public static LettuceClusterTransport create(List<RedisURI> seeds) {
        return new LettuceClusterTransport(DefaultClientResources.create(), true, seeds);
    }

    /**
     * @param resources the application's client resources (left open by {@link #close()})
     * @param seeds one or more nodes of the cluster
     * @return the transport
     */
    public static LettuceClusterTransport create(ClientResources resources, List<RedisURI> seeds) {
        return new LettuceClusterTransport(resources, false, seeds);
    }

    private StatefulRedisClusterConnection<byte[], byte[]> shared() {
        StatefulRedisClusterConnection<byte[], byte[]> connection = shared;
        if (connection != null && connection.isOpen()) {
            return connection;
        }
        synchronized (connectLock) {
            if (closed) {
                throw new IllegalStateException("transport closed");
            }
            if (shared == null || !shared.isOpen()) {
                if (shared != null) {
                    shared.closeAsync();
                }
                try {
                    shared = cluster.connect(ByteArrayCodec.INSTANCE);
                } catch (RuntimeException e) {
                    throw new DLockConnectionException("cannot connect to the cluster: " + e.getMessage(), e);
                }
            }
            return shared;
        }
    }

    private RedisURI masterFor(byte[] routingKey) {
        RedisClusterNode node = shared().getPartitions().getMasterBySlot(SlotHash.getSlot(routingKey));
        if (node == null) {
            throw new DLockConnectionException("no master serves the slot of this key", null);
        }
        return node.getUri();
    }

    private StatefulRedisConnection<byte[], byte[]> nodeConnection(byte[] routingKey) {
        RedisURI uri = masterFor(routingKey);
        StatefulRedisConnection<byte[], byte[]> connection = shared().getConnection(uri.getHost(), uri.getPort());
        if (!connection.isOpen()) {
            // A node connection that closed (autoReconnect is off): start over with a new
            // cluster connection, which also reloads the topology.
            synchronized (connectLock) {
                shared.closeAsync();
                shared = null;
            }
            connection = shared().getConnection(uri.getHost(), uri.getPort());
        }
        return connection;
    }

    private static boolean redirected(Throwable error) {
        return error instanceof DLockServerException
                && (((DLockServerException) error).code().equals("MOVED") || ((DLockServerException) error).code().equals("ASK"));
    }

    @Override
    public void prepare(byte[] routingKey) {
        nodeConnection(routingKey);
    }

    @Override
    public CompletableFuture<Object> call(byte[] routingKey, byte[]... args) {
        CompletableFuture<Object> first;
        try {
            first = LettuceTransport.dispatch(nodeConnection(routingKey), args);
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(LettuceTransport.translate(e));
        }
        CompletableFuture<Object> out = new CompletableFuture<>();
        first.whenComplete((value, error) -> {
            if (error == null) {
                out.complete(value);
                return;
            }
            Throwable cause = error instanceof java.util.concurrent.CompletionException ? error.getCause() : error;
            if (!redirected(cause)) {
                out.completeExceptionally(cause);
                return;
            }
            // MOVED/ASK: the command did not run; send it once to the new owner.
            try {
                cluster.refreshPartitions();
                LettuceTransport.dispatch(nodeConnection(routingKey), args).whenComplete((v, e) -> {
                    if (e == null) {
                        out.complete(v);
                    } else {
                        out.completeExceptionally(e instanceof java.util.concurrent.CompletionException ? e.getCause() : e);
                    }
                });
            } catch (RuntimeException e) {
                out.completeExceptionally(LettuceTransport.translate(e));
            }
        });
        return out;
    }

    @Override
    public BlockingConnection openBlocking(byte[] routingKey) {
        RedisURI uri = masterFor(routingKey);
        String address = uri.getHost() + ":" + uri.getPort();
        ConcurrentLinkedDeque<Dedicated> pool = idle.computeIfAbsent(address, a -> new ConcurrentLinkedDeque<>());
        Dedicated connection;
        while ((connection = pool.pollFirst()) != null) {
            if (connection.connection.isOpen()) {
                return connection;
            }
            connection.connection.closeAsync();
        }
        StatefulRedisConnection<byte[], byte[]> fresh;
        try {
            fresh = nodes.connect(ByteArrayCodec.INSTANCE, uri);
        } catch (RuntimeException e) {
            throw new DLockConnectionException("cannot connect to " + address + ": " + e.getMessage(), e);
        }
        try {
            Object id = LettuceTransport.dispatch(fresh, CLIENT, ID).get(10, TimeUnit.SECONDS);
            return new Dedicated(fresh, (Long) id, pool);
        } catch (Exception e) {
            fresh.closeAsync();
            throw LettuceTransport.translate(e);
        }
    }

    private final class Dedicated implements BlockingConnection {
        final StatefulRedisConnection<byte[], byte[]> connection;
        final long id;
        final ConcurrentLinkedDeque<Dedicated> pool;

        Dedicated(StatefulRedisConnection<byte[], byte[]> connection, long id, ConcurrentLinkedDeque<Dedicated> pool) {
            this.connection = connection;
            this.id = id;
            this.pool = pool;
        }

        @Override
        public long clientId() {
            return id;
        }

        @Override
        public CompletableFuture<Object> send(byte[]... args) {
            return LettuceTransport.dispatch(connection, args);
        }

        @Override
        public void recycle() {
            if (closed || !connection.isOpen() || pool.size() >= 16) {
                connection.closeAsync();
            } else {
                pool.addFirst(this);
            }
        }

        @Override
        public void discard() {
            connection.closeAsync();
        }
    }

    @Override
    public void close() {
        closed = true;
        List<Dedicated> all = new ArrayList<>();
        idle.values().forEach(all::addAll);
        for (Dedicated connection : all) {
            connection.connection.close();
        }
        synchronized (connectLock) {
            if (shared != null) {
                shared.close();
                shared = null;
            }
        }
        nodes.shutdown(Duration.ZERO, Duration.ofSeconds(2));
        cluster.shutdown(Duration.ZERO, Duration.ofSeconds(2));
        if (ownsResources) {
            resources.shutdown(0, 2, TimeUnit.SECONDS);
        }
    }
}
