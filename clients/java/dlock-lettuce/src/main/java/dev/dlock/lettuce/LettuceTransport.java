package dev.dlock.lettuce;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockServerException;
import dev.dlock.DLockTimeoutException;
import dev.dlock.Transport;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisChannelHandler;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisConnectionStateListener;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SslOptions;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.resource.ClientResources;
import java.net.SocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * dlock over Lettuce (7.x) on one server, or on the master that Redis Sentinel names. dlock uses
 * a {@link RedisClient} of its own, built on the caller's {@link ClientResources} (event loops,
 * DNS, metrics shared with the application's client) and URI (TLS, auth, database, Sentinels),
 * with options that suit lock commands:
 *
 * <ul>
 *   <li>{@code autoReconnect(false)}: Lettuce would re-send queued commands after a reconnect,
 *       and {@code DLOCK.ACQUIRE}, {@code DLOCK.RELEASE}, {@code DLOCK.COUNTDOWN} must never run
 *       twice. A connection that closes fails its pending commands; the next call opens a new
 *       one.
 *   <li>RESP2, and no command timeout from Lettuce: the client bounds each wait itself.
 *   <li>Blocking commands run on connections of their own (pooled, at most {@code
 *       maxIdleBlocking} idle), never on the shared one.
 * </ul>
 *
 * <p><b>Sentinel.</b> With a URI built by {@code RedisURI.Builder.sentinel(host, port, masterId)}
 * (more Sentinels with {@code withSentinel}), every connection dlock opens, the shared one and each
 * new one for a blocking wait, asks a Sentinel for the current master and connects to it. The
 * transport also subscribes to {@code +switch-master} on every Sentinel: when the master changes,
 * it closes its shared and idle blocking connections to any other server (their pending commands
 * fail, and are not re-sent), so that the next command, and every new wait, goes to the new
 * master; a wait blocked on the old master ends at once with a {@code DLockConnectionException}
 * (the old master, until the Sentinel demotes it, could still grant it).
 */
public final class LettuceTransport implements Transport {
    private static final byte[] CLIENT = "CLIENT".getBytes();
    private static final byte[] ID = "ID".getBytes();

    private final RedisClient client;
    private final int maxIdleBlocking;
    private final ConcurrentLinkedDeque<Dedicated> idle = new ConcurrentLinkedDeque<>();
    private final Object sharedLock = new Object();
    private volatile Shared shared;
    /** The shared connection being opened, guarded by {@code sharedLock}; null when none is. */
    private CompletableFuture<Shared> opening;
    /**
     * Opens connections (Lettuce's connect blocks until the server answers the handshake): the
     * callers wait for them only as long as their own bound (R4.6), never on a lock.
     */
    private final ExecutorService connector = Executors.newCachedThreadPool(task -> {
        Thread thread = new Thread(task, "dlock-lettuce-connect");
        thread.setDaemon(true);
        return thread;
    });
    private volatile boolean closed;
    /** Bumped each time Sentinel names a new master (never without Sentinel). */
    private final AtomicInteger generation = new AtomicInteger();
    /** Null without Sentinel. */
    private final SentinelWatch sentinels;
    /** With Sentinel: the blocking connections handed out and not yet given back. */
    private final Set<Dedicated> busy = ConcurrentHashMap.newKeySet();
    /** With Sentinel: the server address of each connection being opened, from the client's events. */
    private final Map<RedisChannelHandler<?, ?>, String> remotes = new ConcurrentHashMap<>();

    /** The shared connection, its server's address (null: unknown) and the {@link #generation} it was opened in. */
    private record Shared(StatefulRedisConnection<byte[], byte[]> connection, String address, int generation) {}

    /** A new connection, its server's address (null without Sentinel, or unknown) and the generation it is current in. */
    private record Opened(StatefulRedisConnection<byte[], byte[]> connection, String address, int generation) {}

    private LettuceTransport(RedisClient client, RedisURI uri, int maxIdleBlocking) {
        this.client = client;
        this.maxIdleBlocking = maxIdleBlocking;
        if (uri.getSentinels().isEmpty()) {
            this.sentinels = null;
        } else {
            client.addListener(new RedisConnectionStateListener() {
                @Override
                public void onRedisConnected(RedisChannelHandler<?, ?> connection, SocketAddress address) {
                    remotes.put(connection, SentinelWatch.address(address));
                }

                @Override
                public void onRedisDisconnected(RedisChannelHandler<?, ?> connection) {
                    remotes.remove(connection);
                }
            });
            this.sentinels = watch(client, uri);
        }
    }

