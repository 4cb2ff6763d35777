package dev.dlock.jedis;

import dev.dlock.Transport;
import dev.dlock.testkit.RedisSentinelServers;
import redis.clients.jedis.RedisSentinelClient;

/** The Jedis transport through a RedisSentinelClient, with failovers, on redis-server. */
class JedisSentinelClientTest extends JedisSentinelTest {
    @Override
    protected Transport transport(RedisSentinelServers servers) {
        RedisSentinelClient client = RedisSentinelClient.builder()
                .masterName(RedisSentinelServers.MASTER_NAME)
                .sentinels(sentinels(servers))
                .sentinelClientConfig(sentinelConfig())
                .clientConfig(masterConfig())
                .build();
        closeables.addLast(client);
        return JedisTransport.create(client);
    }
}
