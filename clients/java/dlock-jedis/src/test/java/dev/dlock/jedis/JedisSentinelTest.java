package dev.dlock.jedis;

import dev.dlock.Transport;
import dev.dlock.testkit.RedisSentinelServers;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.SentinelTests;
import java.util.Set;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisClientConfig;
import redis.clients.jedis.JedisSentinelPool;

/**
 * The Jedis transport through a JedisSentinelPool, with failovers, on redis-server; subclasses
 * build the transport from another Jedis Sentinel client, with the same Sentinels and configs.
 */
@SuppressWarnings("deprecation")
class JedisSentinelTest extends SentinelTests {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.REDIS;
    }

    /** @return the test's one Sentinel */
    static Set<HostAndPort> sentinels(RedisSentinelServers servers) {
        return Set.of(new HostAndPort(servers.sentinel().host(), servers.sentinel().port()));
    }

    /** @return the config of connections to the master: named {@link #CLIENT_NAME} */
    static JedisClientConfig masterConfig() {
        return DefaultJedisClientConfig.builder().clientName(CLIENT_NAME).build();
    }

    /** @return the config of connections to the Sentinels */
    static JedisClientConfig sentinelConfig() {
        return DefaultJedisClientConfig.builder().build();
    }

    @Override
    protected Transport transport(RedisSentinelServers servers) {
        JedisSentinelPool pool = new JedisSentinelPool(RedisSentinelServers.MASTER_NAME, sentinels(servers),
                masterConfig(), sentinelConfig());
        closeables.addLast(pool);
        return JedisTransport.create(pool);
    }
}