    private SentinelWatch watch(RedisClient client, RedisURI uri) {
        try {
            return SentinelWatch.start(client.getResources(), uri, this::masterChanged);
        } catch (RuntimeException e) {
            client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
            throw e;
        }
    }

    /**
     * Sentinel named a new master: connections to any other server are closed (their pending
     * commands fail, and are not re-sent), waits included. Runs on an event loop, so it takes no lock (a connect
     * may be running under {@code sharedLock}); a connection being opened meanwhile carries the
     * old generation and is checked at its first use.
     */
    private void masterChanged(String master) {
        generation.incrementAndGet();
        Shared current = shared;
        if (current != null && !master.equals(current.address)) {
            current.connection.closeAsync();
        }
        for (Dedicated connection : idle) {
            if (!master.equals(connection.address) && idle.remove(connection)) {
                connection.connection.closeAsync();
            }
        }
        // A wait on the old master could still be granted there (a stale grant): it ends now, with
        // a connection error, and the client settles it as it does for any lost wait connection.
        for (Dedicated connection : busy) {
            if (!master.equals(connection.address)) {
                connection.connection.closeAsync();
            }
        }
    }

    /**
     * @return true when a connection opened in {@code opened} to {@code address} may carry new
     *     commands: no master change since, or it is to the master Sentinel names now
     */
    private boolean current(int opened, String address) {
        return opened == generation.get() || (address != null && address.equals(sentinels.master()));
    }

    /**
     * A transport with resources of its own.
     *
     * @param uri the server (redis://, rediss://, with password and database), or Sentinels and a
     *     master id ({@code RedisURI.Builder.sentinel(host, port, masterId)}, redis-sentinel://)
     * @return the transport
     * @throws DLockConnectionException with Sentinels, when none of them answers
     */
    public static LettuceTransport create(RedisURI uri) {
        RedisClient client = RedisClient.create(uri);
        client.setOptions(options());
        return new LettuceTransport(client, uri, 16);
    }

    /**
     * A transport with resources of its own, over TLS with the application's TLS settings (its
     * trusted CA, client certificate, protocols): for {@code rediss://} URIs ({@link
     * RedisURI.Builder#withSsl(boolean)}) whose server's certificate the JVM's default trust
     * store does not cover. dlock's other connection options stay as {@link #create(RedisURI)}
     * sets them.
     *
     * @param uri the server, with TLS (as for {@link #create(RedisURI)})
     * @param ssl the TLS settings ({@code SslOptions.builder().trustManager(caFile).build()})
     * @return the transport
     * @throws DLockConnectionException with Sentinels, when none of them answers
     */
    public static LettuceTransport create(RedisURI uri, SslOptions ssl) {
        RedisClient client = RedisClient.create(uri);
        client.setOptions(options().mutate().sslOptions(ssl).build());
        return new LettuceTransport(client, uri, 16);
    }

    /**
     * A transport on the application's event loops.
     *
     * @param resources the application's client resources ({@code redisClient.getResources()})
     * @param uri the server, or Sentinels and a master id (as for {@link #create(RedisURI)})
     * @return the transport (closing it leaves the resources alone)
     * @throws DLockConnectionException with Sentinels, when none of them answers
     */
    public static LettuceTransport create(ClientResources resources, RedisURI uri) {
        RedisClient client = RedisClient.create(resources, uri);
        client.setOptions(options());
        return new LettuceTransport(client, uri, 16);
    }

    /** @return the options dlock's connections use */
    static ClientOptions options() {
        return ClientOptions.builder()
                .autoReconnect(false)
                .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
                .protocolVersion(ProtocolVersion.RESP2)
                .timeoutOptions(TimeoutOptions.builder().timeoutCommands(false).build())
                .build();
    }

    /** @return the shared connection when it is open and current, else null */
    private StatefulRedisConnection<byte[], byte[]> usableShared() {
        Shared current = shared;
        if (current != null && current.generation == generation.get() && current.connection.isOpen()) {
            return current.connection;
        }
        return null;
    }

