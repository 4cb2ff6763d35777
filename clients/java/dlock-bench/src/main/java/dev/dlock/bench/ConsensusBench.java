package dev.dlock.bench;

import dev.dlock.AcquireOptions;
import dev.dlock.DElection;
import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.Lease;
import dev.dlock.Leader;
import dev.dlock.jedis.JedisTransport;
import dev.dlock.testkit.RedisServer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.Watcher;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.JedisPoolConfig;

/**
 * dlock's Java client beside Apache Curator's recipes on ZooKeeper, on the same machine in one run
 * (issue 41): dlock (over Jedis) on redis-server with AOF {@code everysec} and, as a second
 * server, AOF {@code always}, beside a standalone ZooKeeper 3.8 ({@link ZooKeeperServer}). The
 * five scenarios, each system in turn within a round: (1) uncontended acquire + release, one
 * client; (2) 16 contenders on one lock, 1 ms of work; (3) a read-write lock 90/10 and a semaphore
 * of 8 permits for 32 contenders; (4) leader change, the leader a child JVM killed with SIGKILL,
 * ttl 2 s everywhere; (5) 10,000 locks held at once. Writes the ZooKeeper section of
 * docs/benchmarks-consensus.md (between its markers; the Go bench writes the etcd section).
 * Arguments: {@code [--quick] report-path}; the child: {@code --candidate system endpoint key}.
 */
public final class ConsensusBench {
    private ConsensusBench() {}

    static final String EVERYSEC = "dlock, AOF everysec";
    static final String ALWAYS = "dlock, AOF always";
    static final String ZOOKEEPER = "ZooKeeper + Curator";

    static final Duration HOLD_TTL = Duration.ofSeconds(10);
    static final Duration ELECTION_TTL = Duration.ofSeconds(2);
    static final long WORK_NANOS = 1_000_000;
    static final int CONNS = 4;

    /** One party's acquire: returns the release. */
    interface Acquirer {
        Runnable acquire() throws Exception;
    }

    /** One client connection of a system. */
    interface Conn extends AutoCloseable {
        Acquirer mutex(String key);

        Acquirer rw(String key, boolean read);

        Acquirer semaphore(String key, int permits);

        /** Waits until {@code value} leads; returns the resignation. */
        Runnable campaign(String key, String value) throws Exception;

        /** Calls {@code onLeader} with each leader's value as it changes. */
        AutoCloseable observe(String key, Consumer<String> onLeader) throws Exception;

        @Override
        void close();
    }

    interface Sys {
        String name();

        Conn conn() throws Exception;

        /** @return the server's memory figure (bytes) and a second one, for scenario 5 */
        long[] memory();

        List<String> candidateArgs(String key);
    }

    // ------------------------------------------------------------------ dlock

    @SuppressWarnings("deprecation") // JedisPool: what most applications have (as in JedisTransport)
    static Conn dlockConn(String uri, boolean session) {
        java.net.URI address = java.net.URI.create(uri);
        JedisPoolConfig poolConfig = new JedisPoolConfig();
        poolConfig.setMaxTotal(64);
        poolConfig.setMaxIdle(64);
        JedisPool pool = new JedisPool(poolConfig, address.getHost(), address.getPort());
        DLockClient client = new DLockClient(JedisTransport.create(pool));
        AcquireOptions hold = AcquireOptions.defaults().waitForever().lease(HOLD_TTL);
        return new Conn() {
            Acquirer of(DLock lock) {
                return () -> lock.acquire(hold)::close;
            }

            @Override
            public Acquirer mutex(String key) {
                return of(client.getLock(key));
            }

            @Override
            public Acquirer rw(String key, boolean read) {
                return of(read ? client.getReadWriteLock(key).readLock() : client.getReadWriteLock(key).writeLock());
            }

            /** Permits with a fixed lease (no watchdog), as in {@link Bench}: Curator's have none. */
            @Override
            public Acquirer semaphore(String key, int permits) {
                var semaphore = client.getSemaphore(key, permits);
                AcquireOptions fixed = AcquireOptions.defaults().waitForever().fixedLease(HOLD_TTL);
                return () -> semaphore.acquire(1, fixed)::close;
            }

            @Override
            public Runnable campaign(String key, String value) throws Exception {
                DElection election = client.getElection(key);
                Lease lead = election.campaign(value, AcquireOptions.defaults().waitForever().lease(ELECTION_TTL).session(session));
                return () -> election.resign(lead);
            }

            @Override
            public AutoCloseable observe(String key, Consumer<String> onLeader) {
                return client.getElection(key).observe(state -> state.map(Leader::identity).ifPresent(onLeader));
            }

            @Override
            public void close() {
                client.close();
                pool.close();
            }
        };
    }

    static Sys dlock(String label, RedisServer server, boolean session) {
        return new Sys() {
            @Override
            public String name() {
                return label;
            }

            @Override
            public Conn conn() {
                return dlockConn(server.uri(), session);
            }

            @Override
            public long[] memory() {
                String info = String.valueOf(server.call("INFO", "memory"));
                return new long[] {infoField(info, "used_memory"), rss(server)};
            }

            @Override
            public List<String> candidateArgs(String key) {
                return List.of("--candidate", session ? "dlock-session" : "dlock", server.uri(), key);
            }
        };
    }

