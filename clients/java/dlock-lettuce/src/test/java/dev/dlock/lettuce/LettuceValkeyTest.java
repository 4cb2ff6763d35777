package dev.dlock.lettuce;

import dev.dlock.Transport;
import dev.dlock.testkit.LockContractTests;
import dev.dlock.testkit.RedisServer;
import io.lettuce.core.RedisURI;

/** The contract over Lettuce, against valkey-server. */
class LettuceValkeyTest extends LockContractTests {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.VALKEY;
    }

    @Override
    protected Transport transport(RedisServer server) {
        return LettuceTransport.create(RedisURI.create(server.uri()));
    }
}
