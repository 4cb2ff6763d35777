package dev.dlock.lettuce;

import dev.dlock.BlockingConnection;
import dev.dlock.DLockConnectionException;
import dev.dlock.DLockServerException;
import dev.dlock.Transport;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.TimeoutOptions;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.resource.ClientResources;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * dlock over Lettuce (7.x) on one server. dlock uses a {@link RedisClient} of its own, built on
 * the caller's {@link ClientResources} (event loops, DNS, metrics shared with the application's
 * client) and URI (TLS, auth, database), with options that suit lock commands:
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
 */
public final class LettuceTransport implements Transport {
    private static final byte[] CLIENT = "CLIENT".getBytes();
    private static final byte[] ID = "ID".getBytes();

    private final RedisClient client;
    private final int maxIdleBlocking;
    private final ConcurrentLinkedDeque<Dedicated> idle = new ConcurrentLinkedDeque<>();
    private final Object sharedLock = new Object();
    private volatile StatefulRedisConnection<byte[], byte[]> shared;
    private volatile boolean closed;

    private LettuceTransport(RedisClient client, int maxIdleBlocking) {
        this.client = client;
        this.maxIdleBlocking = maxIdleBlocking;
    }

    /**
     * A transport with resources of its own.
     *
     * @param uri the server (redis://, rediss://, with password and database)
     * @return the transport
     */
    public static LettuceTransport create(RedisURI uri) {
        RedisClient client = RedisClient.create(uri);
        client.setOptions(options());
        return new LettuceTransport(client, 16);
    }

    /**
     * A transport on the application's event loops.
     *
     * @param resources the application's client resources ({@code redisClient.getResources()})
     * @param uri the server
     * @return the transport (closing it leaves the resources alone)
     */
    public static LettuceTransport create(ClientResources resources, RedisURI uri) {
        RedisClient client = RedisClient.create(resources, uri);
        client.setOptions(options());
        return new LettuceTransport(client, 16);
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

    private StatefulRedisConnection<byte[], byte[]> shared() {
        StatefulRedisConnection<byte[], byte[]> connection = shared;
        if (connection != null && connection.isOpen()) {
            return connection;
        }
        synchronized (sharedLock) {
            if (closed) {
                throw new IllegalStateException("transport closed");
            }
            if (shared == null || !shared.isOpen()) {
                if (shared != null) {
                    shared.closeAsync();
                }
                shared = connect();
            }
            return shared;
        }
    }

    private StatefulRedisConnection<byte[], byte[]> connect() {
        try {
            StatefulRedisConnection<byte[], byte[]> connection = client.connect(ByteArrayCodec.INSTANCE);
            connection.setTimeout(Duration.ofDays(365));
            return connection;
        } catch (RuntimeException e) {
            throw new DLockConnectionException("cannot connect: " + e.getMessage(), e);
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
        shared();
    }

    @Override
    public CompletableFuture<Object> call(byte[] routingKey, byte[]... args) {
        StatefulRedisConnection<byte[], byte[]> connection;
        try {
            connection = shared();
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(translate(e));
        }
        return dispatch(connection, args);
    }

    @Override
    public List<CompletableFuture<Object>> callAll(List<Command> commands) {
        // Lettuce writes each command as it is dispatched without waiting for earlier replies:
        // commands issued back to back on the shared connection are pipelined.
        List<CompletableFuture<Object>> replies = new ArrayList<>(commands.size());
        StatefulRedisConnection<byte[], byte[]> connection;
        try {
            connection = shared();
        } catch (RuntimeException e) {
            for (int i = 0; i < commands.size(); i++) {
                replies.add(CompletableFuture.failedFuture(translate(e)));
            }
            return replies;
        }
        for (Command command : commands) {
            replies.add(dispatch(connection, command.args()));
        }
        return replies;
    }

    @Override
    public BlockingConnection openBlocking(byte[] routingKey) {
        Dedicated connection;
        while ((connection = idle.pollFirst()) != null) {
            if (connection.connection.isOpen()) {
                return connection;
            }
            connection.connection.closeAsync();
        }
        StatefulRedisConnection<byte[], byte[]> fresh = connect();
        try {
            Object id = dispatch(fresh, CLIENT, ID).get(10, TimeUnit.SECONDS);
            return new Dedicated(fresh, (Long) id);
        } catch (Exception e) {
            fresh.closeAsync();
            throw translate(e);
        }
    }

    private final class Dedicated implements BlockingConnection {
        final StatefulRedisConnection<byte[], byte[]> connection;
        final long id;

        Dedicated(StatefulRedisConnection<byte[], byte[]> connection, long id) {
            this.connection = connection;
            this.id = id;
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
            if (closed || !connection.isOpen() || idle.size() >= maxIdleBlocking) {
                connection.closeAsync();
            } else {
                idle.addFirst(this);
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
        Dedicated connection;
        while ((connection = idle.pollFirst()) != null) {
            connection.connection.close();
        }
        synchronized (sharedLock) {
            if (shared != null) {
                shared.close();
                shared = null;
            }
        }
        // Shuts down the event loops only when this transport created them.
        client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
    }
}