    static long rss(RedisServer server) {
        String info = String.valueOf(server.call("INFO", "server"));
        return rss(infoField(info, "process_id"));
    }

    static long infoField(String info, String field) {
        for (String line : info.split("\\r?\\n")) {
            if (line.startsWith(field + ":")) {
                return Long.parseLong(line.substring(field.length() + 1).strip());
            }
        }
        return -1;
    }

    /** @return a process's resident memory in bytes ({@code /proc/PID/status}), or -1 */
    static long rss(long pid) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
                if (line.startsWith("VmRSS:")) {
                    return Long.parseLong(line.substring(6).strip().split("\\s+")[0]) * 1024;
                }
            }
        } catch (java.io.IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    // ------------------------------------------------------------------ ZooKeeper

    static CuratorFramework curator(String connect, Duration session) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.builder().connectString(connect)
                .sessionTimeoutMs((int) session.toMillis()).connectionTimeoutMs(5000)
                .retryPolicy(new ExponentialBackoffRetry(100, 3)).build();
        client.start();
        if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
            client.close();
            throw new IllegalStateException("Curator did not connect to " + connect);
        }
        return client;
    }

    static Conn curatorConn(String connect, Duration session) throws InterruptedException {
        CuratorFramework client = curator(connect, session);
        return new Conn() {
            @Override
            public Acquirer mutex(String key) {
                InterProcessMutex mutex = new InterProcessMutex(client, "/" + key);
                return () -> {
                    mutex.acquire();
                    return () -> release(mutex);
                };
            }

            @Override
            public Acquirer rw(String key, boolean read) {
                InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, "/" + key);
                InterProcessMutex lock = read ? rw.readLock() : rw.writeLock();
                return () -> {
                    lock.acquire();
                    return () -> release(lock);
                };
            }

            @Override
            public Acquirer semaphore(String key, int permits) {
                InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, "/" + key, permits);
                return () -> {
                    var lease = semaphore.acquire();
                    return () -> semaphore.returnLease(lease);
                };
            }

            @Override
            public Runnable campaign(String key, String value) throws Exception {
                LeaderLatch latch = new LeaderLatch(client, "/" + key, value);
                latch.start();
                latch.await();
                return () -> {
                    try {
                        latch.close();
                    } catch (java.io.IOException e) {
                        throw new IllegalStateException(e);
                    }
                };
            }

            /**
             * Curator has no observer of a LeaderLatch: a watch on the latch's children, and on
             * each change the lowest sequence node's id (what {@code LeaderLatch.getLeader()} reads).
             */
            @Override
            public AutoCloseable observe(String key, Consumer<String> onLeader) {
                String path = "/" + key;
                AtomicBoolean closed = new AtomicBoolean();
                Thread thread = new Thread(() -> {
                    String last = null;
                    while (!closed.get()) {
                        try {
                            CountDownLatch changed = new CountDownLatch(1);
                            List<String> children = client.getChildren().usingWatcher((Watcher) e -> changed.countDown())
                                    .forPath(path);
                            Optional<String> lowest = children.stream()
                                    .min(Comparator.comparing(c -> c.substring(Math.max(0, c.length() - 10))));
                            if (lowest.isPresent()) {
                                String value = new String(client.getData().forPath(path + "/" + lowest.get()), StandardCharsets.UTF_8);
                                if (!value.equals(last)) {
                                    last = value;
                                    onLeader.accept(value);
                                }
                            }
                            changed.await(200, TimeUnit.MILLISECONDS);
                        } catch (org.apache.zookeeper.KeeperException.NoNodeException e) {
                            // the node went between the list and the read: list again
                        } catch (InterruptedException e) {
                            return;
                        } catch (Exception e) {
                            if (closed.get()) {
                                return;
                            }
                        }
                    }
                }, "zk-observer-" + key);
                thread.setDaemon(true);
                thread.start();
                return () -> {
                    closed.set(true);
                    thread.interrupt();
                };
            }

            @Override
            public void close() {
                client.close();
            }
        };
    }

    static void release(InterProcessMutex mutex) {
        try {
            mutex.release();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    static Sys zookeeper(ZooKeeperServer server) {
        return new Sys() {
            @Override
            public String name() {
                return ZOOKEEPER;
            }

            @Override
            public Conn conn() throws InterruptedException {
                return curatorConn(server.connectString(), HOLD_TTL);
            }

            @Override
            public long[] memory() {
                return new long[] {server.heapAfterGc(), server.monitor("zk_approximate_data_size")};
            }

            @Override
            public List<String> candidateArgs(String key) {
                return List.of("--candidate", "zookeeper", server.connectString(), key);
            }
        };
    }

    // ------------------------------------------------------------------ scenarios

    /** One scenario's figures for one system over its rounds. */
    static final class Timing {
        long ops;
        long handoffs;
        double seconds;
        long errors;
        long violations;
        long heldNanos; // the counted holds' total time (the work, as slept)
        final List<long[]> waits = new ArrayList<>();
        long[] perParty;

        void merge(Timing o) {
            ops += o.ops;
            handoffs += o.handoffs;
            seconds += o.seconds;
            errors += o.errors;
            violations += o.violations;
            heldNanos += o.heldNanos;
            waits.addAll(o.waits);
            if (perParty == null) {
                perParty = new long[o.perParty.length];
            }
            for (int i = 0; i < o.perParty.length; i++) {
                perParty[i] += o.perParty[i];
            }
        }

        double rate() {
            return ops / seconds;
        }

        double handoffRate() {
            return handoffs / seconds;
        }

        double pctMs(double p) {
            long[] all = waits.stream().flatMapToLong(Arrays::stream).sorted().toArray();
            return all.length == 0 ? 0 : all[(int) (p * (all.length - 1))] / 1e6;
        }

        /** @return the mean time per hand-off beyond the hold (ms): what the lock adds */
        double gapMs() {
            return ops == 0 ? 0 : (seconds * 1e9 / ops - (double) heldNanos / ops) / 1e6;
        }

        long least() {
            return Arrays.stream(perParty).min().orElse(0);
        }

        long most() {
            return Arrays.stream(perParty).max().orElse(0);
        }
    }

    static Timing uncontended(Sys sys, String key, int warmup, long runMs) throws Exception {
        try (Conn conn = sys.conn()) {
            Acquirer m = conn.mutex(key);
            for (int i = 0; i < warmup; i++) {
                m.acquire().run();
            }
            Timing t = new Timing();
            t.perParty = new long[1];
            long[] lat = new long[2_000_000];
            int n = 0;
            long start = System.nanoTime();
            long end = start + runMs * 1_000_000;
            while (System.nanoTime() < end && n < lat.length) {
                long t0 = System.nanoTime();
                m.acquire().run();
                lat[n++] = System.nanoTime() - t0;
            }
            t.seconds = (System.nanoTime() - start) / 1e9;
            t.ops = n;
            t.perParty[0] = n;
            t.waits.add(Arrays.copyOf(lat, n));
            return t;
        }
    }

    interface PartyMaker {
        Acquirer make(Conn conn, int party);
    }

    /**
     * {@code parties} threads over {@value #CONNS} connections for {@code runMs}: each acquires
     * (timed), works 1 ms holding, releases. Only grants within the window count; a party waiting at
     * the end finishes its turn (every holder releases, so every wait ends). {@code limit}: how many
     * may hold at once (1 a mutex, 8 the semaphore; 0 a read-write lock, whose {@code reader}
     * parties share and whose writers are alone); the harness counts grants beyond it.
     */
    static Timing contend(Sys sys, int parties, int limit, java.util.function.IntPredicate reader, long warmMs, long runMs,
            PartyMaker maker) throws Exception {
        List<Conn> conns = new ArrayList<>();
        try {
            for (int c = 0; c < CONNS; c++) {
                conns.add(sys.conn());
            }
            Timing t = new Timing();
            t.perParty = new long[parties];
            long[][] waits = new long[parties][];
            int[] counts = new int[parties];
            AtomicInteger last = new AtomicInteger(-1);
            AtomicLong handoffs = new AtomicLong();
            AtomicLong errors = new AtomicLong();
            AtomicLong violations = new AtomicLong();
            AtomicLong heldNanos = new AtomicLong();
            AtomicInteger holders = new AtomicInteger();
            AtomicInteger readers = new AtomicInteger();
            AtomicInteger writers = new AtomicInteger();
            AtomicBoolean stop = new AtomicBoolean();
            List<Thread> threads = new ArrayList<>();
            long begin = System.nanoTime();
            long start = begin + warmMs * 1_000_000; // grants before it warm up (nodes, connections, JIT)
            long deadline = start + runMs * 1_000_000;
            for (int p = 0; p < parties; p++) {
                int party = p;
                Acquirer acquirer = maker.make(conns.get(p % CONNS), p);
                waits[p] = new long[200_000];
                Thread thread = new Thread(() -> {
                    while (!stop.get()) {
                        long t0 = System.nanoTime();
                        Runnable release;
                        try {
                            release = acquirer.acquire();
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            continue;
                        }
                        long granted = System.nanoTime();
                        boolean reads = reader.test(party);
                        if (limit > 0 ? holders.incrementAndGet() > limit
                                : reads ? readers.incrementAndGet() > 0 && writers.get() > 0
                                : writers.incrementAndGet() > 1 || readers.get() > 0) {
                            violations.incrementAndGet();
                        }
                        if (t0 >= start && granted < deadline && counts[party] < waits[party].length) {
                            waits[party][counts[party]++] = granted - t0;
                            if (last.getAndSet(party) != party) {
                                handoffs.incrementAndGet();
                            }
                        }
                        try {
                            Thread.sleep(WORK_NANOS / 1_000_000, (int) (WORK_NANOS % 1_000_000));
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                        if (t0 >= start && granted < deadline) {
                            heldNanos.addAndGet(System.nanoTime() - granted);
                        }
                        (limit > 0 ? holders : reads ? readers : writers).decrementAndGet();
                        try {
                            release.run();
                        } catch (RuntimeException e) {
                            errors.incrementAndGet();
                        }
                    }
                }, "party-" + p);
                threads.add(thread);
            }
            threads.forEach(Thread::start);
            Thread.sleep(warmMs + runMs);
            stop.set(true);
            for (Thread thread : threads) {
                thread.join(60_000);
            }
            t.seconds = runMs / 1000.0;
            for (int p = 0; p < parties; p++) {
                t.ops += counts[p];
                t.perParty[p] = counts[p];
                t.waits.add(Arrays.copyOf(waits[p], counts[p]));
            }
            t.handoffs = handoffs.get();
            t.errors = errors.get();
            t.violations = violations.get();
            t.heldNanos = heldNanos.get();
            return t;
        } finally {
            conns.forEach(Conn::close);
        }
    }

    /**
     * Scenario 4 once: a child JVM leads, the follower campaigns and an observer watches; the child
     * gets SIGKILL 300 ms after the follower's campaign began. @return the milliseconds from the
     * kill until the follower leads, and until the observer reports the follower
     */
    static double[] failover(Sys sys, String key) throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> cmd = new ArrayList<>(List.of(java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-Dslf4j.internal.verbosity=ERROR",
                "-cp", System.getProperty("java.class.path"),
                ConsensusBench.class.getName()));
        cmd.addAll(sys.candidateArgs(key));
        Process child = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try (Conn follower = sys.conn(); Conn observer = sys.conn()) {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            CompletableFuture<Boolean> led = CompletableFuture.supplyAsync(() -> {
                try {
                    String line;
                    while ((line = out.readLine()) != null) {
                        if (line.equals("leader")) {
                            return true;
                        }
                    }
                } catch (java.io.IOException e) {
                    return false;
                }
                return false;
            });
            if (!led.get(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException(sys.name() + ": the child candidate ended before it led");
            }
            CountDownLatch childSeen = new CountDownLatch(1);
            CompletableFuture<Long> followerSeen = new CompletableFuture<>();
            try (AutoCloseable watching = observer.observe(key, value -> {
                if (value.equals("child")) {
                    childSeen.countDown();
                } else if (value.equals("follower")) {
                    followerSeen.complete(System.nanoTime());
                }
            })) {
                if (!childSeen.await(20, TimeUnit.SECONDS)) {
                    throw new IllegalStateException(sys.name() + ": the observer never saw the child lead");
                }
                CompletableFuture<Object[]> won = CompletableFuture.supplyAsync(() -> {
                    try {
                        Runnable resign = follower.campaign(key, "follower");
                        return new Object[] {System.nanoTime(), resign};
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
                // Let the follower's campaign reach the server (a bench, not a test: the same fixed
                // pause before the kill for every system).
                Thread.sleep(300);
                long t0 = System.nanoTime();
                child.destroyForcibly(); // SIGKILL
                Object[] w = won.get(30, TimeUnit.SECONDS);
                long seen = followerSeen.get(30, TimeUnit.SECONDS);
                ((Runnable) w[1]).run();
                return new double[] {((long) w[0] - t0) / 1e6, (seen - t0) / 1e6};
            }
        } finally {
            child.destroyForcibly();
            child.waitFor();
        }
    }

    /** The child of scenario 4: leads, says so and waits to be killed. */
    static void candidate(String system, String endpoint, String key) throws Exception {
        Conn conn = switch (system) {
            case "dlock" -> dlockConn(endpoint, false);
            case "dlock-session" -> dlockConn(endpoint, true);
            default -> curatorConn(endpoint, ELECTION_TTL);
        };
        conn.campaign(key, "child");
        System.out.println("leader");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }

    /**
     * Scenario 5: 32 threads take {@code n} distinct locks and hold them (Curator's mutexes are the
     * thread's own: each thread releases its own). @return the memory figures' growth per lock
     */
    static double[] holdMany(Sys sys, int n) throws Exception {
        try (Conn conn = sys.conn()) {
            AtomicInteger next = new AtomicInteger();
            CountDownLatch warmed = new CountDownLatch(32);
            CountDownLatch go = new CountDownLatch(1);
            CountDownLatch held = new CountDownLatch(32);
            CountDownLatch measured = new CountDownLatch(1);
            AtomicLong errors = new AtomicLong();
            List<Thread> threads = new ArrayList<>();
            for (int p = 0; p < 32; p++) {
                Thread thread = new Thread(() -> {
                    List<Runnable> mine = new ArrayList<>();
                    boolean[] warm = {false};
                    try {
                        // Warm-up: each thread's connection (and its buffers on the server) exists
                        // before the first measure.
                        conn.mutex("many/warm/" + Thread.currentThread().getName()).acquire().run();
                        warm[0] = true;
                        warmed.countDown();
                        go.await();
                        for (int i = next.getAndIncrement(); i < n; i = next.getAndIncrement()) {
                            mine.add(conn.mutex("many/" + i).acquire());
                        }
                    } catch (Exception e) {
                        errors.incrementAndGet();
                        if (!warm[0]) {
                            warmed.countDown();
                        }
                    }
                    held.countDown();
                    try {
                        measured.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                    mine.forEach(Runnable::run);
                });
                threads.add(thread);
                thread.start();
            }
            warmed.await();
            long[] before = sys.memory();
            go.countDown();
            held.await();
            long[] after = sys.memory();
            measured.countDown();
            for (Thread thread : threads) {
                thread.join();
            }
            if (errors.get() > 0) {
                throw new IllegalStateException(sys.name() + ": " + errors.get() + " of the locks failed");
            }
            return new double[] {(after[0] - before[0]) / (double) n, (after[1] - before[1]) / (double) n};
        }
    }

    // ------------------------------------------------------------------ report

    interface Scenario {
        Timing run(Sys sys, int round) throws Exception;
    }

    /**
     * Lets the previous slot's background writes reach the disk before the next system is
     * measured: the everysec server's fsync of its last second (up to 500 ms) would otherwise
     * stall the next system's fsyncs (docs/benchmarks-consensus.md, "Why the goals were missed").
     */
    private static void settle() throws IOException, InterruptedException {
        Thread.sleep(1500);
        new ProcessBuilder("sync").inheritIO().start().waitFor();
    }

    public static void main(String[] args) throws Exception {
        if (args.length >= 4 && args[0].equals("--candidate")) {
            candidate(args[1], args[2], args[3]);
            return;
        }
        System.setProperty("slf4j.internal.verbosity", "ERROR"); // no provider: Curator's logs go nowhere, quietly
        boolean quick = args.length > 0 && args[0].equals("--quick");
        Path report = Path.of(args[args.length - 1]);
        int rounds = quick ? 1 : 3;
        long pairMs = quick ? 200 : 2000;
        long contMs = quick ? 300 : 3000;
        long warmMs = quick ? 200 : 1000;
        int failovers = quick ? 1 : 3;
        int many = quick ? 100 : 10_000;
        String loadAtStart = Bench.loadAverage();
        long begin = System.nanoTime();
        // Quick mode is the harness's test in `make test`: dlock with AOF everysec beside ZooKeeper
        // (the AOF always server adds nothing to test and a third of the time).
        try (RedisServer everysec = RedisServer.start(RedisServer.Kind.REDIS, "--appendonly", "yes", "--appendfsync", "everysec");
                RedisServer always = quick ? null
                        : RedisServer.start(RedisServer.Kind.REDIS, "--appendonly", "yes", "--appendfsync", "always");
                ZooKeeperServer zk = ZooKeeperServer.start()) {
            System.err.printf(Locale.ROOT, "servers up after %.1f s%n", (System.nanoTime() - begin) / 1e9);
            List<Sys> systems = quick ? List.of(dlock(EVERYSEC, everysec, false), zookeeper(zk))
                    : List.of(dlock(EVERYSEC, everysec, false), dlock(ALWAYS, always, false), zookeeper(zk));
            Map<String, Scenario> scenarios = new java.util.LinkedHashMap<>();
            scenarios.put("uncontended", (s, r) -> uncontended(s, "u-" + r, quick ? 20 : 200, pairMs));
            scenarios.put("mutex", (s, r) -> contend(s, 16, 1, p -> false, warmMs, contMs, (c, p) -> c.mutex("m-" + r)));
            scenarios.put("rw", (s, r) -> contend(s, 16, 0, p -> p % 10 != 0, warmMs, contMs, (c, p) -> c.rw("rw-" + r, p % 10 != 0)));
            scenarios.put("semaphore", (s, r) -> contend(s, 32, 8, p -> false, warmMs, contMs, (c, p) -> c.semaphore("s-" + r, 8)));
            Map<String, Map<String, Timing>> res = new HashMap<>();
            for (var sc : scenarios.entrySet()) {
                Map<String, Timing> bySys = new HashMap<>();
                systems.forEach(s -> bySys.put(s.name(), new Timing()));
                res.put(sc.getKey(), bySys);
                for (int r = 0; r < rounds; r++) {
                    for (int i = 0; i < systems.size(); i++) {
                        Sys s = systems.get((i + r) % systems.size()); // the order turns each round
                        if (!quick) {
                            settle();
                        }
                        bySys.get(s.name()).merge(sc.getValue().run(s, r));
                    }
                }
                for (Sys s : systems) {
                    Timing t = bySys.get(s.name());
                    System.err.printf(Locale.ROOT, "%s %s: %.0f/s (hand-offs %.0f/s) p50 %.2f p99 %.2f ms errors %d%n", sc.getKey(),
                            s.name(), t.rate(), t.handoffRate(), t.pctMs(0.5), t.pctMs(0.99), t.errors);
                }
            }
            List<Sys> foSystems = new ArrayList<>(systems);
            if (!quick) {
                foSystems.add(dlock(EVERYSEC + ", SESSION hold", everysec, true));
            }
            Map<String, List<double[]>> fos = new HashMap<>();
            for (int r = 0; r < failovers; r++) {
                for (int i = 0; i < foSystems.size(); i++) {
                    Sys s = foSystems.get((i + r) % foSystems.size());
                    double[] f = failover(s, "election-" + r + "-" + i);
                    fos.computeIfAbsent(s.name(), k -> new ArrayList<>()).add(f);
                    System.err.printf(Locale.ROOT, "failover %s: leads after %.0f ms, observed after %.0f ms%n", s.name(), f[0], f[1]);
                }
            }
            Map<String, double[]> mems = new HashMap<>();
            for (Sys s : systems) {
                double[] m = holdMany(s, many);
                mems.put(s.name(), m);
                System.err.printf(Locale.ROOT, "memory %s: %.0f / %.0f B per lock%n", s.name(), m[0], m[1]);
            }
            double total = (System.nanoTime() - begin) / 1e9;
            String text = report(quick, total, loadAtStart, rounds, pairMs, warmMs, contMs, failovers, many, systems, foSystems, res, fos,
                    mems, String.valueOf(everysec.call("INFO", "server")), zk.version());
            writeSection(report, "zookeeper", text);
            // Quick mode is the harness's test in `make test`: a failed acquisition or a broken
            // exclusion fails it (a full run reports them).
            long bad = res.values().stream().flatMap(m -> m.values().stream()).mapToLong(t -> t.errors + t.violations).sum();
            if (quick && bad > 0) {
                System.err.println("consensus bench: " + bad + " failed acquisitions or exclusion violations (see " + report + ")");
                System.exit(1);
            }
        }
        System.exit(0);
    }

    static String ms(double v) {
        return String.format(Locale.ROOT, "%.2f", v);
    }

    static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        s.sort(null);
        return s.get(s.size() / 2);
    }

    static String yes(boolean ok) {
        return ok ? "yes" : "**no**";
    }

    static String report(boolean quick, double total, String loadAtStart, int rounds, long pairMs, long warmMs, long contMs, int failovers,
            int many, List<Sys> systems, List<Sys> foSystems, Map<String, Map<String, Timing>> res,
            Map<String, List<double[]>> fos, Map<String, double[]> mems, String redisInfo, String zkVersion) {
        StringBuilder b = new StringBuilder();
        String redisVersion = redisInfo.lines().filter(l -> l.startsWith("redis_version:")).map(l -> l.substring(14).strip())
                .findFirst().orElse("unknown");
        b.append("## dlock beside ZooKeeper (Java)\n\n");
        b.append(String.format(Locale.ROOT, "Written by `make java-bench` (`clients/java/dlock-bench`, `ConsensusBench`%s) in %.0f s: dlock's Java\n",
                quick ? "; quick mode: short runs, figures only indicative" : "", total));
        b.append(String.format(Locale.ROOT, "client over Jedis on redis-server %s with the module, AOF on with `appendfsync everysec` and, as a second\n", redisVersion));
        b.append(String.format(Locale.ROOT, "server, `appendfsync always`, beside a standalone ZooKeeper %s (Debian's `zookeeper` package, a generated zoo.cfg:\n", zkVersion));
        b.append("tickTime 2000, a temporary dataDir, its transaction log fsynced per write as shipped) through Apache Curator ");
        b.append(Optional.ofNullable(CuratorFramework.class.getPackage().getImplementationVersion()).orElse("5.9.0"));
        b.append("\n(`InterProcessMutex`, `InterProcessReadWriteLock`, `InterProcessSemaphoreV2`, `LeaderLatch`). All three servers run at\n");
        b.append(String.format(Locale.ROOT, "once on loopback; each scenario runs %d round(s), every system in turn in each round, the order turning. %d CPUs,\n",
                rounds, Runtime.getRuntime().availableProcessors()));
        b.append(String.format(Locale.ROOT, "Java %s; load average %s at the start, %s at the end (the machine is shared: compare the rows of one run).\n\n",
                Runtime.version(), loadAtStart, Bench.loadAverage()));

        b.append(String.format(Locale.ROOT, "### 1. Uncontended acquire + release, one client\n\n%.1f s per round. Latency of one acquire + release pair.\n\n", pairMs / 1000.0));
        b.append("| System | pairs/s | p50 (ms) | p99 (ms) |\n|---|---|---|---|\n");
        for (Sys s : systems) {
            Timing t = res.get("uncontended").get(s.name());
            b.append(String.format(Locale.ROOT, "| %s | %.0f | %s | %s |\n", s.name(), t.rate(), ms(t.pctMs(0.5)), ms(t.pctMs(0.99))));
        }
        b.append(String.format(Locale.ROOT, "\n### 2. 16 contenders on one lock, 1 ms of work\n\n16 threads on 4 connections, %.1f s per round after %.1f s of warm-up (in\n",
                contMs / 1000.0, warmMs / 1000.0));
        b.append("scenarios 2 and 3: Curator's recipes create their parent nodes, the JIT compiles both sides); each holds the lock\n");
        b.append("for 1 ms (a sleep). A hand-off is a grant to another thread than the last holder; the wait is from the call to the\n");
        b.append("grant; fairness is the least and the most acquisitions of one thread over the run. Curator: an `InterProcessMutex`\n");
        b.append("per thread.\n\n");
        b.append("The 1 ms of work bounds every lock below 1000 hand-offs/s (a 1 ms sleep takes longer on a loaded machine); the\n");
        b.append("last column takes the holds (as slept) out of the time per hand-off: what the lock itself adds between a release and\n");
        b.append("the next grant.\n\n");
        b.append("| System | acquisitions/s | p50 wait (ms) | p99 wait (ms) | hand-offs/s | least / most served | per hand-off beyond the hold (ms) |\n"
                + "|---|---|---|---|---|---|---|\n");
        for (Sys s : systems) {
            Timing t = res.get("mutex").get(s.name());
            b.append(String.format(Locale.ROOT, "| %s | %.0f | %s | %s | %.0f | %d / %d | %s |\n", s.name(), t.rate(), ms(t.pctMs(0.5)),
                    ms(t.pctMs(0.99)), t.handoffRate(), t.least(), t.most(), ms(t.gapMs())));
        }
        b.append("\n### 3. Read-write lock 90/10 and semaphore 32 threads / 8 permits, 1 ms of work\n\n");
        b.append("Read-write: 16 threads (thread p writes when p % 10 == 0: 2 writers, 14 readers). Semaphore: 32 threads, 8 permits\n");
        b.append("(dlock `getSemaphore(key, 8)`, Curator `InterProcessSemaphoreV2(client, path, 8)`).\n\n");
        for (String sc : List.of("rw", "semaphore")) {
            b.append(String.format(Locale.ROOT, "| System | %s acquisitions/s | p50 wait (ms) | p99 wait (ms) |\n|---|---|---|---|\n",
                    sc.equals("rw") ? "read-write" : "semaphore"));
            for (Sys s : systems) {
                Timing t = res.get(sc).get(s.name());
                b.append(String.format(Locale.ROOT, "| %s | %.0f | %s | %s |\n", s.name(), t.rate(), ms(t.pctMs(0.5)), ms(t.pctMs(0.99))));
            }
            b.append("\n");
        }
        b.append("### 4. Leader change: the leader's process killed with SIGKILL\n\n");
        b.append("The leader is a child JVM (this bench re-run as a candidate) that campaigns first; the follower campaigns in the\n");
        b.append("bench's JVM, an observer watches (dlock `DElection.observe`; for Curator, which has no observer of a `LeaderLatch`, a\n");
        b.append("watch on the latch's children reading the lowest node's id, as `LeaderLatch.getLeader()` does); 300 ms after the\n");
        b.append("follower's campaign began, the child gets SIGKILL. Times from the kill until the follower's campaign returns (it\n");
        b.append(String.format(Locale.ROOT, "leads) and until the observer reports it. ttl %d s on every system: dlock `lease(2 s)` renewed by the watchdog,\n", ELECTION_TTL.toSeconds()));
        b.append(String.format(Locale.ROOT, "ZooKeeper a session timeout of 2000 ms (the leader's ephemeral node goes when its session expires). %d kill(s) per\n", failovers));
        b.append("system; the median and the worst. The SESSION row ties dlock's hold to the leader's connection too (`session(true)`):\n");
        b.append("the kill closes the connection and the server ends the hold at once; it is reported, not judged.\n\n");
        b.append("| System | follower leads after (median / max, ms) | observer sees it after (median / max, ms) |\n|---|---|---|\n");
        for (Sys s : foSystems) {
            List<double[]> f = fos.get(s.name());
            List<Double> lead = f.stream().map(x -> x[0]).toList();
            List<Double> seen = f.stream().map(x -> x[1]).toList();
            b.append(String.format(Locale.ROOT, "| %s | %s / %s | %s / %s |\n", s.name(), ms(median(lead)),
                    ms(lead.stream().mapToDouble(Double::doubleValue).max().orElse(0)), ms(median(seen)),
                    ms(seen.stream().mapToDouble(Double::doubleValue).max().orElse(0))));
        }
        b.append(String.format(Locale.ROOT, "\n### 5. %d locks held at once\n\n", many));
        b.append(String.format(Locale.ROOT, "32 threads take %d distinct locks and hold them; the server's memory before and after, divided by the\n", many));
        b.append("locks. dlock: `used_memory` from INFO, and the server's resident memory. ZooKeeper: the server JVM's heap in use\n");
        b.append("right after a full collection (`jcmd PID GC.run`, then `GC.heap_info`: its resident memory moves with the heap's\n");
        b.append("sizing, not with the data) and `zk_approximate_data_size` from `mntr` (the paths and data of its znodes; a Curator\n");
        b.append("lock is a persistent parent node and an ephemeral sequential child).\n\n");
        b.append("| System | memory per lock (bytes) | other measure per lock (bytes) |\n|---|---|---|\n");
        for (Sys s : systems) {
            double[] m = mems.get(s.name());
            boolean zk = s.name().startsWith("ZooKeeper");
            b.append(String.format(Locale.ROOT, "| %s | %.0f (%s) | %.0f (%s) |\n", s.name(), m[0], zk ? "heap in use after a full GC" : "used_memory",
                    m[1], zk ? "zk_approximate_data_size" : "resident memory"));
        }
        b.append("\n### Goals (issue 41) against ZooKeeper\n\n");
        b.append("| Goal | dlock, AOF everysec | met | dlock, AOF always | met |\n|---|---|---|---|---|\n");
        String zkName = ZOOKEEPER;
        List<String> dlocks = List.of(EVERYSEC, ALWAYS);
        double[] factors = {5, 2};
        for (String[] g : List.of(new String[] {"1. uncontended pairs/s", "uncontended"}, new String[] {"2. hand-offs/s", "mutex"})) {
            Timing o = res.get(g[1]).get(zkName);
            StringBuilder rates = new StringBuilder();
            StringBuilder p99s = new StringBuilder();
            for (int i = 0; i < 2; i++) {
                Timing d = res.get(g[1]).get(dlocks.get(i));
                if (d == null) {
                    rates.append(" not run (quick mode) | |");
                    p99s.append(" not run (quick mode) | |");
                    continue;
                }
                double rr = g[1].equals("mutex") ? d.handoffRate() / o.handoffRate() : d.rate() / o.rate();
                rates.append(String.format(Locale.ROOT, " %.1fx | %s |", rr, yes(rr >= factors[i])));
                double pr = d.pctMs(0.99) / o.pctMs(0.99);
                p99s.append(String.format(Locale.ROOT, " %.2fx (%s vs %s ms) | %s |", pr, ms(d.pctMs(0.99)), ms(o.pctMs(0.99)),
                        yes(pr <= 1 / factors[i])));
            }
            b.append(String.format(Locale.ROOT, "| %s >= 5x / 2x ZooKeeper's |%s\n", g[0], rates));
            b.append(String.format(Locale.ROOT, "| %s p99 <= 1/5 / 1/2 of ZooKeeper's |%s\n", g[0], p99s));
        }
        b.append("| 2. time per hand-off beyond the hold, vs ZooKeeper's |");
        for (int i = 0; i < 2; i++) {
            Timing t = res.get("mutex").get(dlocks.get(i));
            if (t == null) {
                b.append(" not run (quick mode) | |");
                continue;
            }
            double d = t.gapMs();
            double o = res.get("mutex").get(zkName).gapMs();
            b.append(String.format(Locale.ROOT, " %.2fx (%s vs %s ms) | reported |", d / o, ms(d), ms(o)));
        }
        b.append("\n");
        double zkLead = median(fos.get(zkName).stream().map(x -> x[0]).toList());
        b.append("| 4. failover time (median) <= 1x ZooKeeper's at ttl 2 s |");
        for (int i = 0; i < 2; i++) {
            if (!fos.containsKey(dlocks.get(i))) {
                b.append(" not run (quick mode) | |");
                continue;
            }
            double d = median(fos.get(dlocks.get(i)).stream().map(x -> x[0]).toList());
            b.append(String.format(Locale.ROOT, " %.2fx (%s vs %s ms) | %s |", d / zkLead, ms(d), ms(zkLead), yes(d <= zkLead)));
        }
        b.append("\n| 5. memory per lock | reported | | reported | |\n");
        List<String> errors = new ArrayList<>();
        for (var sc : res.entrySet()) {
            for (Sys s : systems) {
                long n = sc.getValue().get(s.name()).errors;
                if (n > 0) {
                    errors.add(sc.getKey() + " on " + s.name() + ": " + n);
                }
            }
        }
        long violations = res.values().stream().flatMap(m -> m.values().stream()).mapToLong(t -> t.violations).sum();
        b.append(errors.isEmpty() ? "\nNo acquisition failed." : "\nFailed acquisitions: " + String.join("; ", errors) + ".");
        b.append(String.format(Locale.ROOT, " Exclusion checked by the harness in scenarios 2 and 3 (one holder of the mutex, at most 8\n"
                + "of the semaphore, a writer alone): %d violations.\n", violations));
        return b.toString();
    }

    static final String HEAD = String.join("\n",
            "# dlock beside etcd and ZooKeeper",
            "",
            "Written by the benches of issue 41: `make go-bench` (dlock's Go client beside etcd's `concurrency` package) and",
            "`make java-bench` (dlock's Java client beside Apache Curator's recipes on ZooKeeper), each between its markers below.",
            "What each system guarantees is in [design.md](design.md#dlock-beside-etcd-and-zookeeper).",
            "",
            "");

    /**
     * Replaces the text between {@code <!-- name:begin -->} and {@code <!-- name:end -->} in the
     * report (adding the markers at the end when absent, the file when missing); the rest is kept.
     */
    static void writeSection(Path path, String name, String body) throws java.io.IOException {
        String begin = "<!-- " + name + ":begin -->\n";
        String end = "<!-- " + name + ":end -->\n";
        String doc = Files.exists(path) ? Files.readString(path) : "";
        if (doc.isEmpty()) {
            doc = HEAD;
        }
        String section = begin + body + end;
        int i = doc.indexOf(begin);
        int j = doc.indexOf(end);
        if (i >= 0 && j > i) {
            doc = doc.substring(0, i) + section + doc.substring(j + end.length());
        } else {
            if (!doc.endsWith("\n\n")) {
                doc += "\n";
            }
            doc += section;
        }
        Files.writeString(path, doc);
        System.err.println("wrote the " + name + " section of " + path);
    }
}
