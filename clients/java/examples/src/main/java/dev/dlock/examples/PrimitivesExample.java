package dev.dlock.examples;

import dev.dlock.DCountDownLatch;
import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.DReadWriteLock;
import dev.dlock.DSemaphore;
import dev.dlock.Lease;
import java.time.Duration;
import java.util.Arrays;

/** Read-write lock, semaphore, multi-lock and latch. */
public final class PrimitivesExample {
    private PrimitivesExample() {}

    /**
     * @param args unused
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        try (DLockClient dlock = Examples.connect()) {
            DReadWriteLock catalog = dlock.getReadWriteLock("catalog");
            catalog.readLock().lock();
            try {
                System.out.println("reading the catalog");
            } finally {
                catalog.readLock().unlock();
            }

            DSemaphore payments = dlock.getSemaphore("api:payments", 10);
            try (Lease permit = payments.acquire(Duration.ofSeconds(5))) {
                System.out.println("calling the payment API with permit " + permit.owner());
            }

            DLock accounts = dlock.getMultiLock("{bank}:account:1", "{bank}:account:2");
            try (Lease both = accounts.acquire(Duration.ofSeconds(5))) {
                System.out.println("transfer under tokens " + Arrays.toString(both.tokens()));
            }

            DCountDownLatch batch = dlock.getCountDownLatch("batch:7");
            batch.trySetCount(1, Duration.ofMinutes(1));
            batch.countDown();
            System.out.println("latch open: " + batch.await(Duration.ofSeconds(1)));
        }
    }
}
