package dev.dlock.lettuce;

import dev.dlock.DLockClient;
import dev.dlock.testkit.TlsAclTests;
import io.lettuce.core.RedisURI;
import io.lettuce.core.SslOptions;
import java.io.File;

/** TLS and an ACL user over Lettuce (docs/operations.md, "TLS and ACL users"). */
class LettuceTlsTest extends TlsAclTests {
    @Override
    protected DLockClient connect(String host, int port, String caFile) {
        RedisURI uri = RedisURI.builder().withHost(host).withPort(port).withSsl(true)
                .withAuthentication("app1", "app1-secret").build();
        SslOptions ssl = SslOptions.builder().trustManager(new File(caFile)).build();
        DLockClient dlock = new DLockClient(LettuceTransport.create(uri, ssl));
        return dlock;
    }

    @Override
    protected String block() {
        return "client java-lettuce";
    }

    @Override
    protected String source() {
        return "clients/java/dlock-lettuce/src/test/java/dev/dlock/lettuce/LettuceTlsTest.java";
    }
}
