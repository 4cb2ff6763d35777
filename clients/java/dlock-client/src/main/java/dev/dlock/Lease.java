package dev.dlock;

import java.util.List;
import java.util.concurrent.CompletionStage;

/**
 * A hold not tied to a thread (the handle API, for async code and virtual threads): its own
 * owner, renewed by the client's watchdog until {@link #close()}. Use it in try-with-resources.
 *
 * <pre>{@code
 * try (Lease lease = lock.acquire(Duration.ofSeconds(5))) {
 *     lease.lost().thenRun(worker::stop);
 *     write(order, lease.token());
 * }
 * }</pre>
 */
public final class Lease implements AutoCloseable {
    private final Hold hold;

    Lease(Hold hold) {
        this.hold = hold;
    }

    /** @return the fencing token of the (first) key; larger for every new hold of the key */
    public long token() {
        return hold.token(0);
    }

    /** @return one fencing token per key, in the order of {@link #keys()} */
    public long[] tokens() {
        return hold.tokens.clone();
    }

    /** @return the (first) key */
    public String key() {
        return hold.keys.get(0);
    }

    /** @return every key of the hold */
    public List<String> keys() {
        return hold.keys;
    }

    /** @return the owner on the wire (a UUID per acquisition) */
    public String owner() {
        return hold.owner;
    }

    /** @return the hold count the server reported at the grant (1 for a new hold) */
    public int holds() {
        return hold.serverHolds;
    }

    /** @return the lease in milliseconds */
    public long leaseMillis() {
        return hold.ttlMs;
    }

    /** @return true while not lost and not closed */
    public boolean isValid() {
        return hold.isLive();
    }

    /** @return true while not lost and not closed (the same as {@link #isValid()}) */
    public boolean isHeld() {
        return hold.isLive();
    }

    /**
     * Completes once, with the reason, when the hold is lost (never after {@link #close()}).
     * When it completes, stop: another client may hold the lock already.
     *
     * @return the lost event
     */
    public CompletionStage<LostReason> lost() {
        return hold.lostFuture().minimalCompletionStage();
    }

    /**
     * Renews the lease now ({@code DLOCK.RENEW} on every key) to {@code lease} from now (a fixed
     * lease is then not renewed again by the watchdog; a renewed one goes on at its own lease).
     *
     * @param lease the new lease (1 ms to 2^53-1 ms, else {@link IllegalArgumentException})
     * @throws LockLostException when the hold is lost (now or before), or was released
     */
    public void renew(java.time.Duration lease) {
        if (!hold.client.renewNow(hold, Arguments.leaseMs(lease))) {
            throw new LockLostException(key(), hold.lostReason() == null ? LostReason.NOT_OWNER : hold.lostReason());
        }
    }

    /**
     * Stops watching the hold without releasing it: the server ends it when its lease ends
     * (ShedLock's {@code lockAtLeastFor}). Afterwards the lease is neither valid nor lost.
     */
    public void abandon() {
        hold.markReleased();
    }

    /**
     * Releases the hold ({@code DLOCK.RELEASE} on every key); idempotent. A lost hold's release is
     * still sent, in case the server kept it, and reports nothing.
     */
    @Override
    public void close() {
        hold.client.release(hold);
    }

    Hold hold() {
        return hold;
    }

    @Override
    public String toString() {
        return "Lease[" + hold.keys + " owner=" + hold.owner + " token=" + hold.tokens[0]
                + (hold.lostReason() != null ? " lost=" + hold.lostReason() : "") + (hold.isReleased() ? " released" : "") + "]";
    }
}