    /**
     * The shared connection, opened if needed (on the connector: a caller waits for it only as
     * long as it wants to, and several callers share one connect).
     */
    private CompletableFuture<StatefulRedisConnection<byte[], byte[]>> sharedAsync() {
        StatefulRedisConnection<byte[], byte[]> usable = usableShared();
        if (usable != null) {
            return CompletableFuture.completedFuture(usable);
        }
        synchronized (sharedLock) {
            if (closed) {
                return CompletableFuture.failedFuture(new DLockConnectionException("transport closed", null));
            }
            Shared current = shared;
            int now = generation.get();
            if (current != null && current.connection.isOpen() && current(current.generation, current.address)) {
                // Sentinel named a new master, and this connection is to it already.
                shared = new Shared(current.connection, current.address, now);
                return CompletableFuture.completedFuture(current.connection);
            }
            CompletableFuture<Shared> pending = opening;
            if (pending == null) {
                if (current != null) {
                    current.connection.closeAsync();
                    shared = null;
                }
                CompletableFuture<Shared> connecting = new CompletableFuture<>();
                opening = connecting;
                pending = connecting;
                try {
                    connector.execute(() -> {
                        try {
                            Opened opened = connect();
                            connecting.complete(new Shared(opened.connection, opened.address, opened.generation));
                        } catch (Throwable e) {
                            connecting.completeExceptionally(translate(e));
                        }
                    });
                } catch (RuntimeException e) {
                    connecting.completeExceptionally(translate(e));
                }
                connecting.whenComplete((opened, error) -> {
                    synchronized (sharedLock) {
                        if (opening == connecting) {
                            opening = null;
                        }
                        if (opened != null) {
                            if (closed) {
                                opened.connection.closeAsync();
                            } else {
                                shared = opened;
                            }
                        }
                    }
                });
            }
            return pending.thenApply(Shared::connection);
        }
    }

    /**
     * Connects to the server, or (with Sentinels) to the master a Sentinel names now. A connect
     * that resolved the old master just before a switch was announced is made again.
     */
    private Opened connect() {
        for (int attempt = 1; ; attempt++) {
            int now = generation.get();
            StatefulRedisConnection<byte[], byte[]> connection;
            try {
                connection = client.connect(ByteArrayCodec.INSTANCE);
            } catch (RuntimeException e) {
                throw new DLockConnectionException("cannot connect: " + e.getMessage(), e);
            }
            connection.setTimeout(Duration.ofDays(365));
            String address = remotes.remove(connection);
            if (current(now, address) || attempt == 3) {
                return new Opened(connection, address, now);
            }
            connection.closeAsync();
        }
    }

