package dev.dlock.bench;

import dev.dlock.AcquireOptions;
import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.DSemaphore;
import dev.dlock.Lease;
import dev.dlock.Transport;
import dev.dlock.lettuce.LettuceTransport;
import dev.dlock.testkit.RedisServer;
import io.lettuce.core.RedisURI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.function.Function;
import java.util.function.IntFunction;
import java.util.function.Supplier;
import org.redisson.Redisson;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * dlock's Java client against Redisson, on one redis-server with the module, in one run (issue
 * 29's performance goals): uncontended lock/unlock pairs per second (one thread) and 16 threads in
 * 4 clients contending for one lock (hand-offs per second, p50/p99 wait) against {@code RLock};
 * read-write (16 threads in 4 clients, 90% reads, 10% writes, 1 ms of work) against {@code
 * RReadWriteLock}; a semaphore (32 threads in 4 clients, 8 permits, 1 ms of work) against {@code
 * RPermitExpirableSemaphore}; and the client's overhead: acquire + release through the client
 * against the same two raw commands through the same transport. A plain harness with warm-up.
 * Arguments: {@code --quick} (short runs) and the report's path.
 */
public final class Bench {
    private Bench() {}

    /** Lettuce logs a line per connection to a server without maintenance events; kept quiet (held: JUL loggers are weak). */
    private static final java.util.logging.Logger LETTUCE_LOG = java.util.logging.Logger.getLogger("io.lettuce.core");

    /** Semaphore permits are taken with a fixed lease on both sides (no watchdog), as in the Rust bench. */
    static final Duration SEMAPHORE_LEASE = Duration.ofSeconds(10);

    interface Side extends AutoCloseable {
        Lock lock(String key);

        ReadWriteLock readWriteLock(String key);

        /** A semaphore of {@code permits}; each call takes one permit and returns its release. */
        Supplier<Runnable> semaphore(String key, int permits);

        @Override
        void close();
    }

