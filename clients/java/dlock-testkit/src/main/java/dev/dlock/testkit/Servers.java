package dev.dlock.testkit;

import java.util.EnumMap;
import java.util.Map;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A JUnit extension that starts one redis-server and one valkey-server (each with the module) per
 * test run, on free ports, and stops them when the run ends (and at JVM exit, whatever happens).
 * A test class uses {@code @ExtendWith(Servers.class)} and {@link #get(RedisServer.Kind)}.
 */
public final class Servers implements BeforeAllCallback {
    private static final Map<RedisServer.Kind, RedisServer> RUNNING = new EnumMap<>(RedisServer.Kind.class);
    private static final Map<RedisServer.Kind, String> MISSING = new EnumMap<>(RedisServer.Kind.class);

    /** The root store closes this (an AutoCloseable) at the end of the run. */
    private static final class Stopper implements AutoCloseable {
        @Override
        public void close() {
            synchronized (RUNNING) {
                RUNNING.values().forEach(RedisServer::close);
                RUNNING.clear();
            }
        }
    }

    @Override
    public void beforeAll(ExtensionContext context) {
        context.getRoot().getStore(ExtensionContext.Namespace.GLOBAL)
                .getOrComputeIfAbsent(Stopper.class, k -> new Stopper());
    }

    /**
     * The shared server of that kind, started on first use; skips the calling test (with the
     * reason) when the binary is missing.
     *
     * @param kind which server
     * @return the running server
     */
    public static RedisServer get(RedisServer.Kind kind) {
        synchronized (RUNNING) {
            RedisServer server = RUNNING.get(kind);
            if (server != null && server.isAlive()) {
                return server;
            }
            String missing = MISSING.get(kind);
            Assumptions.assumeTrue(missing == null, missing);
            if (RedisServer.binary(kind) == null) {
                MISSING.put(kind, "no " + kind + " binary (set DLOCK_VALKEY_SERVER or run scripts/fetch-valkey.sh)");
                Assumptions.abort(MISSING.get(kind));
            }
            server = RedisServer.start(kind);
            RUNNING.put(kind, server);
            return server;
        }
    }
}
