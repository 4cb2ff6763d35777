package dev.dlock;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Decodes the field/value replies of {@code DLOCK.INFO}. */
final class Info {
    private Info() {}

    /** @return the fields in order, or null for a null reply */
    static Map<String, Object> of(Object reply) {
        if (reply == null) {
            return null;
        }
        if (reply instanceof Map) {
            Map<String, Object> out = new LinkedHashMap<>();
            ((Map<?, ?>) reply).forEach((k, v) -> out.put(Bytes.str(k), v));
            return out;
        }
        List<Object> items = Bytes.asList(reply, "DLOCK.INFO");
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i + 1 < items.size(); i += 2) {
            out.put(Bytes.str(items.get(i)), items.get(i + 1));
        }
        return out;
    }

    static long longOf(Map<String, Object> info, String field) {
        Object value = info.get(field);
        return value instanceof Long ? (Long) value : 0;
    }
}