    static Side dlock(String uri) {
        DLockClient client = new DLockClient(LettuceTransport.create(RedisURI.create(uri)));
        return new Side() {
            @Override
            public Lock lock(String key) {
                return client.getLock(key);
            }

            @Override
            public ReadWriteLock readWriteLock(String key) {
                return client.getReadWriteLock(key);
            }

            @Override
            public Supplier<Runnable> semaphore(String key, int permits) {
                DSemaphore semaphore = client.getSemaphore(key, permits);
                AcquireOptions options = AcquireOptions.defaults().waitForever().fixedLease(SEMAPHORE_LEASE);
                return () -> {
                    try {
                        Lease permit = semaphore.acquire(1, options);
                        return permit::close;
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                };
            }

            @Override
            public void close() {
                client.close();
            }
        };
    }

    static Side redisson(String uri) {
        Config config = new Config();
        config.useSingleServer().setAddress(uri).setConnectionMinimumIdleSize(4).setConnectionPoolSize(16);
        RedissonClient client = Redisson.create(config);
        return new Side() {
            @Override
            public Lock lock(String key) {
                return client.getLock(key);
            }

            @Override
            public ReadWriteLock readWriteLock(String key) {
                return client.getReadWriteLock(key);
            }

            @Override
            public Supplier<Runnable> semaphore(String key, int permits) {
                RPermitExpirableSemaphore semaphore = client.getPermitExpirableSemaphore(key);
                semaphore.trySetPermits(permits);
                return () -> {
                    try {
                        String permit = semaphore.acquire(SEMAPHORE_LEASE.toMillis(), TimeUnit.MILLISECONDS);
                        return () -> semaphore.release(permit);
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                };
            }

            @Override
            public void close() {
                client.shutdown();
            }
        };
    }

    record Contended(double handoffsPerSecond, double p50Ms, double p99Ms, long count, long violations) {}

    static double uncontended(Function<String, Side> make, String uri, String key, int warmup, int pairs) {
        try (Side side = make.apply(uri)) {
            Lock lock = side.lock(key);
            for (int i = 0; i < warmup; i++) {
                lock.lock();
                lock.unlock();
            }
            long start = System.nanoTime();
            for (int i = 0; i < pairs; i++) {
                lock.lock();
                lock.unlock();
            }
            return pairs / ((System.nanoTime() - start) / 1e9);
        }
    }

    static Contended contended(Function<String, Side> make, String uri, String key, long warmupMs, long runMs)
            throws InterruptedException {
        AtomicInteger holders = new AtomicInteger();
        AtomicLong violations = new AtomicLong();
        return workload(make, uri, 16, 0, warmupMs, runMs, violations, side -> {
            Lock lock = side.lock(key);
            return () -> {
                lock.lock();
                if (holders.incrementAndGet() != 1) {
                    violations.incrementAndGet();
                }
                return () -> {
                    holders.decrementAndGet();
                    lock.unlock();
                };
            };
        });
    }

    /** 16 threads in 4 clients: a read (9 in 10) or a write, 1 ms of work while held. */
    static Contended readWrite(Function<String, Side> make, String uri, String key, long warmupMs, long runMs)
            throws InterruptedException {
        AtomicInteger readers = new AtomicInteger();
        AtomicInteger writers = new AtomicInteger();
        AtomicLong violations = new AtomicLong();
        return workload(make, uri, 16, WORK_NANOS, warmupMs, runMs, violations, side -> {
            ReadWriteLock rw = side.readWriteLock(key);
            Lock read = rw.readLock();
            Lock write = rw.writeLock();
            return () -> {
                if (ThreadLocalRandom.current().nextInt(10) == 0) {
                    write.lock();
                    if (writers.incrementAndGet() != 1 || readers.get() != 0) {
                        violations.incrementAndGet();
                    }
                    return () -> {
                        writers.decrementAndGet();
                        write.unlock();
                    };
                }
                read.lock();
                readers.incrementAndGet();
                if (writers.get() != 0) {
                    violations.incrementAndGet();
                }
                return () -> {
                    readers.decrementAndGet();
                    read.unlock();
                };
            };
        });
    }

    /** 32 threads in 4 clients, 8 permits, 1 ms of work while holding one. */
    static Contended semaphore(Function<String, Side> make, String uri, String key, long warmupMs, long runMs)
            throws InterruptedException {
        AtomicInteger holders = new AtomicInteger();
        AtomicLong violations = new AtomicLong();
        return workload(make, uri, 32, WORK_NANOS, warmupMs, runMs, violations, side -> {
            Supplier<Runnable> permits = side.semaphore(key, PERMITS);
            return () -> {
                Runnable release = permits.get();
                if (holders.incrementAndGet() > PERMITS) {
                    violations.incrementAndGet();
                }
                return () -> {
                    holders.decrementAndGet();
                    release.run();
                };
            };
        });
    }

    static final long WORK_NANOS = 1_000_000;
    static final int PERMITS = 8;
    static final int CLIENTS = 4;

    /**
     * {@code threads} threads over {@link #CLIENTS} clients, each looping: acquire (timed), work
     * for {@code workNanos}, release. {@code acquirer} makes, for a thread's client, the action
     * that acquires and returns the release.
     */
    static Contended workload(Function<String, Side> make, String uri, int threads, long workNanos, long warmupMs,
            long runMs, AtomicLong violations, Function<Side, Supplier<Runnable>> acquirer) throws InterruptedException {
        List<Side> sides = new ArrayList<>();
        for (int c = 0; c < CLIENTS; c++) {
            sides.add(make.apply(uri));
        }
        AtomicBoolean measuring = new AtomicBoolean();
        AtomicBoolean stop = new AtomicBoolean();
        List<long[]> waits = new ArrayList<>();
        int[] counts = new int[threads];
        List<Thread> running = new ArrayList<>();
        CountDownLatch started = new CountDownLatch(threads);
        for (int t = 0; t < threads; t++) {
            long[] mine = new long[2_000_000];
            waits.add(mine);
            int index = t;
            Supplier<Runnable> acquire = acquirer.apply(sides.get(t % CLIENTS));
            Thread thread = new Thread(() -> {
                started.countDown();
                int n = 0;
                while (!stop.get()) {
                    long t0 = System.nanoTime();
                    Runnable release = acquire.get();
                    long waited = System.nanoTime() - t0;
                    if (measuring.get() && n < mine.length) {
                        mine[n++] = waited;
                    }
                    if (workNanos > 0) {
                        work(workNanos);
                    }
                    release.run();
                }
                counts[index] = n;
            });
            running.add(thread);
            thread.start();
        }
        started.await();
        Thread.sleep(warmupMs);
        measuring.set(true);
        long start = System.nanoTime();
        Thread.sleep(runMs);
        measuring.set(false);
        double seconds = (System.nanoTime() - start) / 1e9;
        stop.set(true);
        for (Thread thread : running) {
            thread.join(60_000);
        }
        sides.forEach(Side::close);
        int total = Arrays.stream(counts).sum();
        long[] all = new long[total];
        int at = 0;
        for (int t = 0; t < threads; t++) {
            System.arraycopy(waits.get(t), 0, all, at, counts[t]);
            at += counts[t];
        }
        Arrays.sort(all);
        double p50 = total == 0 ? 0 : all[(int) (total * 0.50)] / 1e6;
        double p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1e6;
        return new Contended(total / seconds, p50, p99, total, violations.get());
    }

    /** The 1 ms of work: sleeps (the thread yields the core, as real I/O would). */
    private static void work(long nanos) {
        try {
            Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    record Overhead(double rawPairs, double handlePairs, double facadePairs) {}

    /**
     * Acquire + release pairs per second on one thread, three ways over one {@link
     * LettuceTransport}: the raw {@code DLOCK.ACQUIRE key owner 30000} and {@code DLOCK.RELEASE key
     * owner} through {@link Transport#call} (a fixed owner: no work beyond the two round trips);
     * the handle API ({@code tryAcquire()} then {@code Lease.close()}); the thread facade ({@code
     * lock()} then {@code unlock()}). Rounds alternate the three so that noise on the shared
     * machine falls on each alike; the rates are over the sum of the rounds.
     */
    static Overhead overhead(String uri, int rounds, int pairsPerRound) {
        try (DLockClient client = new DLockClient(LettuceTransport.create(RedisURI.create(uri)))) {
            Transport transport = client.transport();
            String rawKey = "bench:o:raw";
            byte[] key = rawKey.getBytes(StandardCharsets.UTF_8);
            byte[] owner = UUID.randomUUID().toString().getBytes(StandardCharsets.UTF_8);
            byte[] acquire = "DLOCK.ACQUIRE".getBytes(StandardCharsets.UTF_8);
            byte[] release = "DLOCK.RELEASE".getBytes(StandardCharsets.UTF_8);
            byte[] leaseMs = "30000".getBytes(StandardCharsets.UTF_8);
            DLock handle = client.getLock("bench:o:handle");
            DLock facade = client.getLock("bench:o:facade");
            IntFunction<Long> raw = n -> {
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    Object granted = transport.call(key, acquire, key, owner, leaseMs).join();
                    if (granted == null) {
                        throw new IllegalStateException("raw DLOCK.ACQUIRE not granted");
                    }
                    transport.call(key, release, key, owner).join();
                }
                return System.nanoTime() - t0;
            };
            IntFunction<Long> handles = n -> {
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    handle.tryAcquire().orElseThrow().close();
                }
                return System.nanoTime() - t0;
            };
            IntFunction<Long> facades = n -> {
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    facade.lock();
                    facade.unlock();
                }
                return System.nanoTime() - t0;
            };
            raw.apply(pairsPerRound);
            handles.apply(pairsPerRound);
            facades.apply(pairsPerRound);
            long rawNanos = 0;
            long handleNanos = 0;
            long facadeNanos = 0;
            for (int r = 0; r < rounds; r++) {
                rawNanos += raw.apply(pairsPerRound);
                handleNanos += handles.apply(pairsPerRound);
                facadeNanos += facades.apply(pairsPerRound);
            }
            double pairs = (double) rounds * pairsPerRound;
            return new Overhead(pairs / (rawNanos / 1e9), pairs / (handleNanos / 1e9), pairs / (facadeNanos / 1e9));
        }
    }

    static String verdict(boolean met) {
        return met ? "met" : "MISSED";
    }

    /**
     * @param args {@code [--quick] report-path}
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        LETTUCE_LOG.setLevel(java.util.logging.Level.WARNING);
        boolean quick = args.length > 0 && args[0].equals("--quick");
        Path report = Path.of(args[args.length - 1]);
        int warmup = quick ? 200 : 2000;
        int pairs = quick ? 1000 : 10000;
        long cWarm = quick ? 500 : 2000;
        long cRun = quick ? 1500 : 10000;
        long sharedRun = quick ? 1500 : 8000;
        int overheadRounds = quick ? 3 : 10;
        int overheadPairs = quick ? 300 : 2000;
        try (RedisServer server = RedisServer.start(RedisServer.Kind.REDIS)) {
            String uri = server.uri();
            double dlockPairs = uncontended(Bench::dlock, uri, "bench:u:dlock", warmup, pairs);
            double redissonPairs = uncontended(Bench::redisson, uri, "bench:u:redisson", warmup, pairs);
            Contended dlockC = contended(Bench::dlock, uri, "bench:c:dlock", cWarm, cRun);
            Contended redissonC = contended(Bench::redisson, uri, "bench:c:redisson", cWarm, cRun);
            Contended dlockRw = readWrite(Bench::dlock, uri, "bench:rw:dlock", cWarm, sharedRun);
            Contended redissonRw = readWrite(Bench::redisson, uri, "bench:rw:redisson", cWarm, sharedRun);
            Contended dlockSem = semaphore(Bench::dlock, uri, "bench:s:dlock", cWarm, sharedRun);
            Contended redissonSem = semaphore(Bench::redisson, uri, "bench:s:redisson", cWarm, sharedRun);
            Overhead over = overhead(uri, overheadRounds, overheadPairs);

            double pairRatio = dlockPairs / redissonPairs;
            double handoffRatio = dlockC.handoffsPerSecond() / redissonC.handoffsPerSecond();
            double p99Ratio = dlockC.p99Ms() / Math.max(1e-9, redissonC.p99Ms());
            double rwRatio = dlockRw.handoffsPerSecond() / redissonRw.handoffsPerSecond();
            double semRatio = dlockSem.handoffsPerSecond() / redissonSem.handoffsPerSecond();
            double handleRatio = over.handlePairs() / over.rawPairs();
            double facadeRatio = over.facadePairs() / over.rawPairs();
            long violations = dlockC.violations() + redissonC.violations() + dlockRw.violations()
                    + redissonRw.violations() + dlockSem.violations() + redissonSem.violations();
            String text = String.format(Locale.ROOT, String.join("\n",
                    "# Java client benchmark: dlock vs Redisson",
                    "",
                    "Written by `make java-bench` (`clients/java/dlock-bench`, a plain harness with warm-up%s).",
                    "One redis-server 7 with the module (the `Redis` of the test kit), dlock's Java client over",
                    "Lettuce against Redisson %s, same server, same run, on the shared 2-core machine",
                    "(other work may run beside it: compare the two columns of one run, not runs).",
                    "",
                    "## Against Redisson (issue 29)",
                    "",
                    "| Scenario | dlock | Redisson | ratio | goal | verdict |",
                    "|---|---|---|---|---|---|",
                    "| `RLock`: uncontended lock/unlock pairs/s (1 thread) | %.0f | %.0f | %.2fx | >= 1.0x | %s |",
                    "| `RLock`: 16 threads in 4 clients, one lock: hand-offs/s | %.0f | %.0f | %.2fx | >= 5x | %s |",
                    "| `RLock`: 16 threads in 4 clients: p50 wait (ms) | %.2f | %.2f | %.2fx | | |",
                    "| `RLock`: 16 threads in 4 clients: p99 wait (ms) | %.2f | %.2f | %.2fx | <= 0.1x | %s |",
                    "| `RReadWriteLock`: 16 threads in 4 clients, 90%% reads, 1 ms of work: acquisitions/s | %.0f | %.0f | %.2fx | >= 2x | %s |",
                    "| `RReadWriteLock`: p99 wait (ms) | %.2f | %.2f | %.2fx | | |",
                    "| `RPermitExpirableSemaphore`: 32 threads in 4 clients, 8 permits, 1 ms of work: acquisitions/s | %.0f | %.0f | %.2fx | >= 2x | %s |",
                    "| `RPermitExpirableSemaphore`: p99 wait (ms) | %.2f | %.2f | %.2fx | | |",
                    "",
                    "Acquisitions measured: one lock dlock %d, Redisson %d; read-write dlock %d, Redisson %d;",
                    "semaphore dlock %d, Redisson %d. Exclusion checked by the harness in every contended",
                    "scenario (a writer alone, at most 8 permit holders): %d violations. dlock waits in the",
                    "server's queue (`BLOCK`) and is handed the lock, the read hold or the permit by the",
                    "release; Redisson polls and waits for a pub/sub message. Read-write locks are the",
                    "thread facades (`readLock()`/`writeLock()`, watchdog-renewed on both sides); permits are",
                    "taken with a fixed 10 s lease on both sides (`acquire(1, AcquireOptions...fixedLease)`,",
                    "`acquire(leaseTime, unit)`). The 1 ms of work is a `Thread.sleep` while holding.",
                    "",
                    "## Client overhead (issue 29: >= 0.9x of the raw commands)",
                    "",
                    "One thread, one `LettuceTransport`: the raw `DLOCK.ACQUIRE key owner 30000` + `DLOCK.RELEASE",
                    "key owner` sent with `Transport.call` (a fixed owner, nothing else), against the same two",
                    "commands sent by the client, which also makes an owner per acquisition, registers the",
                    "hold with the watchdog and checks the replies. Rounds of %d pairs alternate the three, %d",
                    "rounds each.",
                    "",
                    "| Path | pairs/s | ratio to raw | goal | verdict |",
                    "|---|---|---|---|---|",
                    "| raw commands through the transport | %.0f | 1.00x | | |",
                    "| handle API: `tryAcquire()` + `Lease.close()` | %.0f | %.2fx | >= 0.9x | %s |",
                    "| thread facade: `lock()` + `unlock()` | %.0f | %.2fx | >= 0.9x | %s |",
                    ""),
                    quick ? "; quick mode: short runs" : "", Redisson.class.getPackage().getImplementationVersion(),
                    dlockPairs, redissonPairs, pairRatio, verdict(pairRatio >= 1.0),
                    dlockC.handoffsPerSecond(), redissonC.handoffsPerSecond(), handoffRatio, verdict(handoffRatio >= 5),
                    dlockC.p50Ms(), redissonC.p50Ms(), dlockC.p50Ms() / Math.max(1e-9, redissonC.p50Ms()),
                    dlockC.p99Ms(), redissonC.p99Ms(), p99Ratio, verdict(p99Ratio <= 0.1),
                    dlockRw.handoffsPerSecond(), redissonRw.handoffsPerSecond(), rwRatio, verdict(rwRatio >= 2),
                    dlockRw.p99Ms(), redissonRw.p99Ms(), dlockRw.p99Ms() / Math.max(1e-9, redissonRw.p99Ms()),
                    dlockSem.handoffsPerSecond(), redissonSem.handoffsPerSecond(), semRatio, verdict(semRatio >= 2),
                    dlockSem.p99Ms(), redissonSem.p99Ms(), dlockSem.p99Ms() / Math.max(1e-9, redissonSem.p99Ms()),
                    dlockC.count(), redissonC.count(), dlockRw.count(), redissonRw.count(),
                    dlockSem.count(), redissonSem.count(), violations,
                    overheadPairs, overheadRounds,
                    over.rawPairs(), over.handlePairs(), handleRatio, verdict(handleRatio >= 0.9),
                    over.facadePairs(), facadeRatio, verdict(facadeRatio >= 0.9));
            Files.writeString(report, text);
            System.out.println(text);
        }
        System.exit(0);
    }
}
