package dev.dlock;

import java.util.ArrayList;
import java.util.List;

/** What to ask the server for: the keys, the mode and the options of one acquisition. */
final class Request {
    final List<String> keys;
    final boolean fair;
    final boolean shared;
    final long limit;
    final long weight;
    final boolean session;
    final long leaseMs;
    final boolean renewed;

    Request(List<String> keys, boolean fair, boolean shared, long limit, long weight,
            boolean session, long leaseMs, boolean renewed) {
        if (keys.isEmpty()) {
            throw new IllegalArgumentException("at least one key");
        }
        if (leaseMs < 1) {
            throw new IllegalArgumentException("lease must be at least 1 ms");
        }
        this.keys = List.copyOf(keys);
        this.fair = fair;
        this.shared = shared;
        this.limit = limit;
        this.weight = weight;
        this.session = session;
        this.leaseMs = leaseMs;
        this.renewed = renewed;
    }

    Request withLease(long leaseMs, boolean renewed) {
        return new Request(keys, fair, shared, limit, weight, session, leaseMs, renewed);
    }

    boolean multi() {
        return keys.size() > 1;
    }

    byte[] routingKey() {
        return Bytes.of(keys.get(0));
    }

    /**
     * @param owner the owner on the wire
     * @param blockMs {@code -1}: no {@code BLOCK}; otherwise the {@code BLOCK} timeout (0: forever)
     */
    byte[][] acquireArgs(String owner, long blockMs) {
        List<byte[]> args = new ArrayList<>();
        if (multi()) {
            args.add(Commands.MACQUIRE);
            args.add(Bytes.of(keys.size()));
            for (String key : keys) {
                args.add(Bytes.of(key));
            }
        } else {
            args.add(fair ? Commands.FAIR : Commands.ACQUIRE);
            args.add(Bytes.of(keys.get(0)));
        }
        args.add(Bytes.of(owner));
        args.add(Bytes.of(leaseMs));
        if (shared) {
            args.add(Commands.SHARED);
            if (limit > 0) {
                args.add(Commands.LIMIT);
                args.add(Bytes.of(limit));
            }
            if (weight > 1) {
                args.add(Commands.WEIGHT);
                args.add(Bytes.of(weight));
            }
        }
        if (blockMs >= 0) {
            args.add(Commands.BLOCK);
            args.add(Bytes.of(blockMs));
        }
        if (session) {
            args.add(Commands.SESSION);
        }
        return args.toArray(new byte[0][]);
    }
}
