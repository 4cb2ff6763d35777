package dev.dlock.lettuce;

import dev.dlock.testkit.ConformanceRunner;
import dev.dlock.testkit.RedisServer;
import io.lettuce.core.RedisURI;
import java.io.IOException;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.TestFactory;

/** clients/conformance, every scenario, over Lettuce, on redis-server and on Valkey. */
class LettuceConformanceTest {
    @TestFactory
    Stream<DynamicNode> redis() throws IOException {
        return new ConformanceRunner(RedisServer.Kind.REDIS,
                server -> LettuceTransport.create(RedisURI.create(server.uri()))).tests();
    }

    @TestFactory
    Stream<DynamicNode> valkey() throws IOException {
        return new ConformanceRunner(RedisServer.Kind.VALKEY,
                server -> LettuceTransport.create(RedisURI.create(server.uri()))).tests();
    }
}
