package dev.dlock.lettuce;

import dev.dlock.testkit.RedisServer;
import org.junit.jupiter.api.Disabled;
import org.junit.jupiter.api.Test;

/** The Lettuce transport through Sentinel (valkey-server --sentinel), with a failover, on Valkey. */
class LettuceSentinelValkeyTest extends LettuceSentinelTest {
    @Override
    protected RedisServer.Kind kind() {
        return RedisServer.Kind.VALKEY;
    }

    @Test
    @Disabled("runs on redis-server for both transports; a killed master is the same to the client on Valkey, "
            + "and its 9 s would take the Sentinel suites past their 30 s")
    @Override
    protected void aKilledMasterIsReplacedAndALeaseThatCannotBeRenewedInTimeIsLostWithinIt() {}
}
