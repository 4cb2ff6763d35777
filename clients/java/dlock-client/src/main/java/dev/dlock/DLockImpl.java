package dev.dlock;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;

/** The lock behind {@link DLock}: exclusive, fair, shared (read side, semaphore) or multi-key. */
class DLockImpl implements DLock {
    private static final long FOREVER = -1;

    /** The calling thread's hold on this lock, and how many times it entered it. */
    private static final class Entry {
        final Hold hold;
        int count;

        Entry(Hold hold) {
            this.hold = hold;
            this.count = 1;
        }
    }

    final DLockClient client;
    final List<String> keys;
    private final boolean fair;
    private final boolean shared;
    private final long limit;
    private final long weight;
    private final ThreadOwners owners;
    private final Map<Thread, Entry> entries = new ConcurrentHashMap<>();

    DLockImpl(DLockClient client, List<String> keys, boolean fair, boolean shared, long limit,
            long weight, ThreadOwners owners) {
        this.client = client;
        this.keys = List.copyOf(keys);
        this.fair = fair;
        this.shared = shared;
        this.limit = limit;
        this.weight = weight;
        this.owners = owners;
    }

    Request request(long leaseMs, boolean renewed) {
        return new Request(keys, fair, shared, limit, weight, false, leaseMs, renewed);
    }

    Request request(AcquireOptions options) {
        return new Request(keys, fair, shared, limit, weight, options.session(),
                options.leaseMs(client.config()), options.renewed());
    }

    private Request defaultRequest() {
        return request(client.config().defaultLease().toMillis(), true);
    }

    @Override
    public String getName() {
        return keys.get(0);
    }

    // ---- the thread-owned facade -----------------------------------------------------------

    /**
     * Acquires under {@code owner}; a fair lock's generated owner is the thread's poll owner,
     * kept for its next try when this one was refused (R8: a poller keeps its place).
     */
    private Hold acquireAs(Request request, String owner, boolean generated, long waitNanos,
            boolean interruptible) throws InterruptedException {
        if (!fair || !generated) {
            return client.acquire(request, owner, generated, waitNanos, interruptible);
        }
        Hold hold;
        try {
            hold = client.acquire(request, owner, true, waitNanos, interruptible);
        } catch (InterruptedException | RuntimeException | Error e) {
            // A failure's clean-up may still release this owner: the next try takes a new one.
            client.pollEnded(keys.get(0), false);
            throw e;
        }
        // Kept only after a plain refusal; after a grant the next try takes a new one.
        client.pollEnded(keys.get(0), hold == null);
        return hold;
    }

    /**
     * @param waitNanos 0: one try; FOREVER: no end
     * @param leaseMs the lease, or -1 for the default lease with the watchdog
     */
    private boolean lockFor(long waitNanos, long leaseMs, boolean interruptible) throws InterruptedException {
        Request request = leaseMs < 0 ? defaultRequest() : request(leaseMs, false);
        Thread thread = Thread.currentThread();
        Entry entry = entries.get(thread);
        if (entry != null && entry.hold.isLost()) {
            drop(thread, entry);
            entry = null;
        }
        if (entry != null) {
            // A re-entry: granted at once under the same owner (holds + 1 in the server).
            long sent = System.nanoTime();
            Object reply = client.callNow(request.routingKey(),
                    request.acquireArgs(entry.hold.owner, -1));
            if (reply != null) {
                entry.count++;
                entry.hold.serverHolds = (int) Bytes.asLong(Bytes.asList(
                        request.multi() ? Bytes.asList(reply, "grants").get(0) : reply, "a grant").get(1), "holds");
                entry.hold.confirmed(sent, request.leaseMs);
                return true;
            }
            entry.hold.markLost(LostReason.NOT_OWNER);
            drop(thread, entry);
        }
        String owner = owners.current(thread);
        boolean generated = owner == null;
        if (generated) {
            owner = fair ? client.pollOwner(keys.get(0)) : DLockClient.newOwner();
        }
        Hold hold = acquireAs(request, owner, generated, waitNanos, interruptible);
        if (hold == null) {
            return false;
        }
        owners.use(thread, owner, hold);
        entries.put(thread, new Entry(hold));
        client.watch(hold);
        return true;
    }

    private void drop(Thread thread, Entry entry) {
        if (entries.remove(thread, entry)) {
            owners.release(thread);
        }
    }

    private static long nanos(long time, TimeUnit unit) {
        if (time <= 0) {
            return 0;
        }
        // 100 years or more: without end (a deadline in nanoseconds could overflow).
        return unit.toDays(time) >= 100L * 365 ? FOREVER : Math.max(1, unit.toNanos(time));
    }

    @Override
    public void lock() {
        lockUninterruptibly(-1);
    }

    @Override
    public void lock(long leaseTime, TimeUnit unit) {
        lockUninterruptibly(Arguments.leaseMs(leaseTime, unit));
    }

    private void lockUninterruptibly(long leaseMs) {
        try {
            lockFor(FOREVER, leaseMs, false);
        } catch (InterruptedException e) {
            throw new AssertionError("an uninterruptible wait was interrupted", e);
        }
    }

    @Override
    public void lockInterruptibly() throws InterruptedException {
        lockFor(FOREVER, -1, true);
    }

    @Override
    public void lockInterruptibly(long leaseTime, TimeUnit unit) throws InterruptedException {
        lockFor(FOREVER, Arguments.leaseMs(leaseTime, unit), true);
    }

    @Override
    public boolean tryLock() {
        try {
            return lockFor(0, -1, false);
        } catch (InterruptedException e) {
            throw new AssertionError("a try without wait was interrupted", e);
        }
    }

