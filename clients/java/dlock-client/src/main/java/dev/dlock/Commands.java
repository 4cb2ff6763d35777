package dev.dlock;

/** Command names and option words, encoded once. */
final class Commands {
    private Commands() {}

    static final byte[] ACQUIRE = Bytes.of("DLOCK.ACQUIRE");
    static final byte[] FAIR = Bytes.of("DLOCK.FAIR");
    static final byte[] MACQUIRE = Bytes.of("DLOCK.MACQUIRE");
    static final byte[] RELEASE = Bytes.of("DLOCK.RELEASE");
    static final byte[] RENEW = Bytes.of("DLOCK.RENEW");
    static final byte[] INFO = Bytes.of("DLOCK.INFO");
    static final byte[] LATCH = Bytes.of("DLOCK.LATCH");
    static final byte[] COUNTDOWN = Bytes.of("DLOCK.COUNTDOWN");
    static final byte[] AWAIT = Bytes.of("DLOCK.AWAIT");
    static final byte[] SHARED = Bytes.of("SHARED");
    static final byte[] LIMIT = Bytes.of("LIMIT");
    static final byte[] WEIGHT = Bytes.of("WEIGHT");
    static final byte[] BLOCK = Bytes.of("BLOCK");
    static final byte[] SESSION = Bytes.of("SESSION");
    static final byte[] CLIENT = Bytes.of("CLIENT");
    static final byte[] UNBLOCK = Bytes.of("UNBLOCK");
}
