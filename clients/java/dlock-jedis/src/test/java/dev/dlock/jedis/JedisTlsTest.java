package dev.dlock.jedis;

import dev.dlock.DLockClient;
import dev.dlock.testkit.TlsAclTests;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.TrustManagerFactory;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisPool;
import redis.clients.jedis.JedisPoolConfig;

/** TLS and an ACL user over Jedis (docs/operations.md, "TLS and ACL users"). */
@SuppressWarnings("deprecation") // JedisPool: what most applications have
class JedisTlsTest extends TlsAclTests {
    @Override
    protected DLockClient connect(String host, int port, String caFile) throws Exception {
        KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
        trusted.load(null, null);
        try (InputStream pem = Files.newInputStream(Path.of(caFile))) {
            trusted.setCertificateEntry("ca", CertificateFactory.getInstance("X.509").generateCertificate(pem));
        }
        TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trusted);
        SSLContext tls = SSLContext.getInstance("TLS");
        tls.init(null, trust.getTrustManagers(), null);
        SSLParameters checkHostName = new SSLParameters();
        checkHostName.setEndpointIdentificationAlgorithm("HTTPS");
        JedisPool pool = new JedisPool(new JedisPoolConfig(), new HostAndPort(host, port),
                DefaultJedisClientConfig.builder().ssl(true).sslSocketFactory(tls.getSocketFactory())
                        .sslParameters(checkHostName).user("app1").password("app1-secret")
                        .socketTimeoutMillis(15_000).build());
        DLockClient dlock = new DLockClient(JedisTransport.create(pool));
        return dlock;
    }

    @Override
    protected String block() {
        return "client java-jedis";
    }

    @Override
    protected String source() {
        return "clients/java/dlock-jedis/src/test/java/dev/dlock/jedis/JedisTlsTest.java";
    }
}
