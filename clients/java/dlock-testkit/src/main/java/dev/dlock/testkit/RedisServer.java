package dev.dlock.testkit;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.TrustManagerFactory;

/**
 * A real {@code redis-server} or {@code valkey-server} process with the dlock module loaded, on a
 * free port of 127.0.0.1 in a temporary directory. {@link #close()} stops it (also at JVM exit).
 */
public final class RedisServer implements AutoCloseable {
    /** Which server binary. */
    public enum Kind {
        /** redis-server ({@code DLOCK_REDIS_SERVER}, default {@code redis-server}). */
        REDIS,
        /** valkey-server ({@code DLOCK_VALKEY_SERVER}, default what scripts/fetch-valkey.sh prints). */
        VALKEY
    }

    private final Kind kind;
    private final String binary;
    private final Path dir;
    private final List<String> extraArgs;
    /** For a Sentinel: its configuration file's lines (null for a data server). */
    private final List<String> sentinelConfig;
    /** For a TLS-only server ({@link #startTls}): its certificates' folder, else null. */
    private Path certs;
    /** For a TLS-only server: a context that trusts its CA, else null. */
    private SSLContext ssl;
    private Process process;
    private int port;

    private RedisServer(Kind kind, String binary, List<String> extraArgs, List<String> sentinelConfig)
            throws IOException {
        this.kind = kind;
        this.binary = binary;
        this.extraArgs = extraArgs;
        this.sentinelConfig = sentinelConfig;
        this.dir = Files.createTempDirectory("dlock-java-" + kind.name().toLowerCase() + "-");
    }

    /** @return the repository's root (from the {@code dlock.repo} system property) */
    public static Path repo() {
        String repo = System.getProperty("dlock.repo");
        if (repo != null) {
            return Path.of(repo).toAbsolutePath().normalize();
        }
        Path here = Path.of("").toAbsolutePath();
        while (here != null && !Files.exists(here.resolve("Cargo.toml"))) {
            here = here.getParent();
        }
        return here == null ? Path.of("").toAbsolutePath() : here;
    }

    /** @return the module's path ({@code DLOCK_MODULE}, default target/release/libdlock.so) */
    public static Path module() {
        String module = System.getenv("DLOCK_MODULE");
        return module != null ? Path.of(module) : repo().resolve("target/release/libdlock.so");
    }

