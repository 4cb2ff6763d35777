package dev.dlock.jedis;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockServerException;
import dev.dlock.Transport;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import redis.clients.jedis.Connection;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.JedisSentinelPool;
import redis.clients.jedis.Pipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.util.Pool;

/**
 * dlock over Jedis (5+) on one server, through the application's {@link JedisPool} (TLS, auth
 * and timeouts as configured there). Jedis never re-sends a command. Each command borrows a
 * connection for its round trip, on the calling thread ({@link #callsOnCaller}), or on a small
 * thread pool when the client wants a future; renewals that fall due together go as one {@link
 * Pipeline}; a blocking wait holds a pooled connection of its own with an infinite socket timeout
 * (the client bounds the wait itself, and closes the connection to end it), read by the waiting
 * thread itself when nothing but the reply can end the wait ({@code lock()}), else on one of the
 * transport's threads.
 */
@SuppressWarnings("deprecation") // JedisPool, JedisSentinelPool: deprecated in Jedis 7 but what most applications have
public final class JedisTransport implements Transport {
    private final Pool<Jedis> pool;
    /** The pool, when it follows Sentinel; else null. */
    private final JedisSentinelPool sentinelPool;
    /** With Sentinel: the blocking connections handed out and not yet given back. */
    private final Set<Dedicated> busy = ConcurrentHashMap.newKeySet();
    private final boolean ownsPool;
    private final ExecutorService calls;
    private final ExecutorService waits;

    private JedisTransport(Pool<Jedis> pool, boolean ownsPool, int threads) {
        this.pool = pool;
        this.sentinelPool = pool instanceof JedisSentinelPool sentinel ? sentinel : null;
        this.ownsPool = ownsPool;
        this.calls = Executors.newFixedThreadPool(threads, daemon("dlock-jedis-call"));
        this.waits = Executors.newCachedThreadPool(daemon("dlock-jedis-wait"));
    }

    /**
     * @param pool the application's pool (left open by {@link #close()})
     * @return the transport
     */
    public static JedisTransport create(JedisPool pool) {
        return new JedisTransport(pool, false, 4);
    }

    /**
     * A transport on the master that Sentinel names, through the application's pool (its master
     * name, Sentinels, and client configurations for the master and for the Sentinels: auth, TLS,
     * timeouts).
     *
     * <p>A {@link JedisSentinelPool} hands out connections to the master its Sentinels name now:
     * it listens to {@code +switch-master} on every Sentinel, drops its idle connections to the
     * old master and never hands out one to an old master. Since every command borrows a
     * connection for its round trip, and every wait borrows one of its own, the next command and
     * every new wait after a failover go to the new master. A wait blocked on the old master is
     * ended (a {@code DLockConnectionException}) at the next command, renewal round or new wait after the
     * pool heard of the switch.
     *
     * @param pool the application's Sentinel pool (left open by {@link #close()})
     * @return the transport
     */
    public static JedisTransport create(JedisSentinelPool pool) {
        return new JedisTransport(pool, false, 4);
    }

    /**
     * @param host the server's host
     * @param port its port
     * @return a transport with a pool of its own
     */
    public static JedisTransport create(String host, int port) {
        return new JedisTransport(new JedisPool(host, port), true, 4);
    }

