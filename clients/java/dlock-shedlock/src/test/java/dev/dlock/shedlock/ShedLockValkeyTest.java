package dev.dlock.shedlock;

import dev.dlock.testkit.RedisServer;

class ShedLockValkeyTest extends ShedLockProviderTests {
    @Override
    RedisServer.Kind kind() {
        return RedisServer.Kind.VALKEY;
    }
}
