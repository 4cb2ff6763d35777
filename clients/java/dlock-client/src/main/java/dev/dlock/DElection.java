package dev.dlock;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Flow;
import java.util.concurrent.SubmissionPublisher;
import java.util.function.Consumer;

/**
 * Leader election on an exclusive lock: whoever holds the key leads. {@link #campaign} waits in the
 * lock's FIFO queue; the watchdog renews the leader's lease and its fencing token is the term.
 * {@link #observe} learns every change through {@code DLOCK.WATCH}, which the server answers the
 * moment the key's newest hold changes: nothing polls and the latest change is never missed.
 *
 * <p>The owner string is the same in every dlock client (docs/clients.md, R7.6): {@code
 * <identity>#<32 hex digits>}, a new UUID v4 per campaign without its dashes (32 lowercase
 * hexadecimal digits), so two candidates announcing one identity never share a hold. A reader
 * takes the identity as the owner up to its last {@code #}, or the whole owner when it has no
 * {@code #} (a hold taken outside an election).
 *
 * <p><b>A leader must stop acting when its lease is lost</b> ({@link Lease#lost()}): another
 * candidate may lead already. Pass the term to what it writes, so that the resource refuses an
 * old leader.
 *
 * <pre>{@code
 * DElection election = dlock.getElection("billing:leader");
 * try (Lease leadership = election.campaign("10.0.0.7:8080")) {
 *     leadership.lost().thenRun(server::stopServing);
 *     server.serve(leadership.token());   // the term
 * }                                       // resigns
 * }</pre>
 */
public final class DElection {
    /** How long one {@code DLOCK.WATCH} waits in the server before the observer asks again. */
    static final long WATCH_TIMEOUT_MS = 30_000;

    private final DLockClient client;
    private final String key;
    private final byte[] keyBytes;
    private final DLock lock;

    DElection(DLockClient client, String key) {
        this.client = client;
        this.key = key;
        this.keyBytes = Bytes.of(key);
        this.lock = client.getLock(key);
    }

    /** @return the election's key */
    public String getName() {
        return key;
    }

    /**
     * @param identity what the candidate announces (1 to 479 bytes; it may contain {@code #})
     * @return the owner string of a new campaign: {@code <identity>#<32 hex digits>}
     *     (docs/clients.md R7.6), unique per campaign
     */
    public static String ownerFor(String identity) {
        if (identity.isEmpty() || Bytes.of(identity).length > 512 - 33) {
            throw new IllegalArgumentException("identity must be 1 to 479 bytes");
        }
        return identity + "#" + UUID.randomUUID().toString().replace("-", "");
    }

    /**
     * @param owner an owner string
     * @return the identity it announces: the owner up to its last {@code #}, or the whole owner
     *     when it has none (a hold taken outside an election), as every client reads it (R7.6)
     */
    public static String identityOf(String owner) {
        int at = owner.lastIndexOf('#');
        return at >= 0 ? owner.substring(0, at) : owner;
    }

    /**
     * Waits to lead, as long as needed.
     *
     * @param identity what the candidate announces (host, address)
     * @return the leadership: its token is the term; close it to resign
     * @throws InterruptedException when interrupted (nothing is left in the queue)
     */
    public Lease campaign(String identity) throws InterruptedException {
        return campaign(identity, AcquireOptions.defaults().waitForever());
    }

    /**
     * Campaigns with every option spelled out (wait, lease, SESSION); the owner is always {@link #ownerFor}.
     *
     * @param identity what the candidate announces
     * @param options the wait and the lease
     * @return the leadership
     * @throws LockBusyException when not elected within the wait
     * @throws InterruptedException when interrupted (nothing is left in the queue)
     */
    public Lease campaign(String identity, AcquireOptions options) throws InterruptedException {
        return lock.acquire(options.owner(ownerFor(identity)));
    }

    /**
     * @param identity what the candidate announces
     * @param options the wait and the lease
     * @return the leadership, in the background (cancel to stop campaigning)
     */
    public CompletableFuture<Lease> campaignAsync(String identity, AcquireOptions options) {
        return lock.acquireAsync(options.owner(ownerFor(identity)));
    }

    /**
     * Gives up leadership: releases the lease (the same as closing it).
     *
     * @param leadership what {@link #campaign} returned
     */
    public void resign(Lease leadership) {
        leadership.close();
    }

    /** @return who leads now, or empty when nobody does */
    public Optional<Leader> leader() {
        Map<String, Object> info = Info.of(client.callNow(keyBytes, Commands.INFO, keyBytes));
        if (info == null || Info.longOf(info, "holds") == 0) {
            return Optional.empty();
        }
        return Optional.of(new Leader(Bytes.str(info.get("owner")), Info.longOf(info, "token"), Info.longOf(info, "pttl")));
    }