    private static ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return task -> {
            Thread thread = new Thread(task, name + "-" + n.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    /** A module command name Jedis does not know. */
    private static final class Raw implements ProtocolCommand {
        private final byte[] name;

        Raw(byte[] name) {
            this.name = name;
        }

        @Override
        public byte[] getRaw() {
            return name;
        }
    }

    private static byte[][] rest(byte[][] args) {
        byte[][] out = new byte[args.length - 1][];
        System.arraycopy(args, 1, out, 0, out.length);
        return out;
    }

    static RuntimeException translate(Throwable error) {
        if (error instanceof JedisDataException) {
            return DLockServerException.of(error.getMessage());
        }
        if (error instanceof DLockServerException || error instanceof DLockConnectionException) {
            return (RuntimeException) error;
        }
        return new DLockConnectionException(String.valueOf(error.getMessage()), error);
    }

    /**
     * With Sentinel: ends the waits blocked on a server that is no longer the master the pool
     * follows (the old master, until the Sentinel demotes it, could still grant them). Checked at
     * every command, renewal round and new wait, since the pool tells nobody of a switch.
     */
    private void endWaitsOffMaster() {
        if (sentinelPool == null || busy.isEmpty()) {
            return;
        }
        HostAndPort master = sentinelPool.getCurrentHostMaster();
        for (Dedicated connection : busy) {
            if (!master.equals(connection.master)) {
                connection.discard();
            }
        }
    }

    @Override
    public CompletableFuture<Object> call(byte[] routingKey, byte[]... args) {
        endWaitsOffMaster();
        CompletableFuture<Object> reply = new CompletableFuture<>();
        try {
            calls.execute(() -> {
                try (Jedis jedis = pool.getResource()) {
                    reply.complete(jedis.sendCommand(new Raw(args[0]), rest(args)));
                } catch (Throwable e) {
                    reply.completeExceptionally(translate(e));
                }
            });
        } catch (RuntimeException e) {
            reply.completeExceptionally(translate(e));
        }
        return reply;
    }

    /** Jedis is synchronous: a command's round trip runs on the thread that needs its reply. */
    @Override
    public boolean callsOnCaller() {
        return true;
    }

    @Override
    public Object callOnCaller(byte[] routingKey, byte[]... args) {
        endWaitsOffMaster();
        try (Jedis jedis = pool.getResource()) {
            return jedis.sendCommand(new Raw(args[0]), rest(args));
        } catch (RuntimeException e) {
            throw translate(e);
        }
    }

    @Override
    public List<CompletableFuture<Object>> callAll(List<Command> commands) {
        endWaitsOffMaster();
        List<CompletableFuture<Object>> replies = new ArrayList<>(commands.size());
        for (int i = 0; i < commands.size(); i++) {
            replies.add(new CompletableFuture<>());
        }
        calls.execute(() -> {
            try (Jedis jedis = pool.getResource()) {
                List<Response<Object>> responses = new ArrayList<>(commands.size());
                try (Pipeline pipeline = jedis.pipelined()) {
                    for (Command command : commands) {
                        responses.add(pipeline.sendCommand(new Raw(command.args()[0]), rest(command.args())));
                    }
                    pipeline.sync();
                }
                for (int i = 0; i < responses.size(); i++) {
                    try {
                        replies.get(i).complete(responses.get(i).get());
                    } catch (Throwable e) {
                        replies.get(i).completeExceptionally(translate(e));
                    }
                }
            } catch (Throwable e) {
                for (CompletableFuture<Object> reply : replies) {
                    reply.completeExceptionally(translate(e));
                }
            }
        });
        return replies;
    }

    @Override
    public BlockingConnection openBlocking(byte[] routingKey) {
        endWaitsOffMaster();
        // Read before the borrow (which hands out a connection to the master of that moment): a
        // switch in between marks a connection to the new master as one to the old, which only
        // ends its wait early, never the reverse.
        HostAndPort master = sentinelPool == null ? null : sentinelPool.getCurrentHostMaster();
        Jedis jedis;
        try {
            jedis = pool.getResource();
        } catch (RuntimeException e) {
            throw translate(e);
        }
        try {
            Dedicated connection = new Dedicated(jedis, jedis.clientId(), master);
            if (sentinelPool != null) {
                busy.add(connection);
            }
            return connection;
        } catch (RuntimeException e) {
            jedis.getConnection().setBroken();
            jedis.close();
            throw translate(e);
        }
    }

    private final class Dedicated implements BlockingConnection {
        private final Jedis jedis;
        private final long id;
        /** With Sentinel: the master the pool followed when this connection was borrowed. */
        private final HostAndPort master;
        private final AtomicBoolean done = new AtomicBoolean();

        Dedicated(Jedis jedis, long id, HostAndPort master) {
            this.jedis = jedis;
            this.id = id;
            this.master = master;
        }

        @Override
        public long clientId() {
            return id;
        }

        @Override
        public CompletableFuture<Object> send(byte[]... args) {
            CompletableFuture<Object> reply = new CompletableFuture<>();
            waits.execute(() -> {
                Connection connection = jedis.getConnection();
                try {
                    connection.setTimeoutInfinite();
                    Object value = jedis.sendCommand(new Raw(args[0]), rest(args));
                    connection.rollbackTimeout();
                    reply.complete(value);
                } catch (Throwable e) {
                    reply.completeExceptionally(translate(e));
                }
            });
            return reply;
        }

        /** The waiting thread reads the reply itself: the grant wakes it, no other thread. */
        @Override
        public boolean sendsOnCaller() {
            return true;
        }

        @Override
        public Object sendOnCaller(byte[]... args) {
            Connection connection = jedis.getConnection();
            try {
                connection.setTimeoutInfinite();
                Object value = jedis.sendCommand(new Raw(args[0]), rest(args));
                connection.rollbackTimeout();
                return value;
            } catch (RuntimeException e) {
                throw translate(e);
            }
        }

        @Override
        public void recycle() {
            if (done.compareAndSet(false, true)) {
                busy.remove(this);
                jedis.close();
            }
        }

        @Override
        public void discard() {
            if (done.compareAndSet(false, true)) {
                busy.remove(this);
                Connection connection = jedis.getConnection();
                connection.setBroken();
                connection.disconnect();
                jedis.close();
            }
        }
    }

    @Override
    public void close() {
        calls.shutdown();
        waits.shutdownNow();
        if (ownsPool) {
            pool.close();
        }
    }
}
