package dev.dlock;

/** {@code NOTOWNER}: the owner holds no such lock (free, expired, or held by another owner). */
public class NotOwnerException extends DLockServerException {
    /** @param message the error reply */
    public NotOwnerException(String message) {
        super("NOTOWNER", message);
    }
}
