package dev.dlock;

/** {@code WRONGTYPE}: the key holds a value of another type. */
public class WrongTypeException extends DLockServerException {
    /** @param message the error reply */
    public WrongTypeException(String message) {
        super("WRONGTYPE", message);
    }
}
