package dev.dlock;

/** The connection failed (connect, I/O, closed while a command was in flight). */
public class DLockConnectionException extends DLockException {
    /**
     * @param message what happened
     * @param cause the transport's error
     */
    public DLockConnectionException(String message, Throwable cause) {
        super(message, cause);
    }
}
