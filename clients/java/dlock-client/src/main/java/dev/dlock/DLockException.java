package dev.dlock;

/** The base of every error the client raises (other than {@link LockLostException}). */
public class DLockException extends RuntimeException {
    /**
     * @param message what happened
     */
    public DLockException(String message) {
        super(message);
    }

    /**
     * @param message what happened
     * @param cause the underlying error
     */
    public DLockException(String message, Throwable cause) {
        super(message, cause);
    }
}
