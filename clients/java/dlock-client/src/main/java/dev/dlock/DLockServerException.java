package dev.dlock;

/** An error reply from the server; {@link #code()} is its first word ({@code ERR}, {@code NOTOWNER}, ...). */
public class DLockServerException extends DLockException {
    private final String code;

    /**
     * @param code the error code, the reply's first word
     * @param message the full error reply
     */
    public DLockServerException(String code, String message) {
        super(message);
        this.code = code;
    }

    /** @return the error code, the reply's first word */
    public String code() {
        return code;
    }

    /**
     * Builds the exception that fits an error reply.
     *
     * @param message the error reply, as the server sent it
     * @return a {@link NotOwnerException}, {@link DeadlockException}, {@link WrongTypeException}
     *     or a plain {@link DLockServerException}
     */
    public static DLockServerException of(String message) {
        int space = message.indexOf(' ');
        String code = space < 0 ? message : message.substring(0, space);
        switch (code) {
            case "NOTOWNER":
                return new NotOwnerException(message);
            case "DEADLOCK":
                return new DeadlockException(message);
            case "WRONGTYPE":
                return new WrongTypeException(message);
            default:
                return new DLockServerException(code, message);
        }
    }

    /** @return true for refusals that a retry may overcome ({@code OOM}, {@code READONLY}, {@code LOADING}, ...) */
    public boolean isTransient() {
        return code.equals("OOM") || code.equals("READONLY") || code.equals("LOADING")
                || code.equals("MASTERDOWN") || code.equals("TRYAGAIN") || code.equals("CLUSTERDOWN")
                || code.equals("BUSY");
    }
}
