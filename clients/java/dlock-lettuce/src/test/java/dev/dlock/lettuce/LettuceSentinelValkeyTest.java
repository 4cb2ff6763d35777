package dev.dlock.lettuce;

import dev.dlock.Transport;
import dev.dlock.testkit.RedisSentinelServers;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.SentinelTests;
import io.lettuce.core.RedisURI;
import org.junit.jupiter.api.Disabled;
import org.junit.jupiter.api.Test;

/** The Lettuce transport through Sentinel (valkey-server --sentinel), with a failover, on Valkey. */
class LettuceSentinelValkeyTest extends SentinelTests {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.VALKEY;
    }

    @Override
    protected Transport transport(RedisSentinelServers servers) {
        return LettuceTransport.create(RedisURI.Builder
                .sentinel(servers.sentinel().host(), servers.sentinel().port(), RedisSentinelServers.MASTER_NAME)
                .withClientName(CLIENT_NAME)
                .build());
    }

    @Test
    @Disabled("runs on redis-server for both transports; a killed master is the same to the client on Valkey, "
            + "and its 9 s would take the Sentinel suites past their 30 s")
    @Override
    protected void aKilledMasterIsReplacedAndALeaseThatCannotBeRenewedInTimeIsLostWithinIt() {}
}
