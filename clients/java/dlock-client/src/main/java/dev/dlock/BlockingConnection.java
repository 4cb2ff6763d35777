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

    /** Gives the connection back for reuse: its last command has been answered. */
    void recycle();

    /** Closes the connection: a reply may still be due, so it is never reused. Idempotent. */
    void discard();
}
