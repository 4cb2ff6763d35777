package dev.dlock.jedis;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.RedisSentinelClient;
import redis.clients.jedis.providers.PooledConnectionProvider;

/** What {@code JedisTransport.create(RedisSentinelClient)} refuses (no server needed: nothing connects). */
class JedisSentinelClientProviderTest {
    /** A client built with a provider that follows no Sentinel: refused at once, not at a failover. */
    @Test
    void aSentinelClientWhoseProviderFollowsNoSentinelIsRefused() {
        HostAndPort nowhere = new HostAndPort("127.0.0.1", 1);
        try (RedisSentinelClient client = RedisSentinelClient.builder()
                .masterName("m")
                .sentinels(Set.of(nowhere))
                .connectionProvider(new PooledConnectionProvider(nowhere))
                .build()) {
            IllegalArgumentException refused = assertThrows(IllegalArgumentException.class, () -> JedisTransport.create(client));
            assertTrue(refused.getMessage().contains("PooledConnectionProvider"), refused.getMessage());
        }
    }
}
