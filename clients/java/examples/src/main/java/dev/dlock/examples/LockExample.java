package dev.dlock.examples;

import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.Lease;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/** The thread facade (Redisson's RLock) and the Lease handle, with the fencing token and the lost signal. */
public final class LockExample {
    private LockExample() {}

    /**
     * @param args unused
     * @throws Exception on failure
     */
    public static void main(String[] args) throws Exception {
        try (DLockClient dlock = Examples.connect()) {
            DLock lock = dlock.getLock("orders:42");

            // The thread facade: re-entrant, renewed by the watchdog until unlock.
            if (lock.tryLock(10, TimeUnit.SECONDS)) {
                try {
                    System.out.println("locked, token " + lock.getToken());
                } finally {
                    lock.unlock();
                }
            }

            // The handle API: any thread may close it; lost() says when to stop.
            try (Lease lease = lock.acquire(Duration.ofSeconds(10))) {
                lease.lost().thenAccept(reason -> System.out.println("lost: " + reason + ", stop now"));
                System.out.println("lease " + lease.owner() + " token " + lease.token());
            }
        }
    }
}
