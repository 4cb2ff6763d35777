package dev.dlock;

/** No reply within the wait plus the client's margin: the connection was closed. */
public class DLockTimeoutException extends DLockException {
    /** @param message what timed out */
    public DLockTimeoutException(String message) {
        super(message);
    }

    /**
     * @param message what timed out
     * @param cause the library's timeout
     */
    public DLockTimeoutException(String message, Throwable cause) {
        super(message, cause);
    }
}
