package dev.dlock.lettuce;

import dev.dlock.Transport;
import dev.dlock.testkit.RedisSentinelServers;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.SentinelTests;
import io.lettuce.core.RedisURI;

/** The Lettuce transport through Sentinel, with failovers, on redis-server. */
class LettuceSentinelTest extends SentinelTests {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.REDIS;
    }

    @Override
    protected Transport transport(RedisSentinelServers servers) {
        return LettuceTransport.create(RedisURI.Builder
                .sentinel(servers.sentinel().host(), servers.sentinel().port(), RedisSentinelServers.MASTER_NAME)
                .withClientName(CLIENT_NAME)
                .build());
    }
}
