package dev.dlock.jedis;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockServerException;
import dev.dlock.DLockTimeoutException;
import dev.dlock.Transport;
import java.lang.reflect.Field;
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
import redis.clients.jedis.RedisSentinelClient;
import redis.clients.jedis.Response;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;
import redis.clients.jedis.providers.SentineledConnectionProvider;
import redis.clients.jedis.util.Pool;

/**
 * dlock over Jedis (7 or 8) on one server, through the application's {@link JedisPool} (TLS, auth
 * and timeouts as configured there), or on the master Sentinel names, through its {@link
 * JedisSentinelPool} or {@link RedisSentinelClient}. Jedis never re-sends a command. Each command
 * borrows a connection for its round trip, on the calling thread ({@link #callsOnCaller}), or on a
 * small thread pool when the client wants a future; renewals that fall due together go as one
 * {@link Pipeline}; a blocking wait holds a pooled connection of its own with an infinite socket
 * timeout (the client bounds the wait itself, and closes the connection to end it), read by the
 * waiting thread itself when nothing but the reply can end the wait ({@code lock()}), else on one
 * of the transport's threads.
 */
@SuppressWarnings("deprecation") // JedisPool, JedisSentinelPool: deprecated in Jedis 7 but what most applications have
public final class JedisTransport implements Transport {
    private final Lender lender;
    /** With Sentinel: the blocking connections handed out and not yet given back. */
    private final Set<Dedicated> busy = ConcurrentHashMap.newKeySet();
    /** The pool the transport made itself (closed by {@link #close()}), else null. */
    private final JedisPool owned;
    private final ExecutorService calls;
    private final ExecutorService waits;

    private JedisTransport(Lender lender, JedisPool owned, int threads) {
        this.lender = lender;
        this.owned = owned;
        this.calls = Executors.newFixedThreadPool(threads, daemon("dlock-jedis-call"));
        this.waits = Executors.newCachedThreadPool(daemon("dlock-jedis-wait"));
    }

    /**
     * @param pool the application's pool (left open by {@link #close()})
     * @return the transport
     */
    public static JedisTransport create(JedisPool pool) {
        return new JedisTransport(new PoolLender(pool), null, 4);
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
        return new JedisTransport(new SentinelPoolLender(pool), null, 4);
    }

    /**
     * A transport on the master that Sentinel names, through the application's {@link
     * RedisSentinelClient} (Jedis 7's Sentinel client, which replaces {@code JedisSentineled}):
     * its connections come from the client's {@link SentineledConnectionProvider}, with its master
     * name, Sentinels, pool and client configurations (auth, TLS, timeouts, client name).
     *
     * <p>The provider listens to {@code +switch-master} on every Sentinel and then lends from a
     * new pool of connections to the new master, closing the old pool (its idle connections at
     * once, the borrowed ones as they come back). Every command borrows a connection for its
     * round trip and every wait one of its own, each from the pool the provider lends from at
     * that moment (for a wait, a connection borrowed while the provider switches pools is given
     * back unused and borrowed again), so the next command and every new wait after a failover go to the new
     * master. A wait blocked on the old master is ended (a {@code DLockConnectionException}) at
     * the next command, renewal round or new wait after the provider heard of the switch, as
     * with a {@link JedisSentinelPool}.
     *
     * <p>Commands go straight to the provider's connections, not through the client's command
     * executor: each is sent once, even if the client was built with a retrying {@code
     * commandExecutor}, and the client's {@code keyPreProcessor}, if any, does not apply to
     * dlock's keys. Jedis has no public accessor for a client's connection provider: this reads
     * the {@code provider} field that {@link UnifiedJedis} gives its subclasses (by reflection;
     * Jedis's packages are open on the class path and as an automatic module).
     *
     * @param client the application's Sentinel client (left open by {@link #close()})
     * @return the transport
     * @throws IllegalArgumentException if the client's connection provider cannot be read or is
     *     not a {@link SentineledConnectionProvider} (a client built with a {@code
     *     connectionProvider} of another kind)
     */
    public static JedisTransport create(RedisSentinelClient client) {
        return new JedisTransport(new ProviderLender(providerOf(client)), null, 4);
    }

    /**
     * @param host the server's host
     * @param port its port
     * @return a transport with a pool of its own
     */
    public static JedisTransport create(String host, int port) {
        JedisPool pool = new JedisPool(host, port);
        return new JedisTransport(new PoolLender(pool), pool, 4);
    }

    /**
     * The connection provider of a Sentinel client. Takes an {@code Object} so that verifying this
     * class does not load {@code RedisSentinelClient}, which Jedis 5 and 6 lack (their
     * applications use the other factories).
     */
    private static SentineledConnectionProvider providerOf(Object client) {
        Object provider;
        try {
            Field field = UnifiedJedis.class.getDeclaredField("provider");
            field.setAccessible(true);
            provider = field.get(client);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalArgumentException("cannot read the client's connection provider (UnifiedJedis.provider)", e);
        }
        if (provider instanceof SentineledConnectionProvider sentineled) {
            return sentineled;
        }
        throw new IllegalArgumentException("the client's connection provider is not a SentineledConnectionProvider: "
                + (provider == null ? "null" : provider.getClass().getName()));
    }

    /** A borrowed connection and the master it reaches, in the terms of {@link Lender#master()}. */
    private record Borrowed(Jedis jedis, Object master) {}

    /** Where the transport borrows its connections (closing one gives it back). */
    private interface Lender {
        /** @return a connection to the server (with Sentinel: to the master named now) */
        Jedis borrow();

        /** @return with Sentinel, what stands for the master followed now (compared with equals); else null */
        Object master();

