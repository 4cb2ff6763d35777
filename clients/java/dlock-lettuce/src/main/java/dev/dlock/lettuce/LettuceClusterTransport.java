package dev.dlock.lettuce;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockServerException;
import dev.dlock.DLockTimeoutException;
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
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * dlock over Lettuce on a Redis Cluster. Every command goes to the master of its routing key's
 * slot (the key of a lock, the first key of a multi-lock, the waiter's key for {@code CLIENT
 * UNBLOCK}, which must reach the node the waiter blocks on), on that node's connection of the
 * cluster connection; a {@code MOVED} or {@code ASK} reply (the command did not run) refreshes
 * the topology and sends it once more to the new owner. Blocking waits run on connections of
 * their own to that master. As in {@link LettuceTransport}, nothing is re-sent after a
 * reconnect, and no caller waits for a connection past its own bound (R4.6): the cluster
 * connection is opened on a thread of the transport's, a node connection and a wait's
 * connection (connect, handshake, {@code CLIENT ID}) without blocking, and each caller waits
 * for them only until its deadline; a topology refresh after {@code MOVED} never blocks
 * Lettuce's event loop.
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
    /** The cluster connection being opened, guarded by {@code connectLock}; null when none is. */
    private CompletableFuture<StatefulRedisClusterConnection<byte[], byte[]>> opening;
    /** Opens the cluster connection (Lettuce's connect blocks): callers wait only for their bound. */
    private final ExecutorService connector = Executors.newCachedThreadPool(task -> {
        Thread thread = new Thread(task, "dlock-lettuce-cluster-connect");
        thread.setDaemon(true);
        return thread;
    });
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

    /**
     * The cluster connection, opened if needed on the connector (Lettuce's connect blocks until
     * the topology is read): a caller waits for it only as long as its own bound (R4.6), and
     * several callers share one connect. An opening that has not ended after {@link #OPEN_BOUND}
     * is given up (a connection that comes later is closed), so that the next call tries again.
     */
    private CompletableFuture<StatefulRedisClusterConnection<byte[], byte[]>> sharedAsync() {
        StatefulRedisClusterConnection<byte[], byte[]> connection = shared;
        if (connection != null && connection.isOpen()) {
            return CompletableFuture.completedFuture(connection);
        }
        synchronized (connectLock) {
            if (closed) {
                return CompletableFuture.failedFuture(new DLockConnectionException("transport closed", null));
            }
            if (shared != null && shared.isOpen()) {
                return CompletableFuture.completedFuture(shared);
            }
            CompletableFuture<StatefulRedisClusterConnection<byte[], byte[]>> pending = opening;
            if (pending == null) {
                if (shared != null) {
                    shared.closeAsync();
                    shared = null;
                }
                CompletableFuture<StatefulRedisClusterConnection<byte[], byte[]>> connecting = new CompletableFuture<>();
                opening = connecting;
                pending = connecting;
                try {
                    connector.execute(() -> {
                        try {
                            StatefulRedisClusterConnection<byte[], byte[]> opened = cluster.connect(ByteArrayCodec.INSTANCE);
                            if (!connecting.complete(opened)) {
                                opened.closeAsync();
                            }
                        } catch (Throwable e) {
                            connecting.completeExceptionally(
                                    new DLockConnectionException("cannot connect to the cluster: " + e.getMessage(), e));
                        }
                    });
                } catch (RuntimeException e) {
                    connecting.completeExceptionally(LettuceTransport.translate(e));
                }
                connecting.orTimeout(OPEN_BOUND.toNanos(), TimeUnit.NANOSECONDS);
                connecting.whenComplete((opened, error) -> {
                    synchronized (connectLock) {
                        if (opening == connecting) {
                            opening = null;
                        }
                        if (opened != null) {
                            if (closed) {
                                opened.closeAsync();
                            } else {
                                shared = opened;
                            }
                        }
                    }
                });
            }
            return pending;
        }
    }

    private static RedisURI masterFor(StatefulRedisClusterConnection<byte[], byte[]> connection, byte[] routingKey) {
        RedisClusterNode node = connection.getPartitions().getMasterBySlot(SlotHash.getSlot(routingKey));
        if (node == null) {
            throw new DLockConnectionException("no master serves the slot of this key", null);
        }
        return node.getUri();
    }

    /**
     * The cluster connection's connection to the master of {@code routingKey}'s slot, without
     * blocking: Lettuce opens a node connection on its first use.
     */
    private CompletableFuture<StatefulRedisConnection<byte[], byte[]>> nodeConnection(byte[] routingKey, boolean again) {
        return sharedAsync().thenCompose(connection -> {
            RedisURI uri = masterFor(connection, routingKey);
            return connection.getConnectionAsync(uri.getHost(), uri.getPort()).thenCompose(node -> {
                if (node.isOpen() || !again) {
                    return CompletableFuture.completedFuture(node);
                }
                // A node connection that closed (autoReconnect is off): start over with a new
                // cluster connection, which also reloads the topology.
                synchronized (connectLock) {
                    if (shared == connection) {
                        connection.closeAsync();
                        shared = null;
                    }
                }
                return nodeConnection(routingKey, false);
            });
        });
    }

    private static boolean redirected(Throwable error) {
        return error instanceof DLockServerException
                && (((DLockServerException) error).code().equals("MOVED") || ((DLockServerException) error).code().equals("ASK"));
    }

    /** How long opening a connection may take when the caller gives no bound (a connect, then its first reply). */
    private static final Duration OPEN_BOUND = Duration.ofSeconds(20);

    @Override
    public void prepare(byte[] routingKey) {
        prepare(routingKey, System.nanoTime() + OPEN_BOUND.toNanos());
    }

    /** Waits for the connection to the key's master until {@code deadlineNanos}, no longer. */
    @Override
    public void prepare(byte[] routingKey, long deadlineNanos) {
        try {
            awaitBy(nodeConnection(routingKey, true), deadlineNanos);
        } catch (TimeoutException e) {
            // The command waits for the connect; its caller bounds that wait.
        }
    }

    /**
     * Waits for {@code future} until {@code deadlineNanos}; an interrupt does not end the wait
     * (the flag is set again after it). Failures are translated.
     */
    private static <T> T awaitBy(CompletableFuture<T> future, long deadlineNanos) throws TimeoutException {
        try {
            return Transport.awaitBy(future, deadlineNanos);
        } catch (ExecutionException e) {
            throw LettuceTransport.translate(e.getCause());
        }
    }

    private CompletableFuture<Object> send(byte[] routingKey, byte[][] args) {
        return nodeConnection(routingKey, true).thenCompose(node -> LettuceTransport.dispatch(node, args));
    }

    @Override
    public CompletableFuture<Object> call(byte[] routingKey, byte[]... args) {
        CompletableFuture<Object> first;
        try {
            first = send(routingKey, args);
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(LettuceTransport.translate(e));
        }
        CompletableFuture<Object> out = new CompletableFuture<>();
        first.whenComplete((value, error) -> {
            if (error == null) {
                out.complete(value);
                return;
            }
            RuntimeException cause = LettuceTransport.translate(error);
            if (!redirected(cause)) {
                out.completeExceptionally(cause);
                return;
            }
            // MOVED/ASK: the command did not run; send it once to the new owner, after a topology
            // refresh that never blocks this thread (it may be Lettuce's event loop).
            try {
                cluster.refreshPartitionsAsync().toCompletableFuture()
                        .thenCompose(refreshed -> send(routingKey, args))
                        .whenComplete((v, e) -> {
                            if (e == null) {
                                out.complete(v);
                            } else {
                                out.completeExceptionally(LettuceTransport.translate(e));
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
        return openBlocking(routingKey, System.nanoTime() + OPEN_BOUND.toNanos());
    }

    /**
     * A wait's connection by {@code deadlineNanos}: one of the idle ones of the key's master, else
     * a new one, whose connect, handshake and {@code CLIENT ID} the caller waits for only until its
     * deadline (a connection that comes later joins the idle ones).
     */
    @Override
    public BlockingConnection openBlocking(byte[] routingKey, long deadlineNanos) {
        RedisURI uri;
        try {
            uri = awaitBy(sharedAsync().thenApply(connection -> masterFor(connection, routingKey)), deadlineNanos);
        } catch (TimeoutException e) {
            throw new DLockTimeoutException("no connection in time: the cluster does not answer");
        }
        String address = uri.getHost() + ":" + uri.getPort();
        ConcurrentLinkedDeque<Dedicated> pool = idle.computeIfAbsent(address, a -> new ConcurrentLinkedDeque<>());
        Dedicated connection;
        while ((connection = pool.pollFirst()) != null) {
            if (connection.connection.isOpen()) {
                return connection;
            }
            connection.connection.closeAsync();
        }
        CompletableFuture<Dedicated> opening = open(uri, address, pool);
        try {
            return awaitBy(opening, deadlineNanos);
        } catch (TimeoutException e) {
            opening.thenAccept(Dedicated::recycle);
            throw new DLockTimeoutException("no connection in time: " + address + " does not answer");
        }
    }

    /**
     * Opens a wait's connection without blocking: the connect, then {@code CLIENT ID}; given up
     * after {@link #OPEN_BOUND} (a connection that comes later is closed).
     */
    private CompletableFuture<Dedicated> open(RedisURI uri, String address, ConcurrentLinkedDeque<Dedicated> pool) {
        CompletableFuture<Dedicated> opened = new CompletableFuture<>();
        try {
            nodes.connectAsync(ByteArrayCodec.INSTANCE, uri).whenComplete((fresh, error) -> {
                if (error != null) {
                    opened.completeExceptionally(new DLockConnectionException(
                            "cannot connect to " + address + ": " + error.getMessage(), error));
                    return;
                }
                LettuceTransport.dispatch(fresh, CLIENT, ID).whenComplete((id, failure) -> {
                    if (failure != null) {
                        fresh.closeAsync();
                        opened.completeExceptionally(LettuceTransport.translate(failure));
                    } else if (!opened.complete(new Dedicated(fresh, (Long) id, pool))) {
                        fresh.closeAsync();
                    }
                });
            });
        } catch (RuntimeException e) {
            opened.completeExceptionally(LettuceTransport.translate(e));
        }
        opened.orTimeout(OPEN_BOUND.toNanos(), TimeUnit.NANOSECONDS);
        return opened;
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
        connector.shutdownNow();
        nodes.shutdown(Duration.ZERO, Duration.ofSeconds(2));
        cluster.shutdown(Duration.ZERO, Duration.ofSeconds(2));
        if (ownsResources) {
            resources.shutdown(0, 2, TimeUnit.SECONDS);
        }
    }
}
