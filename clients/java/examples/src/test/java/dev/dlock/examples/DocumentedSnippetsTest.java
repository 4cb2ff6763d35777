package dev.dlock.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.dlock.DLockClient;
import dev.dlock.lettuce.LettuceTransport;
import dev.dlock.testkit.RedisServer;
import dev.dlock.testkit.Servers;
import io.lettuce.core.RedisURI;
import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.tools.DiagnosticCollector;
import javax.tools.JavaCompiler;
import javax.tools.JavaFileObject;
import javax.tools.StandardJavaFileManager;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * Every {@code ```java} block of clients/java/README.md and of the Java section of
 * docs/clients.md, compiled with javax.tools and run against the suite's redis-server (as
 * tests/docs.rs runs the server's documented sessions).
 *
 * <p>A block of statements becomes the body of a {@code static void run()} of a class of its own,
 * with the imports a reader would add and stubs of the helpers it calls but does not define (
 * {@code pay}, {@code write}, {@code order}, {@code worker}: each checks what it is given, a fence
 * is positive); {@code redis://localhost:6379} becomes the test server's URI. A block of members
 * (Spring {@code @Bean} methods) becomes the body of a class, and running it calls each method
 * with what the earlier ones returned, starting from a {@link DLockClient} on the test server.
 * A marker comment on the line before a fence, {@code <!-- snippet: compile-only: REASON -->},
 * compiles a block without running it (a Sentinel's), and {@code <!-- snippet: skip REASON -->}
 * leaves it out. A block that does not compile, or throws, fails the build.
 */
@ExtendWith(Servers.class)
class DocumentedSnippetsTest {
    private static final Pattern MARKER = Pattern.compile("<!--\\s*snippet:\\s*(compile-only|skip)\\b:?(.*?)-->");

    private static final String IMPORTS = String.join("\n",
            "import dev.dlock.*;",
            "import dev.dlock.jedis.*;",
            "import dev.dlock.lettuce.*;",
            "import dev.dlock.shedlock.*;",
            "import dev.dlock.spring.*;",
            "import io.lettuce.core.RedisURI;",
            "import java.time.Duration;",
            "import java.util.Set;",
            "import java.util.concurrent.TimeUnit;",
            "import net.javacrumbs.shedlock.core.LockProvider;",
            "import org.springframework.context.annotation.Bean;",
            "import org.springframework.integration.support.leader.LockRegistryLeaderInitiator;",
            "import redis.clients.jedis.DefaultJedisClientConfig;",
            "import redis.clients.jedis.HostAndPort;",
            "import redis.clients.jedis.JedisSentinelPool;",
            "import redis.clients.jedis.RedisSentinelClient;",
            "");

    private static final String STUBS = String.join("\n",
            "    static final Object order = new Object();",
            "    static final Worker worker = new Worker();",
            "    static final class Worker { void stop() {} }",
            "    static void fenced(long token) {",
            "        if (token <= 0) throw new AssertionError(\"a fence must be positive: \" + token);",
            "    }",
            "    static void pay(int order, long token) { fenced(token); }",
            "    static void write(Object order, long token) { fenced(token); }",
            "");

    record Block(String name, String code, String mode, String reason) {
        boolean members() {
            return code.stripLeading().startsWith("@");
        }
    }

    static Path repo() {
        Path dir = Path.of(System.getProperty("dlock.repo", System.getProperty("user.dir"))).toAbsolutePath();
        for (Path d = dir; d != null; d = d.getParent()) {
            if (Files.exists(d.resolve("docs/clients.md")) && Files.exists(d.resolve("clients/java/README.md"))) {
                return d;
            }
        }
        throw new IllegalStateException("no repository above " + dir);
    }

    static List<Block> blocksOf(String document, List<String> lines, int offset) {
        List<Block> found = new ArrayList<>();
        for (int i = 0; i < lines.size(); i++) {
            if (!lines.get(i).strip().equals("```java")) {
                continue;
            }
            int start = i + 1;
            int end = start;
            while (end < lines.size() && !lines.get(end).strip().equals("```")) {
                end++;
            }
            Matcher marker = MARKER.matcher(i > 0 ? lines.get(i - 1) : "");
            String mode = marker.find() ? marker.group(1) : "run";
            String reason = mode.equals("run") ? "" : marker.group(2).strip();
            found.add(new Block(document + ":" + (offset + start + 1),
                    String.join("\n", lines.subList(start, end)), mode, reason));
            i = end;
        }
        return found;
    }

    static List<Block> documentedBlocks() throws IOException {
        Path root = repo();
        List<String> readme = Files.readAllLines(root.resolve("clients/java/README.md"));
        List<String> guide = Files.readAllLines(root.resolve("docs/clients.md"));
        int start = guide.indexOf("## Java");
        assertTrue(start >= 0, "docs/clients.md has no ## Java section");
        int end = start + 1;
        while (end < guide.size() && !guide.get(end).startsWith("## ")) {
            end++;
        }
        List<Block> blocks = new ArrayList<>(blocksOf("clients/java/README.md", readme, 0));
        blocks.addAll(blocksOf("docs/clients.md#java", guide.subList(start, end), start));
        long fences = readme.stream().filter(l -> l.strip().equals("```java")).count()
                + guide.subList(start, end).stream().filter(l -> l.strip().equals("```java")).count();
        assertEquals(fences, blocks.size(), "every java fence is a block");
        return blocks;
    }

    static String source(String className, Block block, String uri) {
        String code = block.code().replace("redis://localhost:6379", uri);
        String body = block.members()
                ? code
                : "    static void run() throws Exception {\n" + code + "\n    }\n";
        return "package snippets;\n\n" + IMPORTS + "\n// " + block.name() + "\npublic class " + className
                + " {\n" + STUBS + body + "\n}\n";
    }

    @TestFactory
    List<DynamicTest> everyDocumentedJavaBlockCompilesAndRuns(@TempDir Path dir) throws Exception {
        RedisServer server = Servers.get(RedisServer.Kind.REDIS);
        List<Block> blocks = documentedBlocks();
        assertTrue(blocks.size() >= 4, "too few java blocks found: " + blocks.size());
        Path sources = Files.createDirectories(dir.resolve("src/snippets"));
        Path classes = Files.createDirectories(dir.resolve("classes"));
        List<Path> files = new ArrayList<>();
        for (int i = 0; i < blocks.size(); i++) {
            if (blocks.get(i).mode().equals("skip")) {
                continue;
            }
            Path file = sources.resolve("Snippet" + i + ".java");
            Files.writeString(file, source("Snippet" + i, blocks.get(i), server.uri()));
            files.add(file);
        }
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        DiagnosticCollector<JavaFileObject> diagnostics = new DiagnosticCollector<>();
        try (StandardJavaFileManager manager = javac.getStandardFileManager(diagnostics, Locale.ROOT,
                StandardCharsets.UTF_8)) {
            boolean ok = javac.getTask(null, manager, diagnostics,
                    List.of("-d", classes.toString(), "-classpath", System.getProperty("java.class.path"),
                            "-proc:none", "-Xlint:none"),
                    null, manager.getJavaFileObjectsFromPaths(files)).call();
            if (!ok) {
                StringBuilder why = new StringBuilder("the documented Java blocks do not compile:\n");
                diagnostics.getDiagnostics().forEach(d -> why.append(d).append('\n'));
                fail(why.toString());
            }
        }
        URLClassLoader loader = new URLClassLoader(new URL[] {classes.toUri().toURL()},
                DocumentedSnippetsTest.class.getClassLoader());
        List<DynamicTest> tests = new ArrayList<>();
        for (int i = 0; i < blocks.size(); i++) {
            Block block = blocks.get(i);
            if (!block.mode().equals("run")) {
                continue; // compiled above (compile-only) or left out (skip), each with its reason
            }
            String className = "snippets.Snippet" + i;
            tests.add(DynamicTest.dynamicTest(block.name(), () -> {
                Class<?> snippet = loader.loadClass(className);
                if (block.members()) {
                    runMembers(snippet, server);
                } else {
                    Method run = snippet.getDeclaredMethod("run");
                    run.setAccessible(true);
                    run.invoke(null);
                }
            }));
        }
        assertTrue(!tests.isEmpty());
        return tests;
    }

    /** Calls each method of a block of members with what is at hand, earlier results included. */
    private static void runMembers(Class<?> snippet, RedisServer server) throws Exception {
        Object instance = snippet.getDeclaredConstructor().newInstance();
        List<Object> pool = new ArrayList<>();
        try (DLockClient dlock = new DLockClient(LettuceTransport.create(RedisURI.create(server.uri())))) {
            pool.add(dlock);
            List<Method> left = new ArrayList<>(Arrays.stream(snippet.getDeclaredMethods())
                    .filter(m -> !Modifier.isStatic(m.getModifiers())).toList());
            assertTrue(!left.isEmpty(), snippet + " declares no method");
            boolean progress = true;
            while (!left.isEmpty() && progress) {
                progress = false;
                for (Method method : List.copyOf(left)) {
                    Object[] args = new Object[method.getParameterCount()];
                    boolean ready = true;
                    for (int p = 0; p < args.length && ready; p++) {
                        Class<?> type = method.getParameterTypes()[p];
                        args[p] = pool.stream().filter(type::isInstance).findFirst().orElse(null);
                        ready = args[p] != null;
                    }
                    if (ready) {
                        method.setAccessible(true);
                        Object made = method.invoke(instance, args);
                        assertTrue(made != null, method + " returned null");
                        pool.add(made);
                        left.remove(method);
                        progress = true;
                    }
                }
            }
            assertTrue(left.isEmpty(), "no arguments at hand for " + left);
        }
    }
}
