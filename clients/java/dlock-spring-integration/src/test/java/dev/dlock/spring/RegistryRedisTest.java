package dev.dlock.spring;

import dev.dlock.testkit.RedisServer;

class RegistryRedisTest extends RegistryTests {
    @Override
    RedisServer.Kind kind() {
        return RedisServer.Kind.REDIS;
    }
}