    static CompletableFuture<Object> dispatch(StatefulRedisConnection<byte[], byte[]> connection, byte[]... args) {
        CommandArgs<byte[], byte[]> commandArgs = new CommandArgs<>(ByteArrayCodec.INSTANCE);
        for (int i = 1; i < args.length; i++) {
            commandArgs.add(args[i]);
        }
        CompletableFuture<Object> reply;
        // Lettuce may refuse to write from a thread whose interrupt flag is set; an interrupted
        // caller (a cancelled wait releasing its grant) must still be able to send.
        boolean interrupted = Thread.interrupted();
        try {
            reply = connection.async().dispatch(new RawCommand(args[0]), new ReplyOutput(), commandArgs)
                    .toCompletableFuture();
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(translate(e));
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        CompletableFuture<Object> out = new CompletableFuture<>();
        reply.whenComplete((value, error) -> {
            if (error == null) {
                out.complete(value);
            } else {
                out.completeExceptionally(translate(error));
            }
        });
        return out;
    }

    static RuntimeException translate(Throwable error) {
        while ((error instanceof CompletionException || error instanceof ExecutionException) && error.getCause() != null) {
            error = error.getCause();
        }
        if (error instanceof RedisCommandExecutionException) {
            return DLockServerException.of(error.getMessage());
        }
        if (error instanceof DLockServerException || error instanceof DLockConnectionException) {
            return (RuntimeException) error;
        }
        return new DLockConnectionException(String.valueOf(error.getMessage()), error);
    }

    @Override
    public void prepare(byte[] routingKey) {
        prepare(routingKey, System.nanoTime() + OPEN_BOUND_NANOS);
    }

    /** Waits for the shared connection's connect until {@code deadlineNanos}, no longer. */
    @Override
    public void prepare(byte[] routingKey, long deadlineNanos) {
        if (usableShared() != null) {
            return;
        }
        CompletableFuture<StatefulRedisConnection<byte[], byte[]>> connecting = sharedAsync();
        try {
            Transport.awaitBy(connecting, deadlineNanos);
        } catch (TimeoutException e) {
            // The command waits for the connect; its caller bounds that wait.
        } catch (ExecutionException e) {
            throw translate(e.getCause());
        }
    }

    /** How long an open without a bound of the caller's may take (a connect, then CLIENT ID). */
    private static final long OPEN_BOUND_NANOS = TimeUnit.SECONDS.toNanos(20);

    @Override
    public CompletableFuture<Object> call(byte[] routingKey, byte[]... args) {
        StatefulRedisConnection<byte[], byte[]> connection = usableShared();
        if (connection != null) {
            return dispatch(connection, args);
        }
        return sharedAsync().thenCompose(opened -> dispatch(opened, args));
    }

    @Override
    public List<CompletableFuture<Object>> callAll(List<Command> commands) {
        // Lettuce writes each command as it is dispatched without waiting for earlier replies:
        // commands issued back to back on the shared connection are pipelined.
        List<CompletableFuture<Object>> replies = new ArrayList<>(commands.size());
        StatefulRedisConnection<byte[], byte[]> connection = usableShared();
        if (connection != null) {
            for (Command command : commands) {
                replies.add(dispatch(connection, command.args()));
            }
            return replies;
        }
        for (int i = 0; i < commands.size(); i++) {
            replies.add(new CompletableFuture<>());
        }
        // Once connected, dispatched in order (one callback: dependents of a future run in no
        // fixed order).
        sharedAsync().whenComplete((opened, error) -> {
            for (int i = 0; i < commands.size(); i++) {
                CompletableFuture<Object> reply = replies.get(i);
                if (error != null) {
                    reply.completeExceptionally(translate(error));
                } else {
                    dispatch(opened, commands.get(i).args()).whenComplete((value, failure) -> {
                        if (failure == null) {
                            reply.complete(value);
                        } else {
                            reply.completeExceptionally(failure);
                        }
                    });
                }
            }
        });
        return replies;
    }

    @Override
    public BlockingConnection openBlocking(byte[] routingKey) {
        return openBlocking(routingKey, System.nanoTime() + OPEN_BOUND_NANOS);
    }

    @Override
    public BlockingConnection openBlocking(byte[] routingKey, long deadlineNanos) {
        while (true) {
            Dedicated connection = idle.pollFirst();
            if (connection == null) {
                connection = openBy(deadlineNanos);
            } else if (!connection.connection.isOpen() || !current(connection.generation, connection.address)) {
                connection.connection.closeAsync();
                continue;
            }
            if (sentinels == null) {
                return connection;
            }
            // Registered before it is checked again: a switch announced from now on closes it.
            busy.add(connection);
            if (current(connection.generation, connection.address)) {
                return connection;
            }
            busy.remove(connection);
            connection.connection.closeAsync();
        }
    }

    /**
     * Opens a new wait connection on the connector, waiting for it until {@code deadlineNanos}: a
     * connection that comes later joins the idle ones.
     */
    private Dedicated openBy(long deadlineNanos) {
        CompletableFuture<Dedicated> opening = new CompletableFuture<>();
        try {
            connector.execute(() -> {
                try {
                    opening.complete(open());
                } catch (Throwable e) {
                    opening.completeExceptionally(e);
                }
            });
        } catch (RuntimeException e) {
            throw translate(e);
        }
        try {
            return Transport.awaitBy(opening, deadlineNanos);
        } catch (TimeoutException e) {
            opening.thenAccept(Dedicated::recycle);
            throw new DLockTimeoutException("no connection in time: the server does not answer");
        } catch (ExecutionException e) {
            throw translate(e.getCause());
        }
    }

    private Dedicated open() {
        Opened opened = connect();
        StatefulRedisConnection<byte[], byte[]> fresh = opened.connection;
        try {
            Object id = dispatch(fresh, CLIENT, ID).get(10, TimeUnit.SECONDS);
            return new Dedicated(fresh, opened.address, (Long) id, opened.generation);
        } catch (Exception e) {
            fresh.closeAsync();
            throw translate(e);
        }
    }

    private final class Dedicated implements BlockingConnection {
        final StatefulRedisConnection<byte[], byte[]> connection;
        final String address;
        final long id;
        final int generation;

        Dedicated(StatefulRedisConnection<byte[], byte[]> connection, String address, long id, int generation) {
            this.connection = connection;
            this.address = address;
            this.id = id;
            this.generation = generation;
        }

        @Override
        public long clientId() {
            return id;
        }

        @Override
        public CompletableFuture<Object> send(byte[]... args) {
            return dispatch(connection, args);
        }

        @Override
        public void recycle() {
            if (sentinels != null) {
                busy.remove(this);
            }
            if (closed || !connection.isOpen() || !current(generation, address) || idle.size() >= maxIdleBlocking) {
                connection.closeAsync();
            } else {
                idle.addFirst(this);
            }
        }

        @Override
        public void discard() {
            if (sentinels != null) {
                busy.remove(this);
            }
            connection.closeAsync();
        }
    }

    @Override
    public void close() {
        closed = true;
        Dedicated connection;
        while ((connection = idle.pollFirst()) != null) {
            connection.connection.close();
        }
        synchronized (sharedLock) {
            if (shared != null) {
                shared.connection.close();
                shared = null;
            }
        }
        connector.shutdownNow();
        if (sentinels != null) {
            sentinels.close();
        }
        // Shuts down the event loops only when this transport created them.
        client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
    }
}
