package dev.dlock;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The entry point: a thread-safe client over one {@link Transport}, with one watchdog thread
 * that renews the leases of every live hold it granted. Close it to stop the watchdog (live
 * holds are then reported lost with {@link LostReason#CLIENT_CLOSED}) and the transport.
 *
 * <pre>{@code
 * try (DLockClient dlock = new DLockClient(LettuceTransport.create(RedisURI.create("redis://localhost")))) {
 *     DLock lock = dlock.getLock("orders:42");
 *     lock.lock();
 *     try {
 *         pay(42, lock.getToken());
 *     } finally {
 *         lock.unlock();
 *     }
 * }
 * }</pre>
 */
public final class DLockClient implements AutoCloseable {
    /** How long a command that answers at once may take before the client gives up on it. */
    static final Duration RESPONSE_TIMEOUT = Duration.ofSeconds(10);

    private final Transport transport;
    private final DLockConfig config;
    private final Watchdog watchdog;
    private final java.util.concurrent.ExecutorService asyncWaits;
    /**
     * Runs the clean-ups after a timeout or a cancel (R4.7: CLIENT UNBLOCK, the releases of R4.4
     * and R5.3): never on the caller, never on a library's I/O thread, each with its own bound.
     */
    private final java.util.concurrent.ExecutorService cleanups;
    private volatile boolean closed;

    /** Slots of {@link #busyHints} (a power of two): keys that share a slot share its hint. */
    private static final int BUSY_HINTS = 256;
    /** A key hinted busy is still tried first 1 time in this many. */
    private static final int REPROBE = 8;
    /**
     * Per slot of a key's hash: 1 when the last try of a waiting acquire of such a key found it
     * held. Only a hint (a shared slot or a stale value costs one round trip, never a rule).
     */
    private final java.util.concurrent.atomic.AtomicIntegerArray busyHints =
            new java.util.concurrent.atomic.AtomicIntegerArray(BUSY_HINTS);

    /**
     * A client with the default settings.
     *
     * @param transport the connections to use; closed with the client
     */
    public DLockClient(Transport transport) {
        this(transport, DLockConfig.defaults());
    }

    /**
     * @param transport the connections to use; closed with the client
     * @param config the settings
     */
    public DLockClient(Transport transport, DLockConfig config) {
        this.transport = Objects.requireNonNull(transport);
        this.config = Objects.requireNonNull(config);
        this.watchdog = new Watchdog(this);
        this.asyncWaits = java.util.concurrent.Executors.newCachedThreadPool(task -> {
            Thread thread = new Thread(task, "dlock-async-wait");
            thread.setDaemon(true);
            return thread;
        });
        this.cleanups = java.util.concurrent.Executors.newCachedThreadPool(task -> {
            Thread thread = new Thread(task, "dlock-cleanup");
            thread.setDaemon(true);
            return thread;
        });
    }

    /** Runs a clean-up in the background (nothing once the client is closed). */
    void inBackground(Runnable cleanup) {
        try {
            cleanups.execute(cleanup);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // closed: the transport's connections close, and leases end on their own
        }
    }

    /** How long a background release of an unknown outcome keeps trying at most. */
    private static final long SETTLE_MAX_NANOS = TimeUnit.SECONDS.toNanos(60);

    /**
     * R5.3 in the background: an acquisition whose outcome is unknown (no answer: a read timeout,
     * a broken connection) may have been granted to {@code owner}, which the caller never got;
     * one release of it settles that. Tried again until the server answers (a stalled or
     * restarting server) or the hold would have ended anyway, then once more a moment later (a
     * request still buffered in the server may run after the first release).
     */
    void releaseInBackground(Request request, String owner) {
        long end = System.nanoTime() + Math.min(SETTLE_MAX_NANOS, TimeUnit.MILLISECONDS.toNanos(request.leaseMs) + TimeUnit.SECONDS.toNanos(1));
        inBackground(() -> {
            boolean answered = false;
            while (!closed && !answered && System.nanoTime() - end < 0) {
                try {
                    release(request.keys, owner, request.shared);
                    answered = true;
                } catch (DLockServerException e) {
                    answered = true;
                } catch (RuntimeException e) {
                    try {
                        Thread.sleep(100);
                    } catch (InterruptedException stop) {
                        return;
                    }
                }
            }
            if (answered) {
                try {
                    Thread.sleep(200);
                    releaseQuietly(request, owner);
                } catch (InterruptedException stop) {
                    // closing
                }
            }
        });
    }

    /** A task that may be cancelled by interrupting its thread. */
    interface Interruptible<T> {
        T run() throws InterruptedException;
    }

    /**
     * Runs a waiting call on a thread of its own; cancelling the returned future interrupts it
     * (which ends a server-side wait), and a lease granted after the cancellation is closed.
     */
    <T> CompletableFuture<T> async(Interruptible<T> task) {
        checkOpen();
        CompletableFuture<T> result = new CompletableFuture<>();
        java.util.concurrent.Future<?> running = asyncWaits.submit(() -> {
            try {
                T value = task.run();
                if (!result.complete(value) && value instanceof AutoCloseable) {
                    // Cancelled while the grant came in: the grant is released here, by a
                    // thread whose interrupt (the cancellation) must not stop the release.
                    Thread.interrupted();
                    ((AutoCloseable) value).close();
                }
            } catch (InterruptedException e) {
                result.cancel(false);
            } catch (Throwable e) {
                result.completeExceptionally(e);
            }
        });
        result.whenComplete((value, error) -> {
            if (result.isCancelled()) {
                running.cancel(true);
            }
        });
        return result;
    }

    /** @return the settings */
    public DLockConfig config() {
        return config;
    }

    /** @return the transport */
    public Transport transport() {
        return transport;
    }

    Watchdog watchdog() {
        return watchdog;
    }

    /** @return how many holds the watchdog watches now */
    public int watchedHolds() {
        return watchdog.size();
    }

    /**
     * An exclusive, re-entrant lock ({@code DLOCK.ACQUIRE}).
     *
     * @param key the lock's key
     * @return the lock (cheap: no command is sent)
     */
    public DLock getLock(String key) {
        return new DLockImpl(this, List.of(key), false, false, 0, 0, new ThreadOwners());
    }

    /**
     * A fair lock ({@code DLOCK.FAIR}): a {@code tryLock()} (or {@code tryAcquire()}) that fails
     * keeps a reservation in the queue, and the same thread's next try of the key, on any fair
     * lock of this client, comes back under the same owner: a poller keeps its place.
     *
     * @param key the lock's key
     * @return the lock
     */
    public DLock getFairLock(String key) {
        return new DLockImpl(this, List.of(key), true, false, 0, 0, new ThreadOwners());
    }

    /**
     * A read-write lock: shared holds are read locks, exclusive holds write locks. A thread that
     * holds one side and takes the other uses the same owner (an upgrade or a downgrade).
     *
     * @param key the lock's key
     * @return the lock
     */
    public DReadWriteLock getReadWriteLock(String key) {
        return new DReadWriteLock(this, Arguments.key(key));
    }

    /**
     * A semaphore of {@code permits} permits (shared holds with {@code LIMIT}); each permit has its
     * own lease, so a crashed holder's permit comes back when its lease ends.
     *
     * @param key the semaphore's key
     * @param permits the most holders at once; every user of the key must pass the same number
     * @return the semaphore
     */
    public DSemaphore getSemaphore(String key, long permits) {
        return new DSemaphore(this, Arguments.key(key), permits);
    }

    /**
     * Several locks taken in one atomic step ({@code DLOCK.MACQUIRE}); in a Cluster the keys must
     * share a slot (use a hash tag).
     *
     * @param keys the keys, at least one, distinct
     * @return the multi-lock
     */
    public DLock getMultiLock(String... keys) {
        if (keys.length == 0) {
            throw new IllegalArgumentException("at least one key");
        }
        for (String key : keys) {
            Arguments.key(key);
        }
        return new DLockImpl(this, Arrays.asList(keys), false, false, 0, 0, new ThreadOwners());
    }

    /**
     * A count-down latch ({@code DLOCK.LATCH}, {@code DLOCK.COUNTDOWN}, {@code DLOCK.AWAIT}).
     *
     * @param key the latch's key
     * @return the latch
     */
    public DCountDownLatch getCountDownLatch(String key) {
        return new DCountDownLatch(this, Arguments.key(key));
    }

    /**
     * A leader election on one key ({@code DLOCK.WATCH} for observers).
     *
     * @param key the election's key
     * @return the election
     */
    public DElection getElection(String key) {
        return new DElection(this, Arguments.key(key));
    }

    /** Stops the watchdog (live holds are reported lost) and closes the transport. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        asyncWaits.shutdownNow();
        cleanups.shutdownNow();
        watchdog.close();
        transport.close();
    }

    void checkOpen() {
        if (closed) {
            throw new IllegalStateException("the DLockClient is closed");
        }
    }

    static String newOwner() {
        return UUID.randomUUID().toString();
    }

    /** Past this many keys a thread's poll owners are forgotten (their reservations end anyway). */
    private static final int POLL_OWNERS = 64;

    /**
     * Per thread, per key: the owner of a fair try that found the lock taken and left a
     * reservation (R8: a poller keeps its place). The thread's next fair try of that key, on any
     * DLock object of this client, comes back under it.
     */
    private final ThreadLocal<java.util.Map<String, String>> pollOwners =
            ThreadLocal.withInitial(java.util.HashMap::new);

    /** @return the owner of the calling thread's next fair try of {@code key} */
    String pollOwner(String key) {
        java.util.Map<String, String> owners = pollOwners.get();
        String owner = owners.get(key);
        if (owner == null) {
            if (owners.size() >= POLL_OWNERS) {
                owners.clear();
            }
            owner = newOwner();
            owners.put(key, owner);
        }
        return owner;
    }

    /**
     * The fair try under {@link #pollOwner} ended: its owner is kept only after a plain refusal
     * (a reservation, and nothing in flight that could still release that owner).
     */
    void pollEnded(String key, boolean refused) {
        if (!refused) {
            pollOwners.get().remove(key);
        }
    }

    // ---- acquisition ---------------------------------------------------------------------

    /** Waits for an immediate command's reply, uninterruptibly (it answers at once). */
    Object await(CompletableFuture<Object> reply) {
        return await(reply, System.nanoTime() + RESPONSE_TIMEOUT.toNanos());
    }

    /**
     * Waits for an immediate command's reply, uninterruptibly, until {@code end} (System.nanoTime)
     * at the latest: then a {@link DLockTimeoutException}.
     */
    Object await(CompletableFuture<Object> reply, long end) {
        try {
            return Transport.awaitBy(reply, end);
        } catch (ExecutionException e) {
            throw unwrap(e.getCause());
        } catch (TimeoutException e) {
            throw new DLockTimeoutException("no reply in time (the server is stalled or unreachable)");
        }
    }

    /**
     * Sends one command that answers at once and returns its reply: on the calling thread when
     * the transport can, else through {@link Transport#call} and {@link #await}.
     */
    Object callNow(byte[] routingKey, byte[]... args) {
        if (!transport.callsOnCaller()) {
            return await(transport.call(routingKey, args));
        }
        try {
            return transport.callOnCaller(routingKey, args);
        } catch (RuntimeException e) {
            throw unwrap(e);
        }
    }

    static RuntimeException unwrap(Throwable cause) {
        while ((cause instanceof java.util.concurrent.CompletionException
                        || cause instanceof ExecutionException)
                && cause.getCause() != null) {
            cause = cause.getCause();
        }
        if (cause instanceof RuntimeException) {
            return (RuntimeException) cause;
        }
        return new DLockConnectionException(String.valueOf(cause), cause);
    }

    /**
     * Acquires once.
     *
     * @param request what to acquire
     * @param owner the owner on the wire
     * @param generatedOwner true when {@code owner} is this request's alone (a blind release of it
     *     after a cancelled wait is then safe)
     * @param waitNanos {@code 0}: no wait; negative: wait forever; otherwise the wait
     * @param interruptible whether an interrupt ends the wait (then InterruptedException)
     * @return the hold, or null when not granted
     */
    Hold acquire(Request request, String owner, boolean generatedOwner, long waitNanos,
            boolean interruptible) throws InterruptedException {
        checkOpen();
        if (interruptible && Thread.interrupted()) {
            throw new InterruptedException();
        }
        Hold hold = acquireOnce(request, owner, generatedOwner, waitNanos, interruptible);
        if (hold != null && interruptible && Thread.interrupted()) {
            // Interrupted as the grant came in: an interrupted wait throws and keeps nothing
            // (R4.4), so the grant is given back.
            giveBack(request, hold);
            throw new InterruptedException();
        }
        return hold;
    }

    /** Releases a grant the caller will never see: one hold of its owner on each key. */
    private void giveBack(Request request, Hold hold) {
        hold.markReleased();
        releaseInBackground(request, hold.owner);
    }

    private Hold acquireOnce(Request request, String owner, boolean generatedOwner, long waitNanos,
            boolean interruptible) throws InterruptedException {
        long start = System.nanoTime();
        // The bound of the whole call (R4.6): the wait plus the margin of R4.2; a try without
        // wait and the first steps of a wait without end are bounded by the reply timeout.
        long end = waitNanos > 0 ? start + waitNanos + config.waitMargin().toNanos()
                : start + RESPONSE_TIMEOUT.toNanos();
        if (waitNanos == 0) {
            return tryNow(request, owner, generatedOwner, end);
        }
        int hintSlot = request.keys.get(0).hashCode() & (BUSY_HINTS - 1);
        boolean hintedBusy = busyHints.get(hintSlot) != 0;
        if (!request.fair && (!hintedBusy || ThreadLocalRandom.current().nextInt(REPROBE) == 0)) {
            // A free lock is granted on the shared connection at once; only a lock that is held
            // needs a connection of its own to wait on. (Not for DLOCK.FAIR, whose failed try
            // leaves a reservation.) A null reply leaves nothing behind, so the wait that follows
            // joins the queue exactly as a direct BLOCK would. A key whose last try found it
            // held goes straight to the queue (a try there would cost each hand-off of a
            // contended lock one more round trip), but 1 time in REPROBE tries again first so
            // that the hint ends when the contention does.
            Hold now = tryNow(request, owner, generatedOwner, end);
            if (now != null) {
                if (hintedBusy) {
                    busyHints.set(hintSlot, 0);
                }
                return now;
            }
            if (!hintedBusy) {
                busyHints.set(hintSlot, 1);
            }
        }
        byte[] routingKey = request.routingKey();
        BlockingConnection connection = openBlocking(routingKey, end);
        long blockMs = 0;
        if (waitNanos > 0) {
            // What is left of the wait once connected (at least 1 ms: one look at the queue).
            long left = end - config.waitMargin().toNanos() - System.nanoTime();
            blockMs = Math.max(1, (left + 999_999) / 1_000_000);
        }
        long sent = System.nanoTime();
        if (blockMs == 0 && !interruptible && connection.sendsOnCaller()) {
            // Nothing but the reply ends this wait: the thread waits in the transport's own
            // read, woken by the grant itself.
            Object value;
            try {
                value = connection.sendOnCaller(request.acquireArgs(owner, blockMs));
            } catch (RuntimeException e) {
                connection.discard();
                RuntimeException failure = unwrap(e);
                if (failure instanceof DLockConnectionException && generatedOwner) {
                    settleInBackground(request, owner);
                }
                throw failure;
            }
            connection.recycle();
            long received = System.nanoTime();
            Hold hold = granted(request, owner, value, sent, true);
            if (hold != null) {
                hold.grantedAfterWait(received, request.leaseMs);
            }
            return hold;
        }
        CompletableFuture<Object> reply;
        try {
            reply = connection.send(request.acquireArgs(owner, blockMs));
        } catch (RuntimeException e) {
            connection.discard();
            throw e;
        }
        Object value;
        try {
            value = awaitBlockingUntil(connection, reply, blockMs == 0 ? 0 : end, interruptible, routingKey,
                () -> {
                    if (generatedOwner) {
                        awaitNotQueued(request, owner);
                        releaseInBackground(request, owner);
                    }
                },
                late -> {
                    if (late != null && !generatedOwner) {
                        releaseQuietly(request, owner);
                    }
                });
        } catch (DLockConnectionException e) {
            if (generatedOwner) {
                settleInBackground(request, owner);
            }
            throw e;
        }
        long received = System.nanoTime();
        Hold hold = granted(request, owner, value, sent, true);
        if (hold != null) {
            hold.grantedAfterWait(received, request.leaseMs);
        }
        return hold;
    }

    /** R4.4 and R5.3 after a wait's connection failed: no waiter, then no hold of the owner. */
    private void settleInBackground(Request request, String owner) {
        inBackground(() -> {
            awaitNotQueued(request, owner);
            releaseInBackground(request, owner);
        });
    }

    /**
     * Opens a wait's connection by {@code end}: a stalled server that does not answer the
     * connection's handshake holds the caller no longer than its bound.
     */
    BlockingConnection openBlocking(byte[] routingKey, long end) {
        try {
            return transport.openBlocking(routingKey, end);
        } catch (RuntimeException e) {
            throw unwrap(e);
        }
    }

    /** One try without a wait, answered by {@code end} at the latest. */
    private Hold tryNow(Request request, String owner, boolean generatedOwner, long end) {
        try {
            transport.prepare(request.routingKey(), end);
        } catch (RuntimeException e) {
            throw unwrap(e);
        }
        long sent = System.nanoTime();
        if (transport.callsOnCaller()) {
            Object value;
            try {
                value = callNow(request.routingKey(), request.acquireArgs(owner, -1));
            } catch (DLockConnectionException | DLockTimeoutException e) {
                // No answer (R5.3, a read timeout included): it may have been granted. A
                // generated owner holds nothing else, so one release of it settles that.
                if (generatedOwner) {
                    releaseInBackground(request, owner);
                }
                throw e;
            }
            return granted(request, owner, value, sent, false);
        }
        CompletableFuture<Object> reply =
                transport.call(request.routingKey(), request.acquireArgs(owner, -1));
        Object value;
        try {
            value = await(reply, end);
        } catch (DLockTimeoutException e) {
            if (generatedOwner) {
                // The reply may still come (a paused server runs the command later): a grant,
                // or no answer at all, is released then, in the background. This callback may
                // run on the library's I/O thread: it only hands the release over.
                reply.whenComplete((late, error) -> {
                    if (late != null || error instanceof DLockConnectionException) {
                        releaseInBackground(request, owner);
                    }
                });
            }
            throw e;
        } catch (DLockConnectionException e) {
            if (generatedOwner) {
                releaseInBackground(request, owner);
            }
            throw e;
        }
        return granted(request, owner, value, sent, false);
    }

    /**
     * Waits for a blocking command's reply. On interrupt (when interruptible) or timeout the wait
     * is ended in the server with {@code CLIENT UNBLOCK}, its reply is awaited briefly (else the
     * connection is closed), then {@code settle} runs; a reply read after the unblock goes to
     * {@code lateReply}. That clean-up runs in the background (R4.7).
     */
    Object awaitBlocking(BlockingConnection connection, CompletableFuture<Object> reply, long blockMs,
            boolean interruptible, byte[] routingKey, Runnable settle,
            java.util.function.Consumer<Object> lateReply) throws InterruptedException {
        long limit = blockMs == 0 ? 0
                : System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(blockMs) + config.waitMargin().toNanos();
        return awaitBlockingUntil(connection, reply, limit, interruptible, routingKey, settle, lateReply);
    }

    /** {@link #awaitBlocking} with the read timeout's end ({@code 0}: none). */
    Object awaitBlockingUntil(BlockingConnection connection, CompletableFuture<Object> reply, long limit,
            boolean interruptible, byte[] routingKey, Runnable settle,
            java.util.function.Consumer<Object> lateReply) throws InterruptedException {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    Object value = limit == 0 ? reply.get()
                            : reply.get(Math.max(0, limit - System.nanoTime()), TimeUnit.NANOSECONDS);
                    connection.recycle();
                    return value;
                } catch (InterruptedException e) {
                    if (interruptible) {
                        abandon(connection, reply, routingKey, settle, lateReply);
                        throw e;
                    }
                    interrupted = true;
                } catch (TimeoutException e) {
                    abandon(connection, reply, routingKey, settle, lateReply);
                    throw new DLockTimeoutException("no reply within the wait plus " + config.waitMargin().toMillis() + " ms");
                } catch (ExecutionException e) {
                    connection.discard();
                    throw unwrap(e.getCause());
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Ends a wait early, in the background (R4.7): no waiter stays in the server's queue, no
     * grant is left behind.
     */
    private void abandon(BlockingConnection connection, CompletableFuture<Object> reply,
            byte[] routingKey, Runnable settle, java.util.function.Consumer<Object> lateReply) {
        Runnable cleanup = () -> {
            boolean unblocked = false;
            try {
                await(transport.call(routingKey, Commands.CLIENT, Commands.UNBLOCK, Bytes.of(connection.clientId())));
                unblocked = true;
            } catch (RuntimeException e) {
                // No answer: closing the connection removes the waiter (below).
            }
            if (!unblocked) {
                connection.discard();
            }
            try {
                Object late = reply.get(1, TimeUnit.SECONDS);
                connection.recycle();
                lateReply.accept(late);
            } catch (ExecutionException e) {
                connection.discard();
            } catch (Exception e) {
                // Redis 7.0 can drop the reply of a waiter granted in the turn of the unblock;
                // closing the connection removes any waiter still there.
                connection.discard();
            }
            // After the unblock the server can no longer grant this wait: releasing a generated
            // owner settles a grant that raced the cancellation, read or not.
            settle.run();
        };
        try {
            cleanups.execute(cleanup);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            connection.discard();
        }
    }

    /** Turns a grant reply into a watched hold; null for a null reply. */
    Hold granted(Request request, String owner, Object reply, long sentNanos, boolean afterWait) {
        if (reply == null) {
            return null;
        }
        List<Object> grants;
        if (request.multi()) {
            grants = Bytes.asList(reply, "DLOCK.MACQUIRE");
        } else {
            grants = List.of(reply);
        }
        if (grants.size() != request.keys.size()) {
            throw new DLockException("expected " + request.keys.size() + " grants, got " + grants.size());
        }
        long[] tokens = new long[grants.size()];
        int holds = 0;
        for (int i = 0; i < grants.size(); i++) {
            List<Object> grant = Bytes.asList(grants.get(i), "a grant");
            tokens[i] = Bytes.asLong(grant.get(0), "a grant's token");
            if (i == 0) {
                holds = (int) Bytes.asLong(grant.get(1), "a grant's hold count");
            }
        }
        Hold hold = new Hold(this, request.keys, owner, tokens, holds, request.shared,
                request.leaseMs, request.renewed);
        if (!afterWait) {
            hold.confirmed(sentNanos, request.leaseMs);
        }
        return hold;
    }

    /** Starts watching a hold (after the caller recorded it). */
    void watch(Hold hold) {
        watchdog.watch(hold);
    }

    /**
     * Releases one hold of {@code owner} on each key of the request.
     *
     * @return the holds the owner has left on the first key (in both modes)
     */
    long release(List<String> keys, String owner, boolean shared) {
        if (keys.size() == 1 && transport.callsOnCaller()) {
            byte[] k = Bytes.of(keys.get(0));
            Object reply = shared ? callNow(k, Commands.RELEASE, k, Bytes.of(owner), Commands.SHARED)
                    : callNow(k, Commands.RELEASE, k, Bytes.of(owner));
            return Bytes.asLong(reply, "DLOCK.RELEASE");
        }
        List<Transport.Command> commands = new ArrayList<>(keys.size());
        for (String key : keys) {
            byte[] k = Bytes.of(key);
            byte[][] args = shared
                    ? new byte[][] {Commands.RELEASE, k, Bytes.of(owner), Commands.SHARED}
                    : new byte[][] {Commands.RELEASE, k, Bytes.of(owner)};
            commands.add(new Transport.Command(k, args));
        }
        List<CompletableFuture<Object>> replies = transport.callAll(commands);
        long left = -1;
        RuntimeException failure = null;
        for (int i = 0; i < replies.size(); i++) {
            try {
                long n = Bytes.asLong(await(replies.get(i)), "DLOCK.RELEASE");
                if (i == 0) {
                    left = n;
                }
            } catch (RuntimeException e) {
                if (failure == null) {
                    failure = e;
                }
            }
        }
        if (failure != null) {
            throw failure;
        }
        return left;
    }

    /**
     * After a wait's connection was closed, the server drops the waiter when it sees the close:
     * look with DLOCK.INFO (up to 2 s) until the owner is no longer queued, so that a release sent
     * then comes after any grant of that wait (R4.4).
     */
    void awaitNotQueued(Request request, String owner) {
        byte[] key = request.routingKey();
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(2);
        while (System.nanoTime() < end) {
            try {
                java.util.Map<String, Object> info = Info.of(await(transport.call(key, Commands.INFO, key)));
                Object queue = info == null ? null : info.get("queue");
                boolean queued = false;
                if (queue instanceof List) {
                    for (Object entry : (List<?>) queue) {
                        queued |= owner.equals(Bytes.str(entry));
                    }
                }
                if (!queued) {
                    return;
                }
                Thread.sleep(2);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            } catch (RuntimeException e) {
                return;
            }
        }
    }

    void releaseQuietly(Request request, String owner) {
        try {
            release(request.keys, owner, request.shared);
        } catch (RuntimeException e) {
            // NOTOWNER: nothing was held; anything else: the lease ends on its own.
        }
    }

    /**
     * Renews every key of a hold to {@code ttl} from now.
     *
     * @return false when the hold turned out lost (or was released)
     */
    boolean renewNow(Hold hold, long ttl) {
        if (!hold.isLive()) {
            return false;
        }
        List<Transport.Command> commands = new ArrayList<>();
        for (byte[] key : hold.keyBytes) {
            commands.add(new Transport.Command(key, new byte[][] {Commands.RENEW, key, Bytes.of(hold.owner), Bytes.of(ttl)}));
        }
        long sent = System.nanoTime();
        long deadline;
        synchronized (hold) {
            deadline = hold.deadlineNanos;
        }
        List<CompletableFuture<Object>> replies = transport.callAll(commands);
        for (int i = 0; i < replies.size(); i++) {
            Object reply;
            try {
                // R4.6: a renewal ends by the hold's local deadline at the latest; with no reply
                // by then the hold is lost (a stalled server may have let its lease end).
                reply = await(replies.get(i), deadline);
            } catch (DLockTimeoutException e) {
                if (System.nanoTime() - deadline >= 0) {
                    hold.markLost(LostReason.DEADLINE);
                    return false;
                }
                throw e;
            } catch (NotOwnerException e) {
                hold.markLost(LostReason.NOT_OWNER);
                return false;
            } catch (WrongTypeException e) {
                hold.markLost(LostReason.WRONG_TYPE);
                return false;
            }
            if (!(reply instanceof Long) || (Long) reply != hold.token(i)) {
                hold.markLost(reply == null ? LostReason.NOT_OWNER : LostReason.TOKEN_CHANGED);
                return false;
            }
        }
        if (!hold.renewed(sent, ttl)) {
            hold.markLost(LostReason.DEADLINE);
            return false;
        }
        return true;
    }

    /** Releases a hold: once; a lost hold's release is still sent and reports nothing. */
    long release(Hold hold) {
        // A look first (R3.2): a hold past its local deadline is lost, even if the watchdog's
        // thread has not run since, and its release reports nothing (R3.4).
        boolean wasLost = hold.isLost();
        if (!hold.markReleased()) {
            return 0;
        }
        try {
            return release(hold.keys, hold.owner, hold.shared);
        } catch (RuntimeException e) {
            if (wasLost) {
                // Sent in case the server kept the hold; a lost hold's release reports nothing.
                return 0;
            }
            if (e instanceof NotOwnerException) {
                hold.lostAtRelease(LostReason.NOT_OWNER);
            } else if (e instanceof WrongTypeException) {
                hold.lostAtRelease(LostReason.WRONG_TYPE);
            }
            throw e;
        }
    }
}
