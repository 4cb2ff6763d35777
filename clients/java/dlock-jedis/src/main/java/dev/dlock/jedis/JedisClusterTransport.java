package dev.dlock.jedis;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockTimeoutException;
import dev.dlock.Transport;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import redis.clients.jedis.CommandArguments;
import redis.clients.jedis.Connection;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisCluster;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.util.JedisClusterCRC16;

/**
 * dlock over Jedis on a Redis Cluster, through the application's {@link JedisCluster}: each
 * command runs once on a pooled connection to the master of its routing key's slot (taken with
 * {@code getConnectionFromSlot}), never through {@code JedisCluster}'s own retry loop, which
 * re-sends a command after a connection error. A {@code MOVED} reply (during resharding) is
 * reported as an error; renewals retry it until their deadline. Blocking waits hold a pooled
 * connection of that master with an infinite socket timeout. No caller waits past its own bound
 * (R4.6), whatever the cluster client's timeouts: commands run on the transport's threads (one
 * per call in flight, so a stalled node holds up no call to another), and a wait's connection is
 * borrowed (connected if need be) and identified there too, the caller waiting for it only until
 * its deadline.
 */
@SuppressWarnings("deprecation") // JedisCluster: deprecated in Jedis 7 but what most applications have
public final class JedisClusterTransport implements Transport {
    private final JedisCluster cluster;
    private final boolean ownsCluster;
    private final ExecutorService calls;
    private final ExecutorService waits;

    private JedisClusterTransport(JedisCluster cluster, boolean ownsCluster) {
        this.cluster = cluster;
        this.ownsCluster = ownsCluster;
        // As many threads as calls in flight: a call held up by a stalled node (until its
        // socket timeout) never delays a call to another node (R4.7).
        this.calls = Executors.newCachedThreadPool(daemon("dlock-jedis-cluster-call"));
        this.waits = Executors.newCachedThreadPool(daemon("dlock-jedis-cluster-wait"));
    }

    /**
     * @param cluster the application's cluster client (left open by {@link #close()})
     * @return the transport
     */
    public static JedisClusterTransport create(JedisCluster cluster) {
        return new JedisClusterTransport(cluster, false);
    }

    /**
     * @param seeds one or more nodes of the cluster
     * @return a transport with a cluster client of its own
     */
    public static JedisClusterTransport create(Set<HostAndPort> seeds) {
        return new JedisClusterTransport(new JedisCluster(seeds), true);
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return task -> {
            Thread thread = new Thread(task, name + "-" + n.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    private static CommandArguments arguments(byte[][] args) {
        byte[] name = args[0];
        CommandArguments command = new CommandArguments((ProtocolCommand) () -> name);
        for (int i = 1; i < args.length; i++) {
            command.add(args[i]);
        }
        return command;
    }

    private Connection connectionFor(byte[] routingKey) {
        return cluster.getConnectionFromSlot(JedisClusterCRC16.getSlot(routingKey));
    }

    @Override
    public CompletableFuture<Object> call(byte[] routingKey, byte[]... args) {
        CompletableFuture<Object> reply = new CompletableFuture<>();
        try {
            calls.execute(() -> {
                try (Connection connection = connectionFor(routingKey)) {
                    reply.complete(connection.executeCommand(arguments(args)));
                } catch (Throwable e) {
                    reply.completeExceptionally(JedisTransport.translate(e));
                }
            });
        } catch (RuntimeException e) {
            reply.completeExceptionally(JedisTransport.translate(e));
        }
        return reply;
    }

    /** How long opening a wait's connection may take when the caller gives no bound. */
    private static final long OPEN_BOUND_NANOS = TimeUnit.SECONDS.toNanos(20);

    @Override
    public BlockingConnection openBlocking(byte[] routingKey) {
        return openBlocking(routingKey, System.nanoTime() + OPEN_BOUND_NANOS);
    }

    /**
     * A wait's connection by {@code deadlineNanos}: borrowing it (which may connect, with its
     * handshake) and its {@code CLIENT ID} run on one of the transport's threads, and the caller
     * waits for them only until its deadline, whatever the cluster client's socket timeouts (a
     * connection that comes later goes back to the pool).
     */
    @Override
    public BlockingConnection openBlocking(byte[] routingKey, long deadlineNanos) {
        CompletableFuture<Dedicated> opening = new CompletableFuture<>();
        try {
            waits.execute(() -> {
                Connection connection;
                try {
                    connection = connectionFor(routingKey);
                } catch (Throwable e) {
                    opening.completeExceptionally(JedisTransport.translate(e));
                    return;
                }
                try {
                    Object id = connection.executeCommand(arguments(new byte[][] {"CLIENT".getBytes(), "ID".getBytes()}));
                    if (!opening.complete(new Dedicated(connection, (Long) id))) {
                        connection.close();
                    }
                } catch (Throwable e) {
                    connection.setBroken();
                    connection.close();
                    opening.completeExceptionally(JedisTransport.translate(e));
                }
            });
        } catch (RuntimeException e) {
            throw JedisTransport.translate(e);
        }
        try {
            return Transport.awaitBy(opening, deadlineNanos);
        } catch (TimeoutException e) {
            if (!opening.cancel(false)) {
                // Opened as the deadline passed: not used, given back.
                opening.thenAccept(Dedicated::recycle);
            }
            throw new DLockTimeoutException("no connection in time: the node does not answer");
        } catch (ExecutionException e) {
            throw JedisTransport.translate(e.getCause());
        }
    }

    private final class Dedicated implements BlockingConnection {
        private final Connection connection;
        private final long id;
        private final AtomicBoolean done = new AtomicBoolean();

        Dedicated(Connection connection, long id) {
            this.connection = connection;
            this.id = id;
        }

        @Override
        public long clientId() {
            return id;
        }

        @Override
        public CompletableFuture<Object> send(byte[]... args) {
            CompletableFuture<Object> reply = new CompletableFuture<>();
            waits.execute(() -> {
                try {
                    connection.setTimeoutInfinite();
                    Object value = connection.executeCommand(arguments(args));
                    connection.rollbackTimeout();
                    reply.complete(value);
                } catch (Throwable e) {
                    reply.completeExceptionally(JedisTransport.translate(e));
                }
            });
            return reply;
        }

        @Override
        public void recycle() {
            if (done.compareAndSet(false, true)) {
                connection.close();
            }
        }

        @Override
        public void discard() {
            if (done.compareAndSet(false, true)) {
                connection.setBroken();
                connection.disconnect();
                connection.close();
            }
        }
    }

    @Override
    public void close() {
        calls.shutdown();
        waits.shutdownNow();
        if (ownsCluster) {
            cluster.close();
        }
    }
}
