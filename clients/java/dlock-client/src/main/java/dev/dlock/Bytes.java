package dev.dlock;

import java.nio.charset.StandardCharsets;
import java.util.List;

/** Encoding helpers for command arguments and replies. */
final class Bytes {
    private Bytes() {}

    static byte[] of(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    static byte[] of(long n) {
        return Long.toString(n).getBytes(StandardCharsets.US_ASCII);
    }

    static String str(Object reply) {
        if (reply instanceof byte[]) {
            return new String((byte[]) reply, StandardCharsets.UTF_8);
        }
        return reply == null ? null : reply.toString();
    }

    static long asLong(Object reply, String what) {
        if (reply instanceof Long) {
            return (Long) reply;
        }
        throw new DLockException("unexpected reply for " + what + ": " + describe(reply));
    }

    @SuppressWarnings("unchecked")
    static List<Object> asList(Object reply, String what) {
        if (reply instanceof List) {
            return (List<Object>) reply;
        }
        throw new DLockException("unexpected reply for " + what + ": " + describe(reply));
    }

    static String describe(Object reply) {
        if (reply instanceof byte[]) {
            return "\"" + str(reply) + "\"";
        }
        return String.valueOf(reply);
    }
}
