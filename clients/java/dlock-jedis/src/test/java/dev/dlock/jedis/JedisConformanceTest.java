package dev.dlock.jedis;

import dev.dlock.testkit.ConformanceRunner;
import dev.dlock.testkit.RedisServer;
import java.io.IOException;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.TestFactory;

/** clients/conformance, every scenario, over Jedis (a pool with Jedis's defaults), on redis-server and on Valkey. */
class JedisConformanceTest {
    @TestFactory
    Stream<DynamicNode> redis() throws IOException {
        return new ConformanceRunner(RedisServer.Kind.REDIS,
                server -> JedisTransport.create(server.host(), server.port())).tests();
    }

    @TestFactory
    Stream<DynamicNode> valkey() throws IOException {
        return new ConformanceRunner(RedisServer.Kind.VALKEY,
                server -> JedisTransport.create(server.host(), server.port())).tests();
    }
}
