package dev.dlock.bench;

import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.lettuce.LettuceTransport;
import dev.dlock.testkit.RedisServer;
import io.lettuce.core.RedisURI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.Lock;
import java.util.function.Function;
import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * dlock's Java client against Redisson's {@code RLock}, on one redis-server with the module, in
 * one run: uncontended lock/unlock pairs per second (one thread), and 16 threads in 4 clients
 * contending for one lock (hand-offs per second, p50/p99 wait). A plain harness with warm-up.
 * Arguments: {@code --quick} (short runs) and the report's path.
 */
public final class Bench {
    private Bench() {}

    interface Side extends AutoCloseable {
        Lock lock(String key);

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
            public void close() {
                client.shutdown();
            }
        };
    }

    record Contended(double handoffsPerSecond, double p50Ms, double p99Ms, long count) {}

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
        List<Side> sides = new ArrayList<>();
        for (int c = 0; c < 4; c++) {
            sides.add(make.apply(uri));
        }
        AtomicBoolean measuring = new AtomicBoolean();
        AtomicBoolean stop = new AtomicBoolean();
        List<long[]> waits = new ArrayList<>();
        int[] counts = new int[16];
        List<Thread> threads = new ArrayList<>();
        CountDownLatch started = new CountDownLatch(16);
        for (int t = 0; t < 16; t++) {
            long[] mine = new long[2_000_000];
            waits.add(mine);
            int index = t;
            Lock lock = sides.get(t % 4).lock(key);
            Thread thread = new Thread(() -> {
                started.countDown();
                int n = 0;
                while (!stop.get()) {
                    long t0 = System.nanoTime();
                    lock.lock();
                    long waited = System.nanoTime() - t0;
                    if (measuring.get() && n < mine.length) {
                        mine[n++] = waited;
                    }
                    lock.unlock();
                }
                counts[index] = n;
            });
            threads.add(thread);
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
        for (Thread thread : threads) {
            thread.join(60_000);
        }
        sides.forEach(Side::close);
        int total = Arrays.stream(counts).sum();
        long[] all = new long[total];
        int at = 0;
        for (int t = 0; t < 16; t++) {
            System.arraycopy(waits.get(t), 0, all, at, counts[t]);
            at += counts[t];
        }
        Arrays.sort(all);
        double p50 = total == 0 ? 0 : all[(int) (total * 0.50)] / 1e6;
        double p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1e6;
        return new Contended(total / seconds, p50, p99, total);
    }

    /**
     * @param args {@code [--quick] report-path}
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        boolean quick = args.length > 0 && args[0].equals("--quick");
        Path report = Path.of(args[args.length - 1]);
        int warmup = quick ? 200 : 2000;
        int pairs = quick ? 1000 : 10000;
        long cWarm = quick ? 500 : 2000;
        long cRun = quick ? 1500 : 10000;
        try (RedisServer server = RedisServer.start(RedisServer.Kind.REDIS)) {
            String uri = server.uri();
            double dlockPairs = uncontended(Bench::dlock, uri, "bench:u:dlock", warmup, pairs);
            double redissonPairs = uncontended(Bench::redisson, uri, "bench:u:redisson", warmup, pairs);
            Contended dlockC = contended(Bench::dlock, uri, "bench:c:dlock", cWarm, cRun);
            Contended redissonC = contended(Bench::redisson, uri, "bench:c:redisson", cWarm, cRun);
            String text = String.format(Locale.ROOT, String.join("\n",
                    "# Java client benchmark: dlock vs Redisson",
                    "",
                    "Written by `make java-bench` (`clients/java/dlock-bench`, a plain harness with warm-up%s).",
                    "One redis-server 7 with the module (the `Redis` of the test kit), dlock's Java client over",
                    "Lettuce against Redisson %s's `RLock`, same server, same run, on the shared 2-core machine",
                    "(other work may run beside it: compare the two columns of one run, not runs).",
                    "",
                    "| Scenario | dlock | Redisson `RLock` | ratio | goal |",
                    "|---|---|---|---|---|",
                    "| uncontended lock/unlock pairs/s (1 thread) | %.0f | %.0f | %.2fx | >= 1.0x |",
                    "| 16 threads in 4 clients, one lock: hand-offs/s | %.0f | %.0f | %.2fx | >= 5x |",
                    "| 16 threads in 4 clients: p50 wait (ms) | %.2f | %.2f | %.2fx | |",
                    "| 16 threads in 4 clients: p99 wait (ms) | %.2f | %.2f | %.2fx | <= 0.1x |",
                    "",
                    "Acquisitions measured: dlock %d, Redisson %d. dlock waits in the server's FIFO queue",
                    "(`BLOCK`) and is handed the lock by the release; Redisson polls and waits for a pub/sub",
                    "message. The read-write, semaphore and client-overhead scenarios of issue 29 are not",
                    "measured yet.",
                    ""),
                    quick ? "; quick mode: short runs" : "", Redisson.class.getPackage().getImplementationVersion(),
                    dlockPairs, redissonPairs, dlockPairs / redissonPairs,
                    dlockC.handoffsPerSecond(), redissonC.handoffsPerSecond(), dlockC.handoffsPerSecond() / redissonC.handoffsPerSecond(),
                    dlockC.p50Ms(), redissonC.p50Ms(), dlockC.p50Ms() / Math.max(1e-9, redissonC.p50Ms()),
                    dlockC.p99Ms(), redissonC.p99Ms(), dlockC.p99Ms() / Math.max(1e-9, redissonC.p99Ms()),
                    dlockC.count(), redissonC.count());
            Files.writeString(report, text);
            System.out.println(text);
        }
        System.exit(0);
    }
}
