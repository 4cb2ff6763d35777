package dev.dlock.bench;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

/**
 * A standalone ZooKeeper server the bench starts: Debian's {@code zookeeper} package (3.8, its
 * jar {@code /usr/share/java/zookeeper.jar}, whose manifest names its dependencies; another with
 * {@code DLOCK_ZOOKEEPER_JAR}) run as {@code ZooKeeperServerMain} from a generated {@code
 * zoo.cfg}: a free loopback port, a temporary data folder, ZooKeeper's shipped settings otherwise
 * (tickTime 2000, a transaction log fsynced per write), sessions of 2 s allowed; ready once it
 * answers {@code ruok} with {@code imok}; {@link #close} kills it and removes the folder.
 */
final class ZooKeeperServer implements AutoCloseable {
    private final Path dir;
    private final Process process;
    private final int port;

    private ZooKeeperServer(Path dir, Process process, int port) {
        this.dir = dir;
        this.process = process;
        this.port = port;
    }

    static String jar() {
        String jar = System.getenv("DLOCK_ZOOKEEPER_JAR");
        return jar == null || jar.isEmpty() ? "/usr/share/java/zookeeper.jar" : jar;
    }

    static ZooKeeperServer start() throws IOException, InterruptedException {
        if (!Files.exists(Path.of(jar()))) {
            throw new IllegalStateException(jar() + " is missing: install Debian's zookeeper package (make deps)");
        }
        Path dir = Files.createTempDirectory("dlock-consensus-zk-");
        int port;
        try (ServerSocket socket = new ServerSocket()) {
            socket.bind(new InetSocketAddress("127.0.0.1", 0));
            port = socket.getLocalPort();
        }
        Path cfg = dir.resolve("zoo.cfg");
        Files.write(cfg, List.of(
                "tickTime=2000",
                "dataDir=" + dir.resolve("data"),
                "clientPort=" + port,
                "clientPortAddress=127.0.0.1",
                "minSessionTimeout=2000",
                "admin.enableServer=false",
                "4lw.commands.whitelist=ruok,mntr",
                "maxClientCnxns=0"));
        String java = ProcessHandle.current().info().command().orElse("java");
        Process process = new ProcessBuilder(java, "-Xmx512m", "-Dzookeeper.jmx.log4j.disable=true", "-cp", jar(),
                "org.apache.zookeeper.server.ZooKeeperServerMain", cfg.toString())
                .redirectErrorStream(true).redirectOutput(dir.resolve("server.log").toFile()).start();
        ZooKeeperServer server = new ZooKeeperServer(dir, process, port);
        Runtime.getRuntime().addShutdownHook(new Thread(server::close));
        long end = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < end && process.isAlive()) {
            try {
                if ("imok".equals(server.fourLetters("ruok").strip())) {
                    return server;
                }
            } catch (IOException e) {
                // not listening yet
            }
            Thread.sleep(20);
        }
        String log = server.log();
        server.close();
        throw new IOException("ZooKeeper did not answer ruok (alive: " + process.isAlive() + "); log: " + log);
    }

    String connectString() {
        return "127.0.0.1:" + port;
    }

    long pid() {
        return process.pid();
    }

    /** @return the answer to a four-letter command ({@code ruok}, {@code mntr}) */
    String fourLetters(String command) throws IOException {
        try (Socket socket = new Socket("127.0.0.1", port)) {
            socket.setSoTimeout(2000);
            OutputStream out = socket.getOutputStream();
            out.write(command.getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = socket.getInputStream();
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /**
     * @return the server JVM's heap in use right after a full collection ({@code jcmd PID GC.run},
     *     then {@code GC.heap_info}), in bytes, or -1: what the znodes, sessions and watches occupy,
     *     without the garbage a resident-memory figure would count
     */
    long heapAfterGc() {
        String jcmd = ProcessHandle.current().info().command().map(c -> Path.of(c).resolveSibling("jcmd").toString())
                .orElse("jcmd");
        try {
            run(jcmd, Long.toString(process.pid()), "GC.run");
            for (String line : run(jcmd, Long.toString(process.pid()), "GC.heap_info").split("\n")) {
                java.util.regex.Matcher m = java.util.regex.Pattern.compile("heap\\s+total \\d+K, used (\\d+)K").matcher(line);
                if (m.find()) {
                    return Long.parseLong(m.group(1)) * 1024;
                }
            }
        } catch (IOException e) {
            return -1;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return -1;
        }
        return -1;
    }

    private static String run(String... command) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        p.waitFor();
        return out;
    }

    /** @return a field of {@code mntr} ({@code zk_approximate_data_size}, ...), or -1 */
    long monitor(String field) {
        try {
            for (String line : fourLetters("mntr").split("\n")) {
                String[] kv = line.split("\t");
                if (kv.length == 2 && kv[0].equals(field)) {
                    return Long.parseLong(kv[1].strip());
                }
            }
        } catch (IOException | NumberFormatException e) {
            return -1;
        }
        return -1;
    }

    String version() {
        try {
            for (String line : fourLetters("mntr").split("\n")) {
                if (line.startsWith("zk_version\t")) {
                    return line.substring("zk_version\t".length()).split("[-,]")[0].strip();
                }
            }
        } catch (IOException e) {
            return "unknown";
        }
        return "unknown";
    }

    String log() {
        try {
            String log = Files.readString(dir.resolve("server.log"));
            return log.length() > 2000 ? log.substring(log.length() - 2000) : log;
        } catch (IOException e) {
            return "";
        }
    }

    @Override
    public synchronized void close() {
        process.destroyForcibly();
        try {
            process.waitFor();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // already gone
        }
    }
}
