package dev.dlock;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * A semaphore: at most {@code permits} holders at once (shared holds with {@code LIMIT}). Each
 * acquisition is a {@link Lease} with its own owner and lease (Redisson's {@code
 * RPermitExpirableSemaphore}, whose permit id is the lease's owner), renewed by the watchdog
 * until closed, so a crashed holder's permit comes back when its lease ends. Waiters are served
 * in order.
 */
public final class DSemaphore {
    private final DLockClient client;
    private final String key;
    private final long permits;

    DSemaphore(DLockClient client, String key, long permits) {
        if (permits < 1) {
            throw new IllegalArgumentException("permits must be at least 1");
        }
        this.client = client;
        this.key = key;
        this.permits = permits;
    }

    /** @return the key */
    public String getName() {
        return key;
    }

    /** @return the number of permits */
    public long permits() {
        return permits;
    }

    private DLockImpl lockFor(long weight) {
        if (weight < 1 || weight > permits) {
            throw new IllegalArgumentException("weight must be within 1.." + permits);
        }
        return new DLockImpl(client, List.of(key), false, true, permits, weight, new ThreadOwners());
    }

    /**
     * Takes one permit, waiting as long as needed.
     *
     * @return the permit
     * @throws InterruptedException when interrupted (nothing is left held)
     */
    public Lease acquire() throws InterruptedException {
        return lockFor(1).acquire();
    }

    /**
     * Takes one permit within {@code wait}.
     *
     * @param wait the longest wait
     * @return the permit
     * @throws LockBusyException when none was granted in time
     * @throws InterruptedException when interrupted (nothing is left held)
     */
    public Lease acquire(Duration wait) throws InterruptedException {
        return lockFor(1).acquire(wait);
    }

    /**
     * Takes {@code weight} permits as one hold ({@code WEIGHT}; needs a server with weighted
     * permits), within {@code wait}.
     *
     * @param weight the permits to take at once
     * @param wait the longest wait
     * @return the hold
     * @throws LockBusyException when not granted in time
     * @throws InterruptedException when interrupted (nothing is left held)
     */
    public Lease acquire(long weight, Duration wait) throws InterruptedException {
        return lockFor(weight).acquire(wait);
    }

    /** @return a permit if one is free now and nobody waits ahead */
    public Optional<Lease> tryAcquire() {
        return lockFor(1).tryAcquire();
    }

    /**
     * @param weight the permits to take at once
     * @return the hold if granted now
     */
    public Optional<Lease> tryAcquire(long weight) {
        return lockFor(weight).tryAcquire();
    }

    /**
     * @param wait the longest wait
     * @return the permit, in the background (cancel to stop waiting)
     */
    public CompletableFuture<Lease> acquireAsync(Duration wait) {
        return lockFor(1).acquireAsync(wait);
    }

    /**
     * Takes {@code weight} permits as one hold with every option spelled out.
     *
     * @param weight the permits to take at once (1 without WEIGHT)
     * @param options the wait, lease, owner and SESSION
     * @return the hold
     * @throws LockBusyException when not granted in time
     * @throws InterruptedException when interrupted (nothing is left held)
     */
    public Lease acquire(long weight, AcquireOptions options) throws InterruptedException {
        return lockFor(weight).acquire(options);
    }

    /**
     * @param weight the permits to take at once
     * @param options the wait, lease, owner and SESSION
     * @return the hold, in the background (cancel to stop waiting)
     */
    public CompletableFuture<Lease> acquireAsync(long weight, AcquireOptions options) {
        return lockFor(weight).acquireAsync(options);
    }

    /** @return the number of owners holding the semaphore now */
    public long holders() {
        Map<String, Object> info = Info.of(client.callNow(Bytes.of(key), Commands.INFO, Bytes.of(key)));
        return info == null ? 0 : Info.longOf(info, "shared");
    }
}
