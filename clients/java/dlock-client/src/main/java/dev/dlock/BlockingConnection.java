package dev.dlock;

import java.util.concurrent.CompletableFuture;

/**
 * A connection that carries one blocking command at a time, so that a wait in the server never
 * delays another command. The client ends a wait early with {@code CLIENT UNBLOCK} on the shared
 * connection (hence {@link #clientId()}), or by {@link #discard() closing} this one.
 */
public interface BlockingConnection {

    /** @return the server's id of this connection ({@code CLIENT ID}) */
    long clientId();

    /**
     * Sends a command; the future completes with its reply. Must not be called again before the
     * previous reply arrived.
     *
     * @param args the command name and its arguments
     * @return the reply, decoded as for {@link Transport#call}
     */
    CompletableFuture<Object> send(byte[]... args);

    /**
     * Whether {@link #sendOnCaller} waits on the calling thread (a synchronous library's blocking
     * read). The client uses it for a wait that nothing but the reply can end (an uninterruptible
     * wait without a timeout: {@code lock()}), so the waiting thread is woken by the reply itself.
     *
     * @return false by default
     */
    default boolean sendsOnCaller() {
        return false;
    }

    /**
     * Sends a command and reads its reply on the calling thread, with no read timeout; only called
     * when {@link #sendsOnCaller()} says true. Failures are thrown as {@link #send} would complete
     * its future.
     *
     * @param args the command name and its arguments
     * @return the reply
     */
    default Object sendOnCaller(byte[]... args) {
        throw new UnsupportedOperationException("this connection sends from its own threads");
    }

    /** Gives the connection back for reuse: its last command has been answered. */
    void recycle();

    /** Closes the connection: a reply may still be due, so it is never reused. Idempotent. */
    void discard();
}
