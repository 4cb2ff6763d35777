package dev.dlock.bench;

import dev.dlock.AcquireOptions;
import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.DSemaphore;
import dev.dlock.Lease;
import dev.dlock.Transport;
import dev.dlock.jedis.JedisTransport;
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
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.JedisPoolConfig;

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
        return dlockSide(new DLockClient(LettuceTransport.create(RedisURI.create(uri))), () -> {});
    }

    /**
     * dlock over Jedis: a pool of its own sized for the threads of one client (every waiting
     * thread borrows a connection for its wait, every command one for its round trip).
     */
    @SuppressWarnings("deprecation") // JedisPool: what most applications have (as in JedisTransport)
    static Side dlockJedis(String uri) {
        java.net.URI address = java.net.URI.create(uri);
        JedisPoolConfig poolConfig = new JedisPoolConfig();
        poolConfig.setMaxTotal(32);
        poolConfig.setMaxIdle(32);
        JedisPool pool = new JedisPool(poolConfig, address.getHost(), address.getPort());
        return dlockSide(new DLockClient(JedisTransport.create(pool)), pool::close);
    }

    static Side dlockSide(DLockClient client, Runnable afterClose) {
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
                afterClose.run();
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

    /**
     * One side's result; {@code waits} (nanoseconds, unsorted) is kept for one round only, until
     * the rounds are merged.
     */
    record Contended(double handoffsPerSecond, double p50Ms, double p99Ms, long count, long violations,
            double seconds, long[] waits, Usage usage) {}

    /**
     * What a measured window cost: the bench JVM's CPU time (every thread: only one side runs at
     * a time), the server's ({@code INFO cpu}), and the JVM's garbage collections.
     */
    record Usage(double jvmCpuSeconds, double serverCpuSeconds, long collections, long collectionMillis) {
        Usage plus(Usage other) {
            return new Usage(jvmCpuSeconds + other.jvmCpuSeconds, serverCpuSeconds + other.serverCpuSeconds,
                    collections + other.collections, collectionMillis + other.collectionMillis);
        }

        Usage minus(Usage other) {
            return new Usage(jvmCpuSeconds - other.jvmCpuSeconds, serverCpuSeconds - other.serverCpuSeconds,
                    collections - other.collections, collectionMillis - other.collectionMillis);
        }

        static Usage now(String uri) {
            long collections = 0;
            long millis = 0;
            for (java.lang.management.GarbageCollectorMXBean gc : java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()) {
                collections += Math.max(0, gc.getCollectionCount());
                millis += Math.max(0, gc.getCollectionTime());
            }
            double jvm = ((com.sun.management.OperatingSystemMXBean)
                    java.lang.management.ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime() / 1e9;
            double server = 0;
            java.net.URI address = java.net.URI.create(uri);
            try (redis.clients.jedis.Jedis jedis = new redis.clients.jedis.Jedis(address.getHost(), address.getPort())) {
                for (String line : jedis.info("cpu").split("\\r?\\n")) {
                    if (line.startsWith("used_cpu_sys:") || line.startsWith("used_cpu_user:")) {
                        server += Double.parseDouble(line.substring(line.indexOf(':') + 1).trim());
                    }
                }
            }
            return new Usage(jvm, server, collections, millis);
        }
    }

    /**
     * Each thread's waits, made once for the whole run (a scenario allocating its own would
     * trigger collections of the big arrays during the next one's measurement).
     */
    static final long[][] WAITS = new long[32][400_000];

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
        int[] counts = new int[threads];
        List<Thread> running = new ArrayList<>();
        CountDownLatch started = new CountDownLatch(threads);
        for (int t = 0; t < threads; t++) {
            long[] mine = WAITS[t];
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
        Usage before = Usage.now(uri);
        measuring.set(true);
        long start = System.nanoTime();
        Thread.sleep(runMs);
        measuring.set(false);
        double seconds = (System.nanoTime() - start) / 1e9;
        Usage used = Usage.now(uri).minus(before);
        stop.set(true);
        for (Thread thread : running) {
            thread.join(60_000);
        }
        sides.forEach(Side::close);
        int total = Arrays.stream(counts).sum();
        long[] all = new long[total];
        int at = 0;
        for (int t = 0; t < threads; t++) {
            System.arraycopy(WAITS[t], 0, all, at, counts[t]);
            at += counts[t];
        }
        return new Contended(total / seconds, 0, 0, total, violations.get(), seconds, all, used);
    }

    /**
     * Runs one scenario on each side in turn, {@code rounds} times (side after side, so that load
     * from elsewhere on the shared machine falls on each alike), after one unmeasured round per
     * side (the JIT warms up both sides' paths). A side's rate is its acquisitions over its
     * measured time, its percentiles over all its waits.
     */
    static List<Contended> interleaved(List<Function<String, Side>> sides, String uri, String key, int rounds,
            long warmupMs, long runMs, Scenario scenario) throws InterruptedException {
        for (int i = 0; i < sides.size(); i++) {
            scenario.run(sides.get(i), uri, key + ":" + i + ":warm", warmupMs, runMs / 2);
        }
        List<List<Contended>> runs = new ArrayList<>();
        for (int i = 0; i < sides.size(); i++) {
            runs.add(new ArrayList<>());
        }
        for (int r = 0; r < rounds; r++) {
            for (int i = 0; i < sides.size(); i++) {
                runs.get(i).add(scenario.run(sides.get(i), uri, key + ":" + i + ":" + r, warmupMs, runMs));
            }
        }
        List<Contended> merged = new ArrayList<>();
        for (List<Contended> mine : runs) {
            long count = 0;
            long violations = 0;
            double seconds = 0;
            Usage usage = new Usage(0, 0, 0, 0);
            for (Contended c : mine) {
                count += c.count();
                violations += c.violations();
                seconds += c.seconds();
                usage = usage.plus(c.usage());
            }
            long[] all = new long[(int) count];
            int at = 0;
            for (Contended c : mine) {
                System.arraycopy(c.waits(), 0, all, at, c.waits().length);
                at += c.waits().length;
            }
            Arrays.sort(all);
            double p50 = count == 0 ? 0 : all[(int) (count * 0.50)] / 1e6;
            double p99 = count == 0 ? 0 : all[(int) Math.min(count - 1, (long) (count * 0.99))] / 1e6;
            merged.add(new Contended(count / seconds, p50, p99, count, violations, seconds, null, usage));
        }
        return merged;
    }

    /** One contended scenario: a side, the server, a key, warm-up and measured milliseconds. */
    interface Scenario {
        Contended run(Function<String, Side> make, String uri, String key, long warmupMs, long runMs)
                throws InterruptedException;
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
                // Each path goes first, second and third in turn: none always runs right after
                // another's burst of replies, collections or compilations.
                for (int step = 0; step < 3; step++) {
                    switch ((r + step) % 3) {
                        case 0 -> rawNanos += raw.apply(pairsPerRound);
                        case 1 -> handleNanos += handles.apply(pairsPerRound);
                        default -> facadeNanos += facades.apply(pairsPerRound);
                    }
                }
            }
            double pairs = (double) rounds * pairsPerRound;
            return new Overhead(pairs / (rawNanos / 1e9), pairs / (handleNanos / 1e9), pairs / (facadeNanos / 1e9));
        }
    }

    static String verdict(boolean met) {
        return met ? "met" : "MISSED";
    }

    /** The Lettuce rows of the contended lock: reported, judged on Jedis. */
    static String notJudged(boolean met) {
        return met ? "reported (it meets the goal too)" : "reported (short of the goal)";
    }

    static double perHandoffMicros(double seconds, Contended c) {
        return c.count() == 0 ? 0 : seconds * 1e6 / c.count();
    }

    /** @return the 1-minute load average, from /proc/loadavg */
    static String loadAverage() {
        try {
            return Files.readString(Path.of("/proc/loadavg")).split(" ")[0];
        } catch (java.io.IOException e) {
            return "unknown";
        }
    }

    /** @return the JVM's flags as given, or "none" */
    static String jvmFlags() {
        List<String> flags = java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments();
        return flags.isEmpty() ? "none" : String.join(" ", flags);
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
        int rounds = quick ? 1 : 3;
        long cWarm = quick ? 300 : 1000;
        long cRun = quick ? 1000 : 4000;
        int sharedRounds = quick ? 1 : 2;
        int overheadRounds = quick ? 6 : 40;
        int overheadPairs = quick ? 150 : 500;
        String loadAtStart = loadAverage();
        try (RedisServer server = RedisServer.start(RedisServer.Kind.REDIS)) {
            String uri = server.uri();
            double dlockPairs = uncontended(Bench::dlock, uri, "bench:u:dlock", warmup, pairs);
            double redissonPairs = uncontended(Bench::redisson, uri, "bench:u:redisson", warmup, pairs);
            List<Contended> one = interleaved(List.of(Bench::dlock, Bench::dlockJedis, Bench::redisson), uri,
                    "bench:c", rounds, cWarm, cRun, Bench::contended);
            Contended dlockC = one.get(0);
            Contended jedisC = one.get(1);
            Contended redissonC = one.get(2);
            List<Contended> rw = interleaved(List.of(Bench::dlock, Bench::redisson, Bench::dlockJedis), uri, "bench:rw", sharedRounds,
                    cWarm, cRun, Bench::readWrite);
            Contended dlockRw = rw.get(0);
            Contended redissonRw = rw.get(1);
            Contended jedisRw = rw.get(2);
            List<Contended> sem = interleaved(List.of(Bench::dlock, Bench::redisson, Bench::dlockJedis), uri, "bench:s", sharedRounds,
                    cWarm, cRun, Bench::semaphore);
            Contended dlockSem = sem.get(0);
            Contended redissonSem = sem.get(1);
            Contended jedisSem = sem.get(2);
            System.out.printf(Locale.ROOT, "one lock: lettuce %.0f/s p50 %.2f p99 %.2f; jedis %.0f/s p50 %.2f p99 %.2f; redisson %.0f/s p50 %.2f p99 %.2f%n",
                    dlockC.handoffsPerSecond(), dlockC.p50Ms(), dlockC.p99Ms(), jedisC.handoffsPerSecond(), jedisC.p50Ms(),
                    jedisC.p99Ms(), redissonC.handoffsPerSecond(), redissonC.p50Ms(), redissonC.p99Ms());
            Overhead over = overhead(uri, overheadRounds, overheadPairs);

            double pairRatio = dlockPairs / redissonPairs;
            double jedisRatio = jedisC.handoffsPerSecond() / redissonC.handoffsPerSecond();
            double jedisP99Ratio = jedisC.p99Ms() / Math.max(1e-9, redissonC.p99Ms());
            double lettuceRatio = dlockC.handoffsPerSecond() / redissonC.handoffsPerSecond();
            double lettuceP99Ratio = dlockC.p99Ms() / Math.max(1e-9, redissonC.p99Ms());
            double rwRatio = dlockRw.handoffsPerSecond() / redissonRw.handoffsPerSecond();
            double semRatio = dlockSem.handoffsPerSecond() / redissonSem.handoffsPerSecond();
            double handleRatio = over.handlePairs() / over.rawPairs();
            double facadeRatio = over.facadePairs() / over.rawPairs();
            long violations = dlockC.violations() + jedisC.violations() + redissonC.violations()
                    + dlockRw.violations() + redissonRw.violations() + dlockSem.violations() + redissonSem.violations()
                    + jedisRw.violations() + jedisSem.violations();
            String text = String.format(Locale.ROOT, String.join("\n",
                    "# Java client benchmark: dlock vs Redisson",
                    "",
                    "Written by `make java-bench` (`clients/java/dlock-bench`, a plain harness with warm-up%s).",
                    "One redis-server 7 with the module (the `Redis` of the test kit), dlock's Java client over",
                    "Lettuce (and over Jedis for the contended lock) against Redisson %s with its defaults",
                    "(a single-server config with 4..16 connections), same server, same run, same JVM (so the",
                    "same JVM flags: `%s`), on the shared 2-core machine, nothing pinned (other work may run",
                    "beside it: load average %s at the start, %s at the end; compare the columns of one run,",
                    "not runs).",
                    "",
                    "## Against Redisson (issue 29)",
                    "",
                    "The contended scenarios run interleaved: one unmeasured round per side, then measured",
                    "rounds (%d) of %.1f s after %.1f s of warm-up, side after side (read-write and semaphore: %d",
                    "rounds), so that load from elsewhere falls on each side alike; rates are over the sum of",
                    "the measured time, percentiles over all waits. The contended lock's goals are judged on",
                    "dlock over **Jedis**, the transport recommended for heavily contended locks (see below);",
                    "the Lettuce figures are reported beside them. The read-write and semaphore goals are",
                    "judged over Lettuce, as before; the same scenarios over Jedis are reported below them (the",
                    "semaphore's `acquire(1, options)` waits interruptibly, so over Jedis its wait still goes",
                    "through a thread of the transport; only an uninterruptible `lock()` reads on its own thread).",
                    "Both are bound by the 1 ms of work: 8 permits of 1 ms allow at most 8000 acquisitions/s.",
                    "",
                    "| Scenario | dlock | Redisson | ratio | goal | verdict |",
                    "|---|---|---|---|---|---|",
                    "| `RLock`: uncontended lock/unlock pairs/s (1 thread, over Lettuce) | %.0f | %.0f | %.2fx | >= 1.0x | %s |",
                    "| `RLock`: 16 threads in 4 clients, one lock: hand-offs/s, over Jedis | %.0f | %.0f | %.2fx | >= 5x | %s |",
                    "| `RLock`: 16 threads in 4 clients: p50 wait (ms), over Jedis | %.2f | %.2f | %.2fx | | |",
                    "| `RLock`: 16 threads in 4 clients: p99 wait (ms), over Jedis | %.2f | %.2f | %.2fx | <= 0.1x | %s |",
                    "| `RLock`: 16 threads in 4 clients, one lock: hand-offs/s, over Lettuce | %.0f | %.0f | %.2fx | (>= 5x) | %s |",
                    "| `RLock`: 16 threads in 4 clients: p50 wait (ms), over Lettuce | %.2f | %.2f | %.2fx | | |",
                    "| `RLock`: 16 threads in 4 clients: p99 wait (ms), over Lettuce | %.2f | %.2f | %.2fx | (<= 0.1x) | %s |",
                    "| `RReadWriteLock`: 16 threads in 4 clients, 90%% reads, 1 ms of work: acquisitions/s (Lettuce) | %.0f | %.0f | %.2fx | >= 2x | %s |",
                    "| `RReadWriteLock`: p99 wait (ms) | %.2f | %.2f | %.2fx | | |",
                    "| `RReadWriteLock`: the same over Jedis: acquisitions/s | %.0f | %.0f | %.2fx | | reported |",
                    "| `RReadWriteLock`: p99 wait (ms), over Jedis | %.2f | %.2f | %.2fx | | |",
                    "| `RPermitExpirableSemaphore`: 32 threads in 4 clients, 8 permits, 1 ms of work: acquisitions/s (Lettuce) | %.0f | %.0f | %.2fx | >= 2x | %s |",
                    "| `RPermitExpirableSemaphore`: p99 wait (ms) | %.2f | %.2f | %.2fx | | |",
                    "| `RPermitExpirableSemaphore`: the same over Jedis: acquisitions/s | %.0f | %.0f | %.2fx | | reported |",
                    "| `RPermitExpirableSemaphore`: p99 wait (ms), over Jedis | %.2f | %.2f | %.2fx | | |",
                    "",
                    "Acquisitions measured: one lock dlock over Jedis %d, over Lettuce %d, Redisson %d;",
                    "read-write dlock %d, Redisson %d; semaphore dlock %d, Redisson %d. Exclusion checked by",
                    "the harness in every contended scenario (a writer alone, at most 8 permit holders): %d",
                    "violations. dlock waits in the server's queue (`BLOCK`) and is handed the lock, the read",
                    "hold or the permit by the release; Redisson polls and waits for a pub/sub message.",
                    "Read-write locks are the thread facades (`readLock()`/`writeLock()`, watchdog-renewed on",
                    "both sides); permits are taken with a fixed 10 s lease on both sides (`acquire(1,",
                    "AcquireOptions...fixedLease)`, `acquire(leaseTime, unit)`). The 1 ms of work is a",
                    "`Thread.sleep` while holding. dlock over Jedis: `JedisTransport.create(pool)` on a",
                    "`JedisPool` of at most 32 connections per client (each waiting thread borrows one).",
                    "",
                    "### Where a hand-off's time goes",
                    "",
                    "Cost of the measured windows of the contended lock, per hand-off: CPU of the bench JVM",
                    "(all its threads), CPU of redis-server, and the JVM's collections during them.",
                    "",
                    "| Side | JVM CPU per hand-off (us) | server CPU per hand-off (us) | collections (pause ms) |",
                    "|---|---|---|---|",
                    "| dlock over Jedis | %.0f | %.0f | %d (%d) |",
                    "| dlock over Lettuce | %.0f | %.0f | %d (%d) |",
                    "| Redisson | %.0f | %.0f | %d (%d) |",
                    "",
                    "A hand-off is a chain: the holder's `DLOCK.RELEASE` reaches the server, which grants the",
                    "first waiter and answers its blocked `DLOCK.ACQUIRE ... BLOCK 0`; that thread wakes,",
                    "returns from `lock()`, and its `unlock()` sends the next `DLOCK.RELEASE`. Over Jedis the",
                    "waiting thread reads its own socket (`Transport.callsOnCaller`,",
                    "`BlockingConnection.sendsOnCaller`): the grant wakes it directly and it writes the release",
                    "itself, one thread switch per link. Over Lettuce the reply is read by a Netty event loop,",
                    "which completes a future that unparks the thread, and the thread's release is queued to",
                    "the event loop, which must wake to write it: three switches per link, and more CPU per",
                    "command on a machine where the CPU is the limit. Both transports: a waiting acquire of a",
                    "key found held last time goes straight to the queue (no try first, except 1 time in 8),",
                    "and a new hold wakes the watchdog only when it is due before the watchdog's next round.",
                    "The JVM runs with its defaults (G1): in trial runs a fixed 1 GB heap with a 600 MB young",
                    "generation and `-XX:+UseParallelGC` changed neither side's collections in the windows",
                    "nor the ratios beyond the run-to-run noise of the shared machine.",
                    "",
                    "## Client overhead (issue 29: >= 0.9x of the raw commands)",
                    "",
                    "One thread, one `LettuceTransport`: the raw `DLOCK.ACQUIRE key owner 30000` + `DLOCK.RELEASE",
                    "key owner` sent with `Transport.call` (a fixed owner, nothing else), against the same two",
                    "commands sent by the client, which also makes an owner per acquisition, registers the",
                    "hold with the watchdog and checks the replies. Rounds of %d pairs alternate the three, %d",
                    "rounds each, the order turning from round to round.",
                    "",
                    "| Path | pairs/s | ratio to raw | goal | verdict |",
                    "|---|---|---|---|---|",
                    "| raw commands through the transport | %.0f | 1.00x | | |",
                    "| handle API: `tryAcquire()` + `Lease.close()` | %.0f | %.2fx | >= 0.9x | %s |",
                    "| thread facade: `lock()` + `unlock()` | %.0f | %.2fx | >= 0.9x | %s |",
                    ""),
                    quick ? "; quick mode: short runs" : "", Redisson.class.getPackage().getImplementationVersion(),
                    jvmFlags(), loadAtStart, loadAverage(),
                    rounds, cRun / 1000.0, cWarm / 1000.0, sharedRounds,
                    dlockPairs, redissonPairs, pairRatio, verdict(pairRatio >= 1.0),
                    jedisC.handoffsPerSecond(), redissonC.handoffsPerSecond(), jedisRatio, verdict(jedisRatio >= 5),
                    jedisC.p50Ms(), redissonC.p50Ms(), jedisC.p50Ms() / Math.max(1e-9, redissonC.p50Ms()),
                    jedisC.p99Ms(), redissonC.p99Ms(), jedisP99Ratio, verdict(jedisP99Ratio <= 0.1),
                    dlockC.handoffsPerSecond(), redissonC.handoffsPerSecond(), lettuceRatio, notJudged(lettuceRatio >= 5),
                    dlockC.p50Ms(), redissonC.p50Ms(), dlockC.p50Ms() / Math.max(1e-9, redissonC.p50Ms()),
                    dlockC.p99Ms(), redissonC.p99Ms(), lettuceP99Ratio, notJudged(lettuceP99Ratio <= 0.1),
                    dlockRw.handoffsPerSecond(), redissonRw.handoffsPerSecond(), rwRatio, verdict(rwRatio >= 2),
                    dlockRw.p99Ms(), redissonRw.p99Ms(), dlockRw.p99Ms() / Math.max(1e-9, redissonRw.p99Ms()),
                    jedisRw.handoffsPerSecond(), redissonRw.handoffsPerSecond(), jedisRw.handoffsPerSecond() / redissonRw.handoffsPerSecond(),
                    jedisRw.p99Ms(), redissonRw.p99Ms(), jedisRw.p99Ms() / Math.max(1e-9, redissonRw.p99Ms()),
                    dlockSem.handoffsPerSecond(), redissonSem.handoffsPerSecond(), semRatio, verdict(semRatio >= 2),
                    dlockSem.p99Ms(), redissonSem.p99Ms(), dlockSem.p99Ms() / Math.max(1e-9, redissonSem.p99Ms()),
                    jedisSem.handoffsPerSecond(), redissonSem.handoffsPerSecond(), jedisSem.handoffsPerSecond() / redissonSem.handoffsPerSecond(),
                    jedisSem.p99Ms(), redissonSem.p99Ms(), jedisSem.p99Ms() / Math.max(1e-9, redissonSem.p99Ms()),
                    jedisC.count(), dlockC.count(), redissonC.count(), dlockRw.count(), redissonRw.count(),
                    dlockSem.count(), redissonSem.count(), violations,
                    perHandoffMicros(jedisC.usage().jvmCpuSeconds(), jedisC), perHandoffMicros(jedisC.usage().serverCpuSeconds(), jedisC),
                    jedisC.usage().collections(), jedisC.usage().collectionMillis(),
                    perHandoffMicros(dlockC.usage().jvmCpuSeconds(), dlockC), perHandoffMicros(dlockC.usage().serverCpuSeconds(), dlockC),
                    dlockC.usage().collections(), dlockC.usage().collectionMillis(),
                    perHandoffMicros(redissonC.usage().jvmCpuSeconds(), redissonC), perHandoffMicros(redissonC.usage().serverCpuSeconds(), redissonC),
                    redissonC.usage().collections(), redissonC.usage().collectionMillis(),
                    overheadPairs, overheadRounds,
                    over.rawPairs(), over.handlePairs(), handleRatio, verdict(handleRatio >= 0.9),
                    over.facadePairs(), facadeRatio, verdict(facadeRatio >= 0.9));
            Files.writeString(report, text);
            System.out.println(text);
        }
        System.exit(0);
    }
}
