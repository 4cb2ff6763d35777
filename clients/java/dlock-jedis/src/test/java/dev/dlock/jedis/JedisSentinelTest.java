package dev.dlock.jedis;

import dev.dlock.Transport;
import dev.dlock.testkit.RedisSentinelServers;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.SentinelTests;
import java.util.Set;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisSentinelPool;

/** The Jedis transport through a JedisSentinelPool, with failovers, on redis-server. */
@SuppressWarnings("deprecation")
class JedisSentinelTest extends SentinelTests {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.REDIS;
    }

    @Override
    protected Transport transport(RedisSentinelServers servers) {
        JedisSentinelPool pool = new JedisSentinelPool(RedisSentinelServers.MASTER_NAME,
                Set.of(new HostAndPort(servers.sentinel().host(), servers.sentinel().port())),
                DefaultJedisClientConfig.builder().clientName(CLIENT_NAME).build(),
                DefaultJedisClientConfig.builder().build());
        closeables.addLast(pool);
        return JedisTransport.create(pool);
    }
}
