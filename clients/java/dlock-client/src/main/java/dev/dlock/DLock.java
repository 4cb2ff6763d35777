package dev.dlock;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Lock;

/**
 * A distributed lock with two faces.
 *
 * <p><b>The thread-owned facade</b> (Redisson's {@code RLock}): {@link #lock()}, {@link
 * #tryLock()}, {@link #unlock()} and friends act for the calling thread. Re-entry by the same
 * thread is counted in the server under the same owner; the owner on the wire is a UUID per
 * acquisition, never a thread id. Without a lease the hold is renewed by the watchdog; with one
 * ({@code lock(leaseTime, unit)}) it ends after it. {@code unlock()} by a thread that holds
 * nothing throws {@link IllegalMonitorStateException}; on a hold that was lost it throws {@link
 * LockLostException} (a subclass), after the lost event was delivered.
 *
 * <p><b>The handle API</b>, not tied to threads: {@link #acquire(Duration)}, {@link
 * #tryAcquire()}, {@link #acquireAsync(Duration)} return a {@link Lease} with its own owner.
 */
public interface DLock extends Lock {

    /** @return the (first) key */
    String getName();

    /**
     * Takes the lock for the calling thread, waiting as long as needed, with a fixed lease that
     * is not renewed.
     *
     * @param leaseTime the lease
     * @param unit its unit
     */
    void lock(long leaseTime, TimeUnit unit);

    /**
     * As {@link #lock(long, TimeUnit)}, but an interrupt ends the wait, leaving no waiter and no
     * hold in the server.
     *
     * @param leaseTime the lease
     * @param unit its unit
     * @throws InterruptedException when interrupted while waiting
     */
    void lockInterruptibly(long leaseTime, TimeUnit unit) throws InterruptedException;

    /**
     * Tries to take the lock within {@code waitTime}, with a fixed lease (not renewed).
     *
     * @param waitTime the longest wait (0: one try)
     * @param leaseTime the lease
     * @param unit the unit of both
     * @return true when granted
     * @throws InterruptedException when interrupted while waiting
     */
    boolean tryLock(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException;

    /** @return true when any owner holds the lock now (asks the server) */
    boolean isLocked();

    /** @return true when the calling thread holds the lock and it was not lost */
    boolean isHeldByCurrentThread();

    /** @return the calling thread's hold count (0 when it holds nothing) */
    int getHoldCount();

    /**
     * @return the fencing token of the calling thread's hold
     * @throws IllegalMonitorStateException when the thread does not hold the lock
     */
    long getToken();

    /**
     * Renews the calling thread's hold now, to its lease (the watchdog does this on its own; this
     * is for fixed leases and for registries that renew by hand).
     *
     * @throws IllegalMonitorStateException when the thread does not hold the lock
     * @throws LockLostException when the hold turns out lost
     */
    void renew();

    /**
     * @return the lost event of the calling thread's hold (completes once, with the reason)
     * @throws IllegalMonitorStateException when the thread does not hold the lock
     */
    CompletionStage<LostReason> lostByCurrentThread();

    /**
     * Takes a hold of its own (a new owner), waiting as long as needed.
     *
     * @return the lease, renewed until closed
     * @throws InterruptedException when interrupted while waiting (nothing is left held)
     */
    Lease acquire() throws InterruptedException;

    /**
     * Takes a hold of its own, waiting at most {@code wait}.
     *
     * @param wait the longest wait ({@link Duration#ZERO}: one try)
     * @return the lease, renewed until closed
     * @throws LockBusyException when not granted within the wait
     * @throws InterruptedException when interrupted while waiting (nothing is left held)
     */
    Lease acquire(Duration wait) throws InterruptedException;

    /**
     * Takes a hold of its own with a fixed lease that the watchdog does not renew (it is reported
     * lost when the lease ends unless {@link Lease#renew} extends it), waiting at most {@code wait}.
     *
     * @param wait the longest wait ({@link Duration#ZERO}: one try)
     * @param lease the lease
     * @return the lease
     * @throws LockBusyException when not granted within the wait
     * @throws InterruptedException when interrupted while waiting (nothing is left held)
     */
    Lease acquire(Duration wait, Duration lease) throws InterruptedException;

    /**
     * Takes a hold of its own with a fixed lease (not renewed) if it is granted at once.
     *
     * @param lease the lease
     * @return the lease, or empty
     */
    Optional<Lease> tryAcquire(Duration lease);

    /**
     * Takes a hold with every option spelled out.
     *
     * @param options the wait, lease, owner and SESSION
     * @return the lease
     * @throws LockBusyException when not granted within the wait
     * @throws InterruptedException when interrupted while waiting (nothing is left held)
     */
    Lease acquire(AcquireOptions options) throws InterruptedException;

    /**
     * {@link #acquire(AcquireOptions)} in the background; cancelling the future ends the wait.
     *
     * @param options the wait, lease, owner and SESSION
     * @return the lease
     */
    CompletableFuture<Lease> acquireAsync(AcquireOptions options);

    /**
     * Takes a hold of its own if it is granted at once.
     *
     * @return the lease, or empty
     */
    Optional<Lease> tryAcquire();

    /**
     * Takes a hold of its own in the background. Cancelling the future ends the wait in the
     * server ({@code CLIENT UNBLOCK}) and releases a grant that raced the cancellation.
     *
     * @param wait the longest wait
     * @return the lease, or a {@link LockBusyException} when not granted within the wait
     */
    CompletableFuture<Lease> acquireAsync(Duration wait);
}