    /**
     * Observes leadership: {@code listener} gets the state now, then every change (empty when
     * nobody leads), on the observer's own thread, in order. Close the observer to stop.
     *
     * @param listener receives each observation
     * @return the observer
     */
    public Observer observe(Consumer<Optional<Leader>> listener) {
        client.checkOpen();
        return new Observer(listener);
    }

    /**
     * Observations as a {@link Flow.Publisher}: each subscriber gets its own observer, stopped when
     * its subscription is cancelled. A slow subscriber skips states (never the newest).
     *
     * @return the publisher
     */
    public Flow.Publisher<Optional<Leader>> observations() {
        return subscriber -> {
            SubmissionPublisher<Optional<Leader>> publisher = new SubmissionPublisher<>(Runnable::run, 16);
            Observer[] observer = new Observer[1];
            publisher.subscribe(new Flow.Subscriber<Optional<Leader>>() {
                @Override
                public void onSubscribe(Flow.Subscription subscription) {
                    subscriber.onSubscribe(new Flow.Subscription() {
                        @Override
                        public void request(long n) {
                            subscription.request(n);
                        }

                        @Override
                        public void cancel() {
                            subscription.cancel();
                            if (observer[0] != null) {
                                observer[0].close();
                            }
                        }
                    });
                }

                @Override
                public void onNext(Optional<Leader> item) {
                    subscriber.onNext(item);
                }

                @Override
                public void onError(Throwable throwable) {
                    subscriber.onError(throwable);
                }

                @Override
                public void onComplete() {
                    subscriber.onComplete();
                }
            });
            observer[0] = observe(state -> publisher.offer(state, (s, dropped) -> false));
        };
    }

    /** A running observation; {@link #close()} stops it (ending its wait in the server). */
    public final class Observer implements AutoCloseable {
        private final Thread thread;
        private volatile boolean closed;
        private volatile Optional<Leader> latest;

        private Observer(Consumer<Optional<Leader>> listener) {
            this.thread = new Thread(() -> run(listener), "dlock-observer-" + key);
            this.thread.setDaemon(true);
            this.thread.start();
        }

        /** @return the latest observation, or null before the first */
        public Optional<Leader> latest() {
            return latest;
        }

        private void deliver(Consumer<Optional<Leader>> listener, Optional<Leader> state) {
            latest = state;
            try {
                listener.accept(state);
            } catch (RuntimeException e) {
                // a listener's failure must not stop the observation
            }
        }

        private void run(Consumer<Optional<Leader>> listener) {
            long known = -1;
            while (!closed) {
                try {
                    if (known < 0) {
                        Optional<Leader> now = leader();
                        known = now.map(Leader::term).orElse(0L);
                        deliver(listener, now);
                        continue;
                    }
                    BlockingConnection connection = client.transport().openBlocking(keyBytes);
                    CompletableFuture<Object> reply;
                    try {
                        reply = connection.send(Bytes.of("DLOCK.WATCH"), keyBytes, Bytes.of(known), Bytes.of(WATCH_TIMEOUT_MS));
                    } catch (RuntimeException e) {
                        connection.discard();
                        throw e;
                    }
                    if (closed) {
                        // close() ran while the watch was being opened or sent: its interrupt may have
                        // landed where nothing looks at it, and the watch would wait in the server for
                        // WATCH_TIMEOUT_MS. Closing the connection ends it at once (R4.3).
                        connection.discard();
                        return;
                    }
                    Object value = client.awaitBlocking(connection, reply, WATCH_TIMEOUT_MS, true, keyBytes, () -> {}, late -> {});
                    if (value == null) {
                        continue;
                    }
                    List<Object> change = Bytes.asList(value, "DLOCK.WATCH");
                    long token = Bytes.asLong(change.get(0), "a term");
                    known = token;
                    deliver(listener, token == 0 || change.get(1) == null ? Optional.empty()
                            : Optional.of(new Leader(Bytes.str(change.get(1)), token, Bytes.asLong(change.get(2), "pttl"))));
                } catch (InterruptedException e) {
                    return;
                } catch (RuntimeException e) {
                    if (closed) {
                        return;
                    }
                    // A connection failure: start over from the current state after a pause.
                    known = -1;
                    try {
                        Thread.sleep(client.config().retryDelay().toMillis());
                    } catch (InterruptedException interrupted) {
                        return;
                    }
                }
            }
        }

        /** Stops observing; idempotent. */
        @Override
        public void close() {
            closed = true;
            thread.interrupt();
            if (thread != Thread.currentThread()) {
                try {
                    thread.join(5000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }
}
