package dev.dlock;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * How the client reaches Redis: a multiplexed call for commands that answer at once, and
 * connections of their own for commands that block in the server.
 *
 * <p>Replies are decoded as {@link Long} (integer), {@code byte[]} (bulk or simple string),
 * {@link List} of replies (array), or {@code null}. An error reply completes the future
 * exceptionally with a {@link DLockServerException} (see {@link DLockServerException#of});
 * a connection failure with a {@link DLockConnectionException}.
 *
 * <p>A transport must never re-send a command on its own (after a reconnect, for example):
 * {@code DLOCK.ACQUIRE}, {@code DLOCK.FAIR}, {@code DLOCK.MACQUIRE}, {@code DLOCK.RELEASE} and
 * {@code DLOCK.COUNTDOWN} are not idempotent.
 */
public interface Transport extends AutoCloseable {

    /**
     * Waits for {@code future} until {@code deadlineNanos} ({@link System#nanoTime()}), no longer:
     * how a transport bounds a step whose own timeouts it does not control (a connect, a
     * handshake, a topology refresh). An interrupt does not end the wait, which already has its
     * bound; the thread's interrupt flag is set again on return, so that the wait that follows
     * sees it at once.
     *
     * @param future what is awaited
     * @param deadlineNanos the deadline, on the {@code System.nanoTime()} clock
     * @param <T> the future's value
     * @return the future's value
     * @throws TimeoutException when the deadline passes first (the future is left as it is)
     * @throws ExecutionException when the future failed
     */
    static <T> T awaitBy(CompletableFuture<T> future, long deadlineNanos)
            throws TimeoutException, ExecutionException {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return future.get(Math.max(0, deadlineNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Sends one command on the shared, multiplexed connection.
     *
     * @param routingKey the key that decides the node in a Cluster
     * @param args the command name and its arguments
     * @return the reply
     */
    CompletableFuture<Object> call(byte[] routingKey, byte[]... args);

    /**
     * Whether {@link #callOnCaller} does the round trip on the calling thread. A transport over a
     * synchronous library (Jedis) says yes: the client then calls it instead of waiting for
     * {@link #call}'s future, which saves handing each command to another thread and its reply
     * back (two thread switches, on the path of every lock hand-off).
     *
     * @return false by default
     */
    default boolean callsOnCaller() {
        return false;
    }

    /**
     * Sends one command on the shared connection (or one of its pool) and reads its reply on the
     * calling thread; only called when {@link #callsOnCaller()} says true. Failures are thrown as
     * {@link #call} would complete its future; a reply that does not come within the transport's
     * read timeout is a {@link DLockConnectionException}.
     *
     * @param routingKey the key that decides the node in a Cluster
     * @param args the command name and its arguments
     * @return the reply
     */
    default Object callOnCaller(byte[] routingKey, byte[]... args) {
        throw new UnsupportedOperationException("this transport sends from its own threads");
    }

    /**
     * Sends several commands together (pipelined where the transport can); each has its own
     * future, in the order given.
     *
     * @param commands each command's routing key and arguments
     * @return one future per command
     */
    default List<CompletableFuture<Object>> callAll(List<Command> commands) {
        List<CompletableFuture<Object>> replies = new ArrayList<>(commands.size());
        for (Command command : commands) {
            replies.add(call(command.routingKey(), command.args()));
        }
        return replies;
    }

    /**
     * Makes sure the shared connection to the node of {@code routingKey} is open, connecting if
     * needed, so that the time the client records as a command's send (the start of its lease on
     * the client's clock) is not taken before a slow connect. A hint: the default does nothing.
     *
     * @param routingKey the key that decides the node in a Cluster
     */
    default void prepare(byte[] routingKey) {}

    /**
     * {@link #prepare(byte[])}, waiting for a connect until {@code deadlineNanos} at the latest
     * (System.nanoTime); past it, the command is sent (or fails) as the transport can. The default
     * calls {@link #prepare(byte[])}.
     *
     * @param routingKey the key that decides the node in a Cluster
     * @param deadlineNanos when the caller's bound ends
     */
    default void prepare(byte[] routingKey, long deadlineNanos) {
        prepare(routingKey);
    }

    /**
     * Opens (or takes from a pool) a connection reserved for one blocking command, on the node
     * that serves {@code routingKey}. Blocks the calling thread while connecting.
     *
     * @param routingKey the key that decides the node in a Cluster
     * @return a connection whose {@link BlockingConnection#clientId()} is known
     */
    BlockingConnection openBlocking(byte[] routingKey);

    /**
     * {@link #openBlocking(byte[])} by {@code deadlineNanos} (System.nanoTime) at the latest, else
     * a {@link DLockTimeoutException}: a stalled server that does not answer a new connection's
     * handshake must not hold the caller past its bound (R4.6). The default relies on the
     * library's own connect and read timeouts.
     *
     * @param routingKey the key that decides the node in a Cluster
     * @param deadlineNanos when the caller's bound ends
     * @return a connection whose {@link BlockingConnection#clientId()} is known
     */
    default BlockingConnection openBlocking(byte[] routingKey, long deadlineNanos) {
        return openBlocking(routingKey);
    }

    /** Closes every connection this transport opened. */
    @Override
    void close();

    /**
     * One command of a {@link #callAll} batch.
     *
     * @param routingKey the key that decides the node in a Cluster
     * @param args the command name and its arguments
     */
    record Command(byte[] routingKey, byte[][] args) {}
}
