package dev.dlock;

/** The latch disappeared without opening (its ttl ended, or it was deleted) while awaited. */
public class LatchBrokenException extends DLockException {
    /** @param key the latch's key */
    public LatchBrokenException(String key) {
        super("latch '" + key + "' disappeared without opening");
    }
}