    @Override
    public boolean tryLock(long time, TimeUnit unit) throws InterruptedException {
        return lockFor(nanos(time, unit), -1, true);
    }

    @Override
    public boolean tryLock(long waitTime, long leaseTime, TimeUnit unit) throws InterruptedException {
        long leaseMs = Arguments.leaseMs(leaseTime, unit);
        return lockFor(nanos(waitTime, unit), leaseMs, true);
    }

    @Override
    public void unlock() {
        Thread thread = Thread.currentThread();
        Entry entry = entries.get(thread);
        if (entry == null) {
            throw new IllegalMonitorStateException("lock '" + getName() + "' is not held by the current thread");
        }
        Hold hold = entry.hold;
        if (hold.isLost()) {
            drop(thread, entry);
            hold.markReleased();
            client.releaseQuietly(request(1, false), hold.owner);
            throw new LockLostException(getName(), hold.lostReason());
        }
        entry.count--;
        if (entry.count == 0) {
            drop(thread, entry);
        }
        try {
            client.release(keys, hold.owner, shared);
        } catch (RuntimeException e) {
            if (!(e instanceof NotOwnerException) && !(e instanceof WrongTypeException)) {
                if (entry.count == 0) {
                    hold.markReleased();
                }
                throw e;
            }
            if (e instanceof WrongTypeException) {
                hold.markLost(LostReason.WRONG_TYPE);
                drop(thread, entry);
                hold.markReleased();
                throw new LockLostException(getName(), LostReason.WRONG_TYPE);
            }
            hold.markLost(LostReason.NOT_OWNER);
            drop(thread, entry);
            hold.markReleased();
            throw new LockLostException(getName(), LostReason.NOT_OWNER);
        }
        if (entry.count == 0) {
            hold.markReleased();
        } else {
            hold.serverHolds = Math.max(0, hold.serverHolds - 1);
        }
    }

    @Override
    public Condition newCondition() {
        throw new UnsupportedOperationException("dlock locks have no conditions");
    }

    @Override
    public boolean isLocked() {
        for (String key : keys) {
            Map<String, Object> info = Info.of(client.callNow(Bytes.of(key),
                    Commands.INFO, Bytes.of(key)));
            if (info != null && (Info.longOf(info, "holds") > 0 || Info.longOf(info, "shared") > 0)) {
                return true;
            }
        }
        return false;
    }

    @Override
    public boolean isHeldByCurrentThread() {
        Entry entry = entries.get(Thread.currentThread());
        return entry != null && entry.hold.isLive();
    }

    @Override
    public int getHoldCount() {
        Entry entry = entries.get(Thread.currentThread());
        return entry == null ? 0 : entry.count;
    }

    private Hold currentHold() {
        Entry entry = entries.get(Thread.currentThread());
        if (entry == null) {
            throw new IllegalMonitorStateException("lock '" + getName() + "' is not held by the current thread");
        }
        return entry.hold;
    }

    @Override
    public long getToken() {
        return currentHold().token(0);
    }

    @Override
    public void renew() {
        Hold hold = currentHold();
        if (!client.renewNow(hold, hold.ttlMs)) {
            throw new LockLostException(getName(), hold.lostReason() == null ? LostReason.NOT_OWNER : hold.lostReason());
        }
    }

    @Override
    public CompletionStage<LostReason> lostByCurrentThread() {
        return currentHold().lostFuture().minimalCompletionStage();
    }

    // ---- the handle API ----------------------------------------------------------------------

    Lease acquireLease(Request request, long waitNanos) throws InterruptedException {
        return acquireLease(request, null, waitNanos);
    }

    Lease acquireLease(Request request, String owner, long waitNanos) throws InterruptedException {
        boolean generated = owner == null;
        if (generated) {
            owner = fair ? client.pollOwner(keys.get(0)) : DLockClient.newOwner();
        }
        Hold hold = acquireAs(request, owner, generated, waitNanos, true);
        if (hold == null) {
            return null;
        }
        client.watch(hold);
        return new Lease(hold);
    }

    @Override
    public Lease acquire() throws InterruptedException {
        return acquireLease(defaultRequest(), FOREVER);
    }

    @Override
    public Lease acquire(Duration wait) throws InterruptedException {
        Lease lease = acquireLease(defaultRequest(), Arguments.waitNanos(wait));
        if (lease == null) {
            throw new LockBusyException(getName());
        }
        return lease;
    }

    @Override
    public Lease acquire(Duration wait, Duration lease) throws InterruptedException {
        long waitNanos = Arguments.waitNanos(wait);
        Lease granted = acquireLease(request(Arguments.leaseMs(lease), false), waitNanos);
        if (granted == null) {
            throw new LockBusyException(getName());
        }
        return granted;
    }

    @Override
    public Lease acquire(AcquireOptions options) throws InterruptedException {
        Lease granted = acquireLease(request(options), options.owner(), options.waitNanos());
        if (granted == null) {
            throw new LockBusyException(getName());
        }
        return granted;
    }

    @Override
    public CompletableFuture<Lease> acquireAsync(AcquireOptions options) {
        return client.async(() -> acquire(options));
    }

    @Override
    public Optional<Lease> tryAcquire(Duration lease) {
        try {
            return Optional.ofNullable(acquireLease(request(Arguments.leaseMs(lease), false), 0));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return Optional.empty();
        }
    }

    @Override
    public Optional<Lease> tryAcquire() {
        try {
            return Optional.ofNullable(acquireLease(defaultRequest(), 0));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return Optional.empty();
        }
    }

    @Override
    public CompletableFuture<Lease> acquireAsync(Duration wait) {
        return client.async(() -> acquire(wait));
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + keys;
    }
}
