package dev.dlock;

/** {@code DEADLOCK}: another owner already waits to upgrade its read hold on this lock. */
public class DeadlockException extends DLockServerException {
    /** @param message the error reply */
    public DeadlockException(String message) {
        super("DEADLOCK", message);
    }
}