        /**
         * @return a connection and the master it reaches; a connection to the new master may be
         *     marked as one to the old (which only ends its wait early), never the reverse
         */
        Borrowed borrowMarked();
    }

    /** A {@link JedisPool}: one server, nothing to follow. */
    private record PoolLender(Pool<Jedis> pool) implements Lender {
        @Override
        public Jedis borrow() {
            return pool.getResource();
        }

        @Override
        public Object master() {
            return null;
        }

        @Override
        public Borrowed borrowMarked() {
            return new Borrowed(pool.getResource(), null);
        }
    }

    /** A {@link JedisSentinelPool}: the master is the address it names. */
    private record SentinelPoolLender(JedisSentinelPool pool) implements Lender {
        @Override
        public Jedis borrow() {
            return pool.getResource();
        }

        @Override
        public Object master() {
            return pool.getCurrentHostMaster();
        }

        @Override
        public Borrowed borrowMarked() {
            // Read before the borrow (which hands out a connection to the master of that moment,
            // the pool checks it): a switch in between marks a connection to the new master as
            // one to the old.
            HostAndPort master = pool.getCurrentHostMaster();
            return new Borrowed(pool.getResource(), master);
        }
    }

    /**
     * A {@link SentineledConnectionProvider}: the master is the pool it lends from, which it
     * replaces by a new one at each switch. Its {@code getCurrentMaster()} would not do: it
     * names the new master a moment before the provider lends from the new pool.
     */
    private record ProviderLender(SentineledConnectionProvider provider) implements Lender {
        /** A borrow that sees the provider switch pools this many times in a row gives up. */
        private static final int BORROWS = 3;

        @Override
        public Jedis borrow() {
            // A round trip needs no mark (as with a JedisSentinelPool): only waits are tracked.
            return new Jedis(provider.getConnection());
        }

        @Override
        public Object master() {
            return provider.getConnectionMap().values().iterator().next();
        }

        @Override
        public Borrowed borrowMarked() {
            for (int attempt = 1; ; attempt++) {
                Object before = master();
                Connection connection = provider.getConnection();
                // The same pool before and after: the connection is from it (each switch makes a
                // new pool). Else it may be one to the old master: given back, nothing sent on it.
                if (master() == before) {
                    return new Borrowed(new Jedis(connection), before);
                }
                connection.close();
                if (attempt == BORROWS) {
                    throw new JedisConnectionException("the Sentinel master changed at every borrow");
                }
            }
        }
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
        if (error instanceof DLockServerException || error instanceof DLockConnectionException
                || error instanceof DLockTimeoutException) {
            return (RuntimeException) error;
        }
        // A read that timed out (the pool's socket timeout): no reply within the read timeout,
        // kind timeout; the client treats it as a failure without an answer (R4.7, R5.3).
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            if (cause instanceof java.net.SocketTimeoutException) {
                return new DLockTimeoutException("no reply within the read timeout: " + error.getMessage(), error);
            }
        }
        return new DLockConnectionException(String.valueOf(error.getMessage()), error);
    }

    /**
     * With Sentinel: ends the waits blocked on a server that is no longer the master the pool (or
     * provider) follows (the old master, until the Sentinel demotes it, could still grant them).
     * Checked at every command, renewal round and new wait, since Jedis tells nobody of a switch.
     */
    private void endWaitsOffMaster() {
        if (busy.isEmpty()) {
            return;
        }
        Object master = lender.master();
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
                try (Jedis jedis = lender.borrow()) {
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
        try (Jedis jedis = lender.borrow()) {
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
            try (Jedis jedis = lender.borrow()) {
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
        Borrowed borrowed;
        try {
            borrowed = lender.borrowMarked();
        } catch (RuntimeException e) {
            throw translate(e);
        }
        Jedis jedis = borrowed.jedis();
        try {
            Dedicated connection = new Dedicated(jedis, jedis.clientId(), borrowed.master());
            if (borrowed.master() != null) {
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
        /** With Sentinel: the master this connection reaches ({@link Lender#master()}); else null. */
        private final Object master;
        private final AtomicBoolean done = new AtomicBoolean();

        Dedicated(Jedis jedis, long id, Object master) {
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
                try {
                    reply.complete(sendAndRead(args));
                } catch (Throwable e) {
                    reply.completeExceptionally(translate(e));
                }
            });
            return reply;
        }

        /**
         * Writes the command unless the connection was discarded, then reads its reply. The write
         * and {@link #discard()} exclude each other: a discard that comes first leaves the command
         * unwritten (Jedis would otherwise reconnect the closed socket to write it, and the wait
         * would sit in the server on a connection nobody closes); one that comes after closes the
         * socket that carries it, which ends the wait in the server.
         */
        private Object sendAndRead(byte[]... args) {
            Connection connection = jedis.getConnection();
            synchronized (this) {
                if (done.get()) {
                    throw new DLockConnectionException("the wait's connection was closed before its command was sent", null);
                }
                connection.setTimeoutInfinite();
                connection.sendCommand(new Raw(args[0]), rest(args));
            }
            Object value = connection.getOne();
            connection.rollbackTimeout();
            return value;
        }

        /** The waiting thread reads the reply itself: the grant wakes it, no other thread. */
        @Override
        public boolean sendsOnCaller() {
            return true;
        }

        @Override
        public Object sendOnCaller(byte[]... args) {
            try {
                return sendAndRead(args);
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
            boolean first;
            synchronized (this) {
                first = done.compareAndSet(false, true);
            }
            if (first) {
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
        if (owned != null) {
            owned.close();
        }
    }
}
