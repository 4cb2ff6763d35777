package dev.dlock.testkit;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** {@code DLOCK.INFO} read with the raw client, for assertions. */
public final class LockInfo {
    private final Map<String, Object> fields;

    private LockInfo(Map<String, Object> fields) {
        this.fields = fields;
    }

    /**
     * @param server the server
     * @param key the key
     * @return the info, or null when the key does not exist
     */
    public static LockInfo of(RedisServer server, String key) {
        Object reply = server.call("DLOCK.INFO", key);
        if (reply == null) {
            return null;
        }
        List<?> items = (List<?>) reply;
        Map<String, Object> fields = new LinkedHashMap<>();
        for (int i = 0; i + 1 < items.size(); i += 2) {
            fields.put(items.get(i).toString(), items.get(i + 1));
        }
        return new LockInfo(fields);
    }

    /** @return the exclusive owner or null */
    public String owner() {
        Object o = fields.get("owner");
        return o == null ? null : o.toString();
    }

    /** @return the exclusive hold count */
    public long holds() {
        return (Long) fields.getOrDefault("holds", 0L);
    }

    /** @return the exclusive token */
    public long token() {
        return (Long) fields.getOrDefault("token", 0L);
    }

    /** @return the queue length */
    public long waiting() {
        return (Long) fields.getOrDefault("waiting", 0L);
    }

    /** @return the number of shared holders */
    public long shared() {
        return (Long) fields.getOrDefault("shared", 0L);
    }

    /** @return the pttl */
    public long pttl() {
        return (Long) fields.getOrDefault("pttl", -1L);
    }

    /** @return the holders entries */
    public List<?> holders() {
        return (List<?>) fields.get("holders");
    }

    /**
     * @param field a field name
     * @return its raw value
     */
    public Object get(String field) {
        return fields.get(field);
    }

    @Override
    public String toString() {
        return fields.toString();
    }
}
