package dev.dlock.examples;

import dev.dlock.DLockClient;
import dev.dlock.lettuce.LettuceTransport;
import io.lettuce.core.RedisURI;

/** What every example shares: a client for DLOCK_URL (default redis://127.0.0.1:6379, `make run`). */
final class Examples {
    private Examples() {}

    static DLockClient connect() {
        String url = System.getenv().getOrDefault("DLOCK_URL", "redis://127.0.0.1:6379");
        return new DLockClient(LettuceTransport.create(RedisURI.create(url)));
    }
}
