package dev.dlock.jedis;

import dev.dlock.Transport;
import dev.dlock.testkit.LockContractTests;
import dev.dlock.testkit.RedisServer;

/** The contract over Jedis, against valkey-server. */
class JedisValkeyTest extends LockContractTests {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.VALKEY;
    }

    @Override
    protected Transport transport(RedisServer server) {
        return JedisTransport.create(server.host(), server.port());
    }
}
