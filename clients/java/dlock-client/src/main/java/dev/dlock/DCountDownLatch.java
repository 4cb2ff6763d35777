package dev.dlock;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A count-down latch (Redisson's {@code RCountDownLatch}): awaiters are woken by the server the
 * instant the count reaches zero. A latch always has a ttl, so one whose coordinator died ends.
 */
public final class DCountDownLatch {
    private final DLockClient client;
    private final String key;
    private final byte[] keyBytes;

    DCountDownLatch(DLockClient client, String key) {
        this.client = client;
        this.key = key;
        this.keyBytes = Bytes.of(key);
    }

    /** @return the key */
    public String getName() {
        return key;
    }

    /**
     * Creates the latch ({@code DLOCK.LATCH}).
     *
     * @param count the count, at least 1
     * @param ttl how long the latch lives at most
     * @return true when created, false when the key already held a latch (left unchanged)
     */
    public boolean trySetCount(long count, Duration ttl) {
        Object reply = client.callNow(keyBytes, Commands.LATCH, keyBytes,
                Bytes.of(count), Bytes.of(Math.max(1, ttl.toMillis())));
        return Bytes.asLong(reply, "DLOCK.LATCH") == 1;
    }

    /** Counts down by one. @return the count left (0 when open or missing) */
    public long countDown() {
        return countDown(1);
    }

    /**
     * Counts down by {@code n}; never re-sent automatically.
     *
     * @param n at least 1
     * @return the count left (0 when open or missing)
     */
    public long countDown(long n) {
        Object reply = client.callNow(keyBytes, Commands.COUNTDOWN, keyBytes, Bytes.of(n));
        return Bytes.asLong(reply, "DLOCK.COUNTDOWN");
    }

    /** @return the count now (0 when open or missing) */
    public long getCount() {
        Map<String, Object> info = Info.of(client.callNow(keyBytes, Commands.INFO, keyBytes));
        return info == null ? 0 : Info.longOf(info, "count");
    }

    /** @return the count now, or empty when the latch does not exist (opened, expired, never made) */
    public java.util.OptionalLong currentCount() {
        Map<String, Object> info = Info.of(client.callNow(keyBytes, Commands.INFO, keyBytes));
        return info == null ? java.util.OptionalLong.empty() : java.util.OptionalLong.of(Info.longOf(info, "count"));
    }

    /**
     * Waits until the latch opens (at once if it does not exist).
     *
     * @throws InterruptedException when interrupted (the wait is ended in the server)
     * @throws LatchBrokenException when it disappeared without opening
     */
    public void await() throws InterruptedException {
        awaitFor(0);
    }

    /**
     * Waits at most {@code timeout} for the latch to open.
     *
     * @param timeout the longest wait
     * @return true when open, false when the timeout passed first
     * @throws InterruptedException when interrupted (the wait is ended in the server)
     * @throws LatchBrokenException when it disappeared without opening
     */
    public boolean await(Duration timeout) throws InterruptedException {
        return awaitFor(Math.max(1, timeout.toMillis()));
    }

    /**
     * @param timeout the longest wait
     * @return completes with true when open, false at the timeout (cancel to stop waiting)
     */
    public CompletableFuture<Boolean> awaitAsync(Duration timeout) {
        return client.async(() -> await(timeout));
    }

    private boolean awaitFor(long timeoutMs) throws InterruptedException {
        client.checkOpen();
        // The whole call's bound (R4.6): the timeout plus the margin of R4.2, connect included.
        long margin = client.config().waitMargin().toNanos();
        long end = System.nanoTime() + (timeoutMs == 0 ? DLockClient.RESPONSE_TIMEOUT.toNanos()
                : TimeUnit.MILLISECONDS.toNanos(timeoutMs) + margin);
        BlockingConnection connection = client.openBlocking(keyBytes, end);
        long blockMs = timeoutMs == 0 ? 0
                : Math.max(1, (end - margin - System.nanoTime() + 999_999) / 1_000_000);
        CompletableFuture<Object> reply;
        try {
            reply = connection.send(Commands.AWAIT, keyBytes, Bytes.of(blockMs));
        } catch (RuntimeException e) {
            connection.discard();
            throw e;
        }
        Object value = client.awaitBlockingUntil(connection, reply, timeoutMs == 0 ? 0 : end, true, keyBytes,
                () -> {}, late -> {});
        if (value == null) {
            return false;
        }
        if (Bytes.asLong(value, "DLOCK.AWAIT") == 0) {
            throw new LatchBrokenException(key);
        }
        return true;
    }
}
