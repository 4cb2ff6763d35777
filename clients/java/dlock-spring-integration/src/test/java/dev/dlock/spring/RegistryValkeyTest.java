package dev.dlock.spring;

import dev.dlock.testkit.RedisServer;

class RegistryValkeyTest extends RegistryTests {
    @Override
    RedisServer.Kind kind() {
        return RedisServer.Kind.VALKEY;
    }
}
