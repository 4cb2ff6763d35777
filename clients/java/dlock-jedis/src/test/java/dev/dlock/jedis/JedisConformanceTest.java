package dev.dlock.jedis;

import dev.dlock.testkit.ConformanceRunner;
import dev.dlock.testkit.RedisServer;
import java.io.IOException;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.TestFactory;

/**
 * clients/conformance, every scenario, over Jedis (a pool with Jedis's defaults), on redis-server. The
 * Lettuce transport runs the suite on Valkey too; what Jedis decides (its pool, timeouts and replies) does
 * not change with the server, and the run on one kind keeps {@code make test} within its time.
 */
class JedisConformanceTest {
    @TestFactory
    Stream<DynamicNode> redis() throws IOException {
        return new ConformanceRunner(RedisServer.Kind.REDIS,
                server -> JedisTransport.create(server.host(), server.port())).tests();
    }
}
