package dev.dlock.testkit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.dlock.DElection;
import dev.dlock.DLockClient;
import dev.dlock.DLockServerException;
import dev.dlock.Lease;
import dev.dlock.Leader;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * A transport over TLS as a restricted ACL user (docs/operations.md, "TLS and ACL users"): a
 * server with only a TLS port ({@link RedisServer#startTls}), the document's ACL line for an
 * application user as written there, and the document's connection block of the library (which
 * the subclass's {@link #connect} is, word for word: {@link #theDocumentedConnectionIsThisOne}
 * checks); then an acquire, a blocking hand-off, a renewal, a release and an election, and a
 * {@code NOPERM} for a key outside the user's pattern as a {@link DLockServerException}. A server
 * without TLS (Valkey from PyPI) skips, saying so.
 */
public abstract class TlsAclTests {
    /**
     * The document's connection block for the library.
     *
     * @param host the server's host
     * @param port its TLS port
     * @param caFile the CA's certificate (PEM)
     * @return a client as {@code app1}
     * @throws Exception when it cannot connect
     */
    protected abstract DLockClient connect(String host, int port, String caFile) throws Exception;

    /** @return the marker's name of the library's block ({@code client java-lettuce}, ...) */
    protected abstract String block();

    /** @return this test's source file, relative to the repository */
    protected abstract String source();

    /**
     * @param what the marker's name
     * @return the lines of the fenced block of docs/operations.md after {@code <!-- tls: what -->}
     */
    public static List<String> docBlock(String what) {
        List<String> lines;
        try {
            lines = Files.readAllLines(RedisServer.repo().resolve("docs/operations.md"));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        int start = lines.indexOf("<!-- tls: " + what + " -->");
        assertTrue(start >= 0, "docs/operations.md has no <!-- tls: " + what + " -->");
        assertTrue(lines.get(start + 1).startsWith("```"), "<!-- tls: " + what + " --> has no fence");
        int end = start + 2;
        while (!lines.get(end).startsWith("```")) {
            end++;
        }
        return lines.subList(start + 2, end);
    }

    private static List<String> normalised(List<String> lines) {
        return lines.stream().map(String::strip).filter(l -> !l.isEmpty()).toList();
    }

    @Test
    void theDocumentedConnectionIsThisOne() throws IOException {
        List<String> doc = normalised(docBlock(block()));
        List<String> here = normalised(Files.readAllLines(RedisServer.repo().resolve(source())));
        assertFalse(doc.isEmpty());
        assertTrue(java.util.Collections.indexOfSubList(here, doc) >= 0,
                "the " + block() + " block of docs/operations.md is not in " + source() + ":\n"
                        + String.join("\n", doc));
    }

    @Test
    void onRedis() throws Exception {
        run(RedisServer.Kind.REDIS);
    }

    @Test
    void onValkey() throws Exception {
        Assumptions.assumeTrue(RedisServer.binary(RedisServer.Kind.VALKEY) != null, "no valkey-server");
        run(RedisServer.Kind.VALKEY);
    }

    /** Runs the document's ACL line for app1: +@dlock where the server has it, else Redis 7.0's. */
    private static void createDocumentedAppUser(RedisServer server) {
        List<?> categories = (List<?>) server.call("ACL", "CAT");
        List<String> line = docBlock(categories.contains("dlock") ? "acl app" : "acl app redis-7.0");
        assertEquals(1, line.size());
        Object reply = server.call((Object[]) line.get(0).split("\\s+"));
        assertEquals("OK", String.valueOf(reply), line.get(0));
    }

    private void run(RedisServer.Kind kind) throws Exception {
        RedisServer server = RedisServer.startTls(kind);
        Assumptions.assumeTrue(server != null, kind + " has no TLS built in");
        try {
            createDocumentedAppUser(server);
            String ca = server.caFile().toString();
            try (DLockClient first = connect(server.host(), server.port(), ca);
                    DLockClient second = connect(server.host(), server.port(), ca)) {
                exercise(server, first, second);
            }
        } finally {
            server.close();
        }
    }

    private static void exercise(RedisServer server, DLockClient first, DLockClient second) throws Exception {
        String key = "app1:job";
        // Acquire with a fixed lease, then renew it by hand.
        Lease held = first.getLock(key).tryAcquire(Duration.ofSeconds(10)).orElseThrow();
        // The lease's deadline is the key's PEXPIRETIME: a renewal 50 ms or more later moves it on,
        // however slowly the replies come.
        long deadline = (Long) server.call("PEXPIRETIME", key);
        Poll.until("50 ms of the lease pass", () -> LockInfo.of(server, key).pttl() < 9_950);
        held.renew(Duration.ofSeconds(10));
        assertTrue((Long) server.call("PEXPIRETIME", key) > deadline, "the renewal moved the deadline on");

        // A blocking hand-off: the second client waits until the first releases.
        CompletableFuture<Lease> waiting = second.getLock(key).acquireAsync(Duration.ofSeconds(10));
        Poll.until("the waiter queues", () -> LockInfo.of(server, key).waiting() == 1);
        held.close();
        Lease granted = waiting.get(15, TimeUnit.SECONDS);
        assertTrue(granted.token() > held.token(), "the hand-off has a larger token");
        granted.close();
        assertNull(LockInfo.of(server, key));

        // An election: one leads, the other sees it.
        DElection election = first.getElection("app1:leader");
        Lease leadership = election.campaign("node-a");
        Optional<Leader> leader = second.getElection("app1:leader").leader();
        assertEquals("node-a", leader.orElseThrow().identity());
        assertEquals(leadership.token(), leader.orElseThrow().term());
        election.resign(leadership);
        assertTrue(second.getElection("app1:leader").leader().isEmpty());

        // Outside the user's key pattern: NOPERM, as a DLockServerException.
        DLockServerException refused = assertThrows(DLockServerException.class,
                () -> first.getLock("app2:job").tryAcquire());
        assertEquals("NOPERM", refused.code(), refused.getMessage());
        assertNull(LockInfo.of(server, "app2:job"));
    }
}
