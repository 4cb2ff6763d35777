package dev.dlock.shedlock;

import dev.dlock.testkit.RedisServer;

class ShedLockRedisTest extends ShedLockProviderTests {
    @Override
    RedisServer.Kind kind() {
        return RedisServer.Kind.REDIS;
    }
}