    /**
     * @param kind which server
     * @return the binary to run, or null (with the reason printed) when there is none
     */
    public static String binary(Kind kind) {
        if (kind == Kind.REDIS) {
            String env = System.getenv("DLOCK_REDIS_SERVER");
            return env != null ? env : "redis-server";
        }
        String env = System.getenv("DLOCK_VALKEY_SERVER");
        if (env != null && !env.isEmpty()) {
            return env;
        }
        Path cached = repo().resolve("target/valkey/valkey-server");
        if (Files.isExecutable(cached)) {
            return cached.toString();
        }
        try {
            Process fetch = new ProcessBuilder(repo().resolve("scripts/fetch-valkey.sh").toString())
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            String out = new String(fetch.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
            if (fetch.waitFor() == 0 && !out.isEmpty()) {
                return out;
            }
        } catch (IOException | InterruptedException e) {
            System.err.println("dlock tests: cannot fetch valkey-server: " + e);
        }
        return null;
    }

    /**
     * Starts a server.
     *
     * @param kind which server
     * @param extraArgs more command-line arguments ({@code --cluster-enabled yes}, ...)
     * @return the running server
     */
    public static RedisServer start(Kind kind, String... extraArgs) {
        String binary = binary(kind);
        if (binary == null) {
            throw new IllegalStateException("no " + kind + " binary");
        }
        if (!Files.exists(module())) {
            throw new IllegalStateException(module() + " is missing: run `cargo build --release` (make build) first");
        }
        return launch(kind, binary, List.of(extraArgs), null);
    }

    /**
     * Starts a Sentinel ({@code redis-server --sentinel}, or {@code valkey-server --sentinel}),
     * without the module, with a configuration file of its own in its temporary directory (a
     * Sentinel rewrites it).
     *
     * @param kind which server binary
     * @param config the configuration's lines ({@code sentinel monitor ...}, ...); port, bind and
     *     dir are added
     * @return the running Sentinel
     */
    public static RedisServer startSentinel(Kind kind, List<String> config) {
        String binary = binary(kind);
        if (binary == null) {
            throw new IllegalStateException("no " + kind + " binary");
        }
        return launch(kind, binary, List.of(), List.copyOf(config));
    }

    /**
     * Starts a server with only a TLS port ({@code port 0}, {@code tls-port}: the settings of
     * docs/operations.md's "TLS and ACL users"), its certificates made by
     * scripts/tls-test-certs.sh in its temporary directory; {@link #call} then speaks TLS as the
     * default user.
     *
     * @param kind which server
     * @param extraArgs more command-line arguments
     * @return the running server, or null (with the reason printed) when the binary has no TLS
     */
    public static RedisServer startTls(Kind kind, String... extraArgs) {
        String binary = binary(kind);
        if (binary == null) {
            throw new IllegalStateException("no " + kind + " binary");
        }
        RedisServer server;
        try {
            server = new RedisServer(kind, binary, List.of(extraArgs), null);
            server.certs = server.dir.resolve("tls");
            Process make = new ProcessBuilder(repo().resolve("scripts/tls-test-certs.sh").toString(),
                    server.certs.toString()).inheritIO().start();
            if (make.waitFor() != 0) {
                throw new IllegalStateException("scripts/tls-test-certs.sh failed");
            }
            server.ssl = trusting(server.certs.resolve("ca.crt"));
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalStateException("cannot make the certificates", e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
        try {
            server.spawn();
        } catch (IOException e) {
            String log = server.log();
            server.close();
            if (log.contains("TLS support") || log.contains("connection type tls")) {
                System.err.println("dlock tests: " + binary + " has no TLS built in");
                return null;
            }
            throw new IllegalStateException("cannot start " + kind + " with TLS", e);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(server::close));
        return server;
    }

    /** @return a TLS context that trusts the CA whose certificate (PEM) is {@code caFile} */
    private static SSLContext trusting(Path caFile) throws IOException, GeneralSecurityException {
        KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
        trusted.load(null, null);
        try (InputStream pem = Files.newInputStream(caFile)) {
            trusted.setCertificateEntry("ca", CertificateFactory.getInstance("X.509").generateCertificate(pem));
        }
        TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trusted);
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(null, trust.getTrustManagers(), null);
        return context;
    }

    /** @return the CA's certificate (PEM) of a TLS-only server */
    public Path caFile() {
        if (certs == null) {
            throw new IllegalStateException("not a TLS server");
        }
        return certs.resolve("ca.crt");
    }

    private static RedisServer launch(Kind kind, String binary, List<String> extraArgs, List<String> sentinelConfig) {
        try {
            RedisServer server = new RedisServer(kind, binary, extraArgs, sentinelConfig);
            server.spawn();
            Runtime.getRuntime().addShutdownHook(new Thread(server::close));
            return server;
        } catch (IOException e) {
            throw new IllegalStateException("cannot start " + kind, e);
        }
    }

    private static int freePort() throws IOException {
        try (ServerSocket socket = new ServerSocket()) {
            socket.bind(new InetSocketAddress("127.0.0.1", 0));
            return socket.getLocalPort();
        }
    }

    /** Stops the server and starts it again on the same port, with no state kept. */
    public synchronized void restart() {
        if (process != null) {
            process.destroyForcibly();
            try {
                process.waitFor();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        try {
            spawnOn(port);
        } catch (IOException e) {
            throw new IllegalStateException("restart failed", e);
        }
    }

    private void spawn() throws IOException {
        for (int attempt = 0; attempt < 5; attempt++) {
            try {
                spawnOn(freePort());
                return;
            } catch (IOException e) {
                // the port was taken in between: try another
            }
        }
        throw new IOException(kind + " did not start; log: " + log());
    }

    private void spawnOn(int chosen) throws IOException {
        for (int attempt = 0; attempt < 1; attempt++) {
            port = chosen;
            List<String> cmd;
            if (sentinelConfig != null) {
                Path config = dir.resolve("sentinel.conf");
                List<String> lines = new ArrayList<>(List.of("port " + port, "bind 127.0.0.1",
                        "dir " + dir, "logfile server.log", "daemonize no"));
                lines.addAll(sentinelConfig);
                Files.write(config, lines);
                cmd = new ArrayList<>(List.of(binary, config.toString(), "--sentinel"));
            } else if (certs != null) {
                cmd = new ArrayList<>(List.of(binary, "--port", "0", "--tls-port", Integer.toString(port),
                        "--tls-cert-file", certs.resolve("server.crt").toString(),
                        "--tls-key-file", certs.resolve("server.key").toString(),
                        "--tls-ca-cert-file", certs.resolve("ca.crt").toString(),
                        "--tls-auth-clients", "no",
                        "--bind", "127.0.0.1", "--dir", dir.toString(), "--logfile", "server.log",
                        "--daemonize", "no", "--save", "", "--appendonly", "no",
                        "--loadmodule", module().toString()));
            } else {
                cmd = new ArrayList<>(List.of(binary, "--port", Integer.toString(port),
                        "--bind", "127.0.0.1", "--dir", dir.toString(), "--logfile", "server.log",
                        "--daemonize", "no", "--save", "", "--appendonly", "no",
                        "--loadmodule", module().toString()));
            }
            cmd.addAll(extraArgs);
            process = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .redirectError(ProcessBuilder.Redirect.DISCARD).start();
            long end = System.nanoTime() + 20_000_000_000L;
            while (System.nanoTime() < end && process.isAlive()) {
                try (Raw raw = raw()) {
                    // A server that could not bind its port exits, but until it has,
                    // another test's server may answer there: only our own process counts.
                    // INFO answers while the data set loads; PING only once it is loaded.
                    String info = str(raw.call("INFO", "server"));
                    if ("PONG".equals(str(raw.call("PING"))) && info != null && info.lines().map(String::strip)
                            .anyMatch(l -> l.equals("process_id:" + process.pid()))) {
                        return;
                    }
                } catch (IOException e) {
                    // not listening yet
                }
                sleepQuietly(10);
            }
            process.destroyForcibly();
        }
        throw new IOException(kind + " did not start; log: " + log());
    }

    private static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** @return the server log */
    public String log() {
        try {
            return Files.readString(dir.resolve("server.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    /** @return which server */
    public Kind kind() {
        return kind;
    }

    /** @return 127.0.0.1 */
    public String host() {
        return "127.0.0.1";
    }

    /** @return the port */
    public int port() {
        return port;
    }

    /** @return {@code redis://127.0.0.1:port} */
    public String uri() {
        return "redis://127.0.0.1:" + port;
    }

    /** @return true while the process runs */
    public boolean isAlive() {
        return process != null && process.isAlive();
    }

    /**
     * Freezes the process (SIGSTOP), as a frozen VM or a long fork would: connections are still
     * accepted by the kernel and requests are buffered, but nothing is answered until {@link #thaw()}.
     */
    public void freeze() {
        signal("-STOP");
    }

    /** Lets a frozen process run again (SIGCONT): it then reads every request buffered meanwhile. */
    public void thaw() {
        signal("-CONT");
    }

    private void signal(String signal) {
        try {
            Process kill = new ProcessBuilder("kill", signal, Long.toString(process.pid())).inheritIO().start();
            if (kill.waitFor() != 0) {
                throw new IllegalStateException("kill " + signal + " failed");
            }
        } catch (IOException e) {
            throw new IllegalStateException("kill " + signal, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    /** Kills the process at once (SIGKILL), as a crash would. */
    public void kill() {
        if (process != null) {
            process.destroyForcibly();
            try {
                process.waitFor();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Sends one command on a fresh connection.
     *
     * @param args the command
     * @return the reply: Long, String, List, null; an error reply comes back as a {@link RedisError}
     */
    public Object call(Object... args) {
        try (Raw raw = raw()) {
            return raw.call(args);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * @param command a command name
     * @return true when the server knows the command
     */
    public boolean hasCommand(String command) {
        Object reply = call("COMMAND", "INFO", command);
        return reply instanceof List && !((List<?>) reply).isEmpty() && ((List<?>) reply).get(0) != null;
    }

    @Override
    public synchronized void close() {
        if (process != null) {
            process.destroy();
            try {
                if (!process.waitFor(5, java.util.concurrent.TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                }
            } catch (InterruptedException e) {
                process.destroyForcibly();
                Thread.currentThread().interrupt();
            }
            process = null;
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        } catch (IOException e) {
            // best effort
        }
    }

    /**
     * @return a new connection to this server, over TLS to a TLS-only one (as the default user)
     * @throws IOException when it cannot connect
     */
    public Raw raw() throws IOException {
        return ssl == null ? new Raw(host(), port) : new Raw(host(), port, ssl);
    }

    static String str(Object reply) {
        return reply == null ? null : reply.toString();
    }

    /** An error reply of {@link #call}. */
    public record RedisError(String message) {
        @Override
        public String toString() {
            return message;
        }
    }

    /** A minimal RESP2 connection for assertions (the tests never trust the code under test to check itself). */
    public static final class Raw implements AutoCloseable {
        private final Socket socket;
        private final InputStream in;
        private final OutputStream out;

        /**
         * @param host the host
         * @param port the port
         * @throws IOException when it cannot connect
         */
        public Raw(String host, int port) throws IOException {
            this(host, port, null);
        }

        /**
         * A connection over TLS (the server's name checked against its certificate).
         *
         * @param host the host
         * @param port the TLS port
         * @param ssl the TLS context (null: plain TCP)
         * @throws IOException when it cannot connect or the handshake fails
         */
        public Raw(String host, int port, SSLContext ssl) throws IOException {
            Socket plain = new Socket();
            plain.connect(new InetSocketAddress(host, port), 2000);
            if (ssl != null) {
                SSLSocket tls = (SSLSocket) ssl.getSocketFactory().createSocket(plain, host, port, true);
                SSLParameters parameters = tls.getSSLParameters();
                parameters.setEndpointIdentificationAlgorithm("HTTPS");
                tls.setSSLParameters(parameters);
                tls.setSoTimeout(5_000);
                tls.startHandshake();
                socket = tls;
            } else {
                socket = plain;
            }
            socket.setSoTimeout(30_000);
            in = new BufferedInputStream(socket.getInputStream());
            out = new BufferedOutputStream(socket.getOutputStream());
        }

        /**
         * @param args the command
         * @return the reply
         * @throws IOException on I/O errors
         */
        public Object call(Object... args) throws IOException {
            send(args);
            return read();
        }

        /**
         * Writes a command without reading its reply.
         *
         * @param args the command
         * @throws IOException on I/O errors
         */
        public void send(Object... args) throws IOException {
            StringBuilder sb = new StringBuilder();
            out.write(("*" + args.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
            for (Object arg : args) {
                byte[] b = arg.toString().getBytes(StandardCharsets.UTF_8);
                out.write(("$" + b.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
                out.write(b);
                out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
            }
            out.flush();
            sb.setLength(0);
        }

        /**
         * @return the next reply
         * @throws IOException on I/O errors
         */
        public Object read() throws IOException {
            int type = in.read();
            String line = line();
            switch (type) {
                case '+':
                    return line;
                case '-':
                    return new RedisError(line);
                case ':':
                    return Long.parseLong(line);
                case '$': {
                    int n = Integer.parseInt(line);
                    if (n < 0) {
                        return null;
                    }
                    byte[] b = in.readNBytes(n);
                    in.readNBytes(2);
                    return new String(b, StandardCharsets.UTF_8);
                }
                case '*': {
                    int n = Integer.parseInt(line);
                    if (n < 0) {
                        return null;
                    }
                    List<Object> items = new ArrayList<>(n);
                    for (int i = 0; i < n; i++) {
                        items.add(read());
                    }
                    return items;
                }
                default:
                    throw new IOException("unexpected reply type " + type);
            }
        }

        /** @param ms the socket read timeout */
        public void timeout(int ms) {
            try {
                socket.setSoTimeout(ms);
            } catch (IOException e) {
                throw new IllegalStateException(e);
            }
        }

        private String line() throws IOException {
            StringBuilder sb = new StringBuilder();
            int c;
            while ((c = in.read()) != '\r') {
                if (c < 0) {
                    throw new IOException("connection closed");
                }
                sb.append((char) c);
            }
            in.read();
            return sb.toString();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }
}
