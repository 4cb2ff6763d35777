package dev.dlock;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/** One granted hold (on one key, or on every key of a multi-lock) under the watchdog's care. */
final class Hold {
    final DLockClient client;
    final List<String> keys;
    final byte[][] keyBytes;
    final String owner;
    final long[] tokens;
    final boolean shared;
    final boolean renewed;
    volatile long ttlMs;
    volatile int serverHolds;

    // Watchdog state, guarded by this.
    long deadlineNanos;
    boolean dated;
    long nextRenewalNanos;
    long periodNanos;
    boolean inFlight;

    private final CompletableFuture<LostReason> lost = new CompletableFuture<>();
    private final AtomicBoolean released = new AtomicBoolean();
    private volatile LostReason lostReason;

    Hold(DLockClient client, List<String> keys, String owner, long[] tokens, int serverHolds,
            boolean shared, long ttlMs, boolean renewed) {
        this.client = client;
        this.keys = keys;
        this.keyBytes = new byte[keys.size()][];
        for (int i = 0; i < keys.size(); i++) {
            keyBytes[i] = Bytes.of(keys.get(i));
        }
        this.owner = owner;
        this.tokens = tokens;
        this.serverHolds = serverHolds;
        this.shared = shared;
        this.ttlMs = ttlMs;
        this.renewed = renewed;
    }

    /** A grant or renewal sent at {@code sentNanos} succeeded: the lease runs from then. */
    synchronized void confirmed(long sentNanos, long ttl) {
        this.ttlMs = ttl;
        long lease = ttl * 1_000_000L;
        this.deadlineNanos = sentNanos + lease - client.config().marginNanos(ttl);
        this.dated = true;
        this.periodNanos = Math.max(1_000_000L, lease / client.config().renewDivisor());
        this.nextRenewalNanos = sentNanos + periodNanos;
        this.inFlight = false;
    }

    /**
     * A grant after a wait: the server's lease began between the send and the reply, at a time the
     * client does not know, so the lease counts from the moment the reply was read (R3.2).
     */
    synchronized void grantedAfterWait(long receivedNanos, long ttl) {
        confirmed(receivedNanos, ttl);
    }

    /** The owner's token changed (an upgrade): renewals answer with the new one. */
    synchronized void retoken(long token) {
        tokens[0] = token;
    }

    synchronized long token(int i) {
        return tokens[i];
    }

    /** Looks at the hold (R3.2: at every look, the local deadline included). */
    boolean isLost() {
        lookAtDeadline();
        return lostReason != null;
    }

    LostReason lostReason() {
        return lostReason;
    }

    boolean isReleased() {
        return released.get();
    }

    /** Looks at the hold (R3.2: at every look, the local deadline included). */
    boolean isLive() {
        lookAtDeadline();
        return isLiveAsKnown();
    }

    /**
     * Neither lost nor released as far as recorded, without looking at the deadline: for callers
     * inside a map's compute, where the lost event's callbacks must not run.
     */
    boolean isLiveAsKnown() {
        return lostReason == null && !released.get();
    }

    /**
     * R3.2: a hold past its local deadline is lost at once, at the first look, whether or not the
     * watchdog's thread (which a loaded machine may keep off the CPU) has noticed yet: a holder
     * that checks its guard before it writes never sees it held once its deadline has passed.
     */
    private void lookAtDeadline() {
        if (lostReason == null && !released.get() && pastDeadline(System.nanoTime())) {
            markLost(LostReason.DEADLINE);
        }
    }

    CompletableFuture<LostReason> lostFuture() {
        return lost;
    }

    /** Marks the hold lost (once, unless released first) and delivers the event. */
    void markLost(LostReason reason) {
        synchronized (this) {
            if (lostReason != null || released.get()) {
                return;
            }
            lostReason = reason;
        }
        client.watchdog().unwatch(this);
        lost.complete(reason);
    }

    /**
     * A release that the server answered NOTOWNER (R3.5): the hold was gone before the watchdog
     * noticed; it counts as lost even though it is being released.
     */
    void lostAtRelease(LostReason reason) {
        synchronized (this) {
            if (lostReason != null) {
                return;
            }
            lostReason = reason;
        }
        client.watchdog().unwatch(this);
        lost.complete(reason);
    }

    /** @return true the first time only */
    boolean markReleased() {
        if (released.compareAndSet(false, true)) {
            client.watchdog().unwatch(this);
            return true;
        }
        return false;
    }

    /** The local deadline has passed with no renewal confirmed. */
    synchronized boolean pastDeadline(long now) {
        return dated && now - deadlineNanos >= 0;
    }

    /**
     * A renewal sent at {@code sentNanos} succeeded: the lease runs from then, unless its reply
     * came after the local deadline (R3.2: no renewal succeeded before it; R3.3: lost for good).
     *
     * @return false when the hold was past its deadline (the caller marks it lost)
     */
    synchronized boolean renewed(long sentNanos, long ttl) {
        if (pastDeadline(System.nanoTime())) {
            return false;
        }
        confirmed(sentNanos, ttl);
        return true;
    }
}
