package dev.dlock.testkit;

import dev.dlock.AcquireOptions;
import dev.dlock.DCountDownLatch;
import dev.dlock.DLock;
import dev.dlock.DLockClient;
import dev.dlock.DLockServerException;
import dev.dlock.DLockTimeoutException;
import dev.dlock.DeadlockException;
import dev.dlock.LatchBrokenException;
import dev.dlock.Lease;
import dev.dlock.LockBusyException;
import dev.dlock.LockLostException;
import dev.dlock.NotOwnerException;
import dev.dlock.Transport;
import dev.dlock.WrongTypeException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;

/**
 * Runs clients/conformance/scenarios/*.json (format in clients/conformance/README.md) against a
 * server of its own (restart_server restarts it), one dynamic test per scenario. A scenario that
 * names {@code java} in its skip list is skipped with that reason; nothing else is skipped.
 */
public final class ConformanceRunner {
    private final RedisServer.Kind kind;
    private final Function<RedisServer, Transport> transports;
    private RedisServer server;
    private int run;
    private int skipped;

    /**
     * @param kind the server to run against
     * @param transports builds a transport to a server
     */
    public ConformanceRunner(RedisServer.Kind kind, Function<RedisServer, Transport> transports) {
        this.kind = kind;
        this.transports = transports;
    }

    /** An expected failure of a step, by kind. */
    static final class StepError extends RuntimeException {
        final String kind;

        StepError(String kind, Throwable cause) {
            super(kind, cause);
            this.kind = kind;
        }
    }

    private static final Object NOTHING = new Object() {
        @Override
        public String toString() {
            return "nothing";
        }
    };

    /** @return one container per scenario file, one test per scenario, and a closing summary */
    @SuppressWarnings("unchecked")
    public Stream<DynamicNode> tests() throws IOException {
        // -Ddlock.conformance.servers=redis: on those server kinds only (the newest libraries'
        // run, which one kind is enough for).
        String servers = System.getProperty("dlock.conformance.servers", "");
        if (!servers.isEmpty() && java.util.Arrays.stream(servers.split(","))
                .noneMatch(k -> k.equalsIgnoreCase(kind.name()))) {
            return Stream.empty();
        }
        Path dir = RedisServer.repo().resolve("clients/conformance/scenarios");
        List<Path> files;
        try (Stream<Path> listing = Files.list(dir)) {
            files = listing.filter(p -> p.toString().endsWith(".json")).sorted().collect(Collectors.toList());
        }
        List<DynamicNode> nodes = new ArrayList<>();
        for (Path file : files) {
            Map<String, Object> doc = (Map<String, Object>) Json.parse(Files.readString(file));
            List<DynamicNode> tests = new ArrayList<>();
            for (Object s : (List<Object>) doc.get("scenarios")) {
                Map<String, Object> scenario = (Map<String, Object>) s;
                String name = (String) scenario.get("name");
                // -Ddlock.conformance=stall.,cancel. runs the scenarios whose names start so
                // (while developing); the suite runs them all.
                String only = System.getProperty("dlock.conformance", "");
                if (!only.isEmpty() && java.util.Arrays.stream(only.split(",")).noneMatch(name::startsWith)) {
                    continue;
                }
                tests.add(DynamicTest.dynamicTest(name, () -> runScenario(scenario)));
            }
            nodes.add(DynamicContainer.dynamicContainer(file.getFileName().toString(), tests));
        }
        nodes.add(DynamicTest.dynamicTest("summary", () -> {
            // Which server ran them (redis-server 7.0, or 8 in the newest libraries' run).
            String version = "";
            if (server != null && server.isAlive()) {
                String info = String.valueOf(server.call("INFO", "server"));
                // Valkey also shows the redis_version it is compatible with: its own comes first.
                for (String field : List.of("valkey_version", "redis_version")) {
                    java.util.regex.Matcher m = java.util.regex.Pattern.compile(field + ":(\\S+)").matcher(info);
                    if (version.isEmpty() && m.find()) {
                        version = " " + m.group(1);
                    }
                }
            }
            System.out.println("conformance (" + kind.name().toLowerCase() + version + "): " + run + " run, " + skipped + " skipped");
            if (server != null) {
                server.close();
                server = null;
            }
        }));
        return nodes.stream();
    }

    @SuppressWarnings("unchecked")
    private void runScenario(Map<String, Object> scenario) throws Exception {
        Map<String, Object> skip = (Map<String, Object>) scenario.getOrDefault("skip", Map.of());
        if (skip.containsKey("java")) {
            skipped++;
            System.out.println("conformance: skip " + scenario.get("name") + ": " + skip.get("java"));
            Assumptions.abort(String.valueOf(skip.get("java")));
        }
        if (server == null || !server.isAlive()) {
            server = RedisServer.start(kind);
        }
        run++;
        long repeat = (Long) scenario.getOrDefault("repeat", 1L);
        for (long round = 1; round <= repeat; round++) {
            if (!server.isAlive()) {
                server.restart();
            }
            try (Scenario state = new Scenario()) {
                state.raw("admin").call("FLUSHALL");
                int index = 0;
                for (Object step : (List<Object>) scenario.get("steps")) {
                    index++;
                    try {
                        state.step((Map<String, Object>) step);
                    } catch (AssertionError | RuntimeException e) {
                        throw new AssertionError(scenario.get("name") + (repeat > 1 ? " run " + round + "/" + repeat : "")
                                + " step " + index + " " + step + ": " + e.getMessage(), e);
                    }
                }
            }
        }
    }

    /** Runs the background steps that are not acquisitions (each on a thread of its own). */
    private static final java.util.concurrent.ExecutorService BACKGROUND =
            java.util.concurrent.Executors.newCachedThreadPool(task -> {
                Thread thread = new Thread(task, "conformance-background");
                thread.setDaemon(true);
                return thread;
            });

    /** The named things of one scenario. */
    private final class Scenario implements AutoCloseable {
        final Map<String, DLockClient> clients = new HashMap<>();
        final Map<String, RedisServer.Raw> conns = new HashMap<>();
        final Map<String, Lease> guards = new HashMap<>();
        final Map<String, CompletableFuture<Object>> tasks = new HashMap<>();
        /** When each background task started and (once done) ended, in System.nanoTime(). */
        final Map<String, long[]> taskTimes = new HashMap<>();
        final Map<String, Object> vars = new HashMap<>();
        final Map<String, dev.dlock.DElection.Observer> observers = new HashMap<>();

        DLockClient client(String name) {
            return clients.computeIfAbsent(name, n -> new DLockClient(transports.apply(server)));
        }

        RedisServer.Raw raw(String name) {
            return conns.computeIfAbsent(name, n -> {
                try {
                    return new RedisServer.Raw(server.host(), server.port());
                } catch (IOException e) {
                    throw new IllegalStateException(e);
                }
            });
        }

        Lease guard(Object name) {
            Lease lease = guards.get(name);
            if (lease == null) {
                throw new AssertionError("no guard " + name);
            }
            return lease;
        }

        Object resolve(Object value) {
            if (value instanceof String) {
                String s = (String) value;
                if (s.startsWith("$$")) {
                    return s.substring(1);
                }
                if (s.startsWith("$")) {
                    String[] parts = s.substring(1).split("\\.");
                    if (parts.length == 1) {
                        if (!vars.containsKey(parts[0])) {
                            throw new AssertionError("no variable " + parts[0]);
                        }
                        return vars.get(parts[0]);
                    }
                    Lease lease = guard(parts[0]);
                    switch (parts[1]) {
                        case "token":
                            return lease.token();
                        case "owner":
                            return lease.owner();
                        case "tokens":
                            long[] tokens = lease.tokens();
                            if (parts.length == 3) {
                                return tokens[Integer.parseInt(parts[2])];
                            }
                            List<Object> list = new ArrayList<>();
                            for (long t : tokens) {
                                list.add(t);
                            }
                            return list;
                        default:
                            throw new AssertionError("unknown reference " + s);
                    }
                }
            }
            return value;
        }

        @SuppressWarnings("unchecked")
        void step(Map<String, Object> step) throws Exception {
            String op = (String) step.get("op");
            Long within = (Long) step.get("within_ms");
            boolean background = Boolean.TRUE.equals(step.get("background"));
            Long returnsWithin = (Long) step.get("returns_within_ms");
            if (background) {
                long[] times = {System.nanoTime(), 0};
                CompletableFuture<Object> task = start(op, step);
                task.whenComplete((value, error) -> times[1] = System.nanoTime());
                tasks.put((String) step.get("as"), task);
                taskTimes.put((String) step.get("as"), times);
                return;
            }
            if (op.equals("await")) {
                CompletableFuture<Object> task = tasks.get(step.get("task"));
                long ms = within == null ? 5000 : within;
                Object value;
                StepError error = null;
                try {
                    value = task.get(ms, TimeUnit.MILLISECONDS);
                } catch (ExecutionException e) {
                    value = NOTHING;
                    error = classify(e.getCause());
                } catch (TimeoutException e) {
                    throw new AssertionError("task " + step.get("task") + " did not finish in " + ms + " ms");
                }
                if (returnsWithin != null) {
                    long[] times = taskTimes.get(step.get("task"));
                    // The end is recorded by a callback that may run just after get() returns.
                    long ended = times[1] != 0 ? times[1] : System.nanoTime();
                    long took = TimeUnit.NANOSECONDS.toMillis(ended - times[0]);
                    if (took > returnsWithin) {
                        throw new AssertionError("task " + step.get("task") + " took " + took + " ms, more than "
                                + returnsWithin + " ms (ended with " + (error == null ? value : error.kind) + ")");
                    }
                }
                check(step, value, error);
                return;
            }
            long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(within == null ? 0 : within);
            while (true) {
                Object value;
                StepError error = null;
                long started = System.nanoTime();
                try {
                    value = run(op, step);
                } catch (StepError e) {
                    value = NOTHING;
                    error = e;
                }
                long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
                try {
                    if (returnsWithin != null && took > returnsWithin) {
                        throw new AssertionError("took " + took + " ms, more than " + returnsWithin + " ms (ended with "
                                + (error == null ? value : error.kind) + ")");
                    }
                    check(step, value, error);
                    return;
                } catch (AssertionError e) {
                    if (within == null || System.nanoTime() > end) {
                        throw e;
                    }
                    Thread.sleep(5);
                }
            }
        }

        void check(Map<String, Object> step, Object value, StepError error) {
            // With both result and error, the step may end either way (a stall: which bound
            // fires first is not fixed).
            if (step.containsKey("error") && (error != null || !step.containsKey("result"))) {
                if (error == null) {
                    throw new AssertionError("expected error " + step.get("error") + ", got " + value);
                }
                Object kinds = step.get("error");
                List<?> allowed = kinds instanceof List ? (List<?>) kinds : List.of(kinds);
                if (!allowed.contains(error.kind)) {
                    throw new AssertionError("expected error " + kinds + ", got " + error.kind + ": " + error.getCause(), error);
                }
                return;
            }
            if (error != null) {
                throw new AssertionError("unexpected error " + error.kind + ": " + error.getCause(), error);
            }
            if (step.containsKey("result") && !matches(step.get("result"), value)) {
                throw new AssertionError("expected " + step.get("result") + ", got " + value);
            }
            if (step.containsKey("capture")) {
                vars.put((String) step.get("capture"), value);
            }
        }

        @SuppressWarnings("unchecked")
        boolean matches(Object expected, Object actual) {
            if (actual == NOTHING) {
                return false;
            }
            if (expected instanceof Map) {
                Map<String, Object> m = (Map<String, Object>) expected;
                if (m.size() == 1 && m.keySet().iterator().next().startsWith("~")) {
                    String operator = m.keySet().iterator().next();
                    Object v = resolve(m.get(operator));
                    switch (operator) {
                        case "~any":
                            return true;
                        case "~ne":
                            return !matches(v, actual);
                        case "~gt":
                            return actual instanceof Long && (Long) actual > ((Number) v).longValue();
                        case "~ge":
                            return actual instanceof Long && (Long) actual >= ((Number) v).longValue();
                        case "~lt":
                            return actual instanceof Long && (Long) actual < ((Number) v).longValue();
                        case "~le":
                            return actual instanceof Long && (Long) actual <= ((Number) v).longValue();
                        case "~len":
                            long n = ((Number) v).longValue();
                            return actual instanceof List ? ((List<?>) actual).size() == n
                                    : actual instanceof String && ((String) actual).length() == n;
                        case "~in":
                            for (Object option : (List<Object>) v) {
                                if (matches(option, actual)) {
                                    return true;
                                }
                            }
                            return false;
                        default:
                            throw new AssertionError("unknown matcher " + operator);
                    }
                }
                if (!(actual instanceof Map)) {
                    return false;
                }
                Map<String, Object> a = (Map<String, Object>) actual;
                for (Map.Entry<String, Object> e : m.entrySet()) {
                    if (!a.containsKey(e.getKey()) || !matches(e.getValue(), a.get(e.getKey()))) {
                        return false;
                    }
                }
                return true;
            }
            if (expected instanceof List) {
                if (!(actual instanceof List)) {
                    return false;
                }
                List<Object> e = (List<Object>) expected;
                List<Object> a = (List<Object>) actual;
                if (e.size() != a.size()) {
                    return false;
                }
                for (int i = 0; i < e.size(); i++) {
                    if (!matches(e.get(i), a.get(i))) {
                        return false;
                    }
                }
                return true;
            }
            Object e = resolve(expected);
            if (e instanceof Number && actual instanceof Number) {
                return ((Number) e).longValue() == ((Number) actual).longValue();
            }
            return Objects.equals(e, actual);
        }

        CompletableFuture<Object> start(String op, Map<String, Object> step) {
            String as = (String) step.get("as");
            switch (op) {
                case "acquire": {
                    CompletableFuture<Lease> future = acquireAsync(step);
                    CompletableFuture<Object> task = future.thenApply(lease -> {
                        synchronized (guards) {
                            guards.put(as, lease);
                        }
                        return (Object) "guard";
                    });
                    // Cancelling the task cancels the acquisition; a lease that won the race
                    // belongs to the caller, who closes it.
                    task.whenComplete((value, error) -> {
                        if (task.isCancelled() && !future.cancel(true) && future.isDone()
                                && !future.isCompletedExceptionally()) {
                            future.join().close();
                        }
                    });
                    return task;
                }
                case "campaign": {
                    CompletableFuture<Lease> future = client((String) step.get("client")).getElection((String) step.get("key"))
                            .campaignAsync((String) step.get("identity"), options(step));
                    CompletableFuture<Object> task = future.thenApply(lease -> {
                        synchronized (guards) {
                            guards.put(as, lease);
                        }
                        return (Object) "guard";
                    });
                    task.whenComplete((value, error) -> {
                        if (task.isCancelled() && !future.cancel(true) && future.isDone()
                                && !future.isCompletedExceptionally()) {
                            future.join().close();
                        }
                    });
                    return task;
                }
                case "latch_wait":
                case "renew":
                case "command":
                    // A thread each: the common pool may have a single thread on a small machine.
                    return CompletableFuture.supplyAsync(() -> {
                        try {
                            return run(op, step);
                        } catch (Exception e) {
                            throw new java.util.concurrent.CompletionException(e);
                        }
                    }, BACKGROUND);
                default:
                    throw new AssertionError("unknown background op " + op);
            }
        }

        AcquireOptions options(Map<String, Object> step) {
            AcquireOptions options = AcquireOptions.defaults();
            if (step.containsKey("lease_ms")) {
                options = options.lease(Duration.ofMillis((Long) step.get("lease_ms")));
            }
            if (Boolean.TRUE.equals(step.get("wait_forever"))) {
                options = options.waitForever();
            } else if (step.containsKey("wait_ms")) {
                options = options.waitFor(Duration.ofMillis((Long) step.get("wait_ms")));
            }
            if (step.containsKey("owner")) {
                options = options.owner(String.valueOf(resolve(step.get("owner"))));
            }
            if (Boolean.TRUE.equals(step.get("session"))) {
                options = options.session(true);
            }
            return options;
        }

        @SuppressWarnings("unchecked")
        CompletableFuture<Lease> acquireAsync(Map<String, Object> step) {
            DLockClient client = client((String) step.get("client"));
            String kind = (String) step.getOrDefault("kind", "lock");
            String key = (String) step.get("key");
            AcquireOptions options = options(step);
            switch (kind) {
                case "semaphore":
                    return client.getSemaphore(key, (Long) step.get("limit"))
                            .acquireAsync((Long) step.getOrDefault("weight", 1L), options);
                default:
                    return lock(client, kind, key, step).acquireAsync(options);
            }
        }

        @SuppressWarnings("unchecked")
        DLock lock(DLockClient client, String kind, String key, Map<String, Object> step) {
            boolean fair = Boolean.TRUE.equals(step.get("fair"));
            switch (kind) {
                case "lock":
                    return fair ? client.getFairLock(key) : client.getLock(key);
                case "read":
                    return client.getReadWriteLock(key).readLock();
                case "write":
                    return client.getReadWriteLock(key).writeLock();
                case "multi":
                    return client.getMultiLock(((List<Object>) step.get("keys")).toArray(new String[0]));
                default:
                    throw new AssertionError("unknown kind " + kind);
            }
        }

        Object run(String op, Map<String, Object> step) throws Exception {
            try {
                return runUnchecked(op, step);
            } catch (StepError e) {
                throw e;
            } catch (AssertionError e) {
                throw e;
            } catch (Exception e) {
                throw classify(e);
            }
        }

        @SuppressWarnings("unchecked")
        Object runUnchecked(String op, Map<String, Object> step) throws Exception {
            switch (op) {
                case "acquire": {
                    DLockClient client = client((String) step.get("client"));
                    String kind = (String) step.getOrDefault("kind", "lock");
                    String key = (String) step.get("key");
                    Lease lease = kind.equals("semaphore")
                            ? client.getSemaphore(key, (Long) step.get("limit")).acquire((Long) step.getOrDefault("weight", 1L), options(step))
                            : lock(client, kind, key, step).acquire(options(step));
                    guards.put((String) step.get("as"), lease);
                    return "guard";
                }
                case "release":
                case "resign":
                    guard(step.get("guard")).close();
                    return null;
                case "campaign": {
                    Lease lease = client((String) step.get("client")).getElection((String) step.get("key"))
                            .campaign((String) step.get("identity"), options(step));
                    guards.put((String) step.get("as"), lease);
                    return "guard";
                }
                case "leader":
                    return client((String) step.get("client")).getElection((String) step.get("key")).leader()
                            .map(this::leaderValue).orElse(null);
                case "observe":
                    observers.put((String) step.get("as"), client((String) step.get("client"))
                            .getElection((String) step.get("key")).observe(state -> { }));
                    return null;
                case "observed": {
                    dev.dlock.DElection.Observer observer = observers.get(step.get("observer"));
                    java.util.Optional<dev.dlock.Leader> latest = observer.latest();
                    if (latest == null) {
                        return "nothing";
                    }
                    return latest.map(this::leaderValue).orElse(null);
                }
                case "stop":
                    observers.get(step.get("observer")).close();
                    return null;
                case "renew": {
                    Lease lease = guard(step.get("guard"));
                    lease.renew(Duration.ofMillis(lease.leaseMillis()));
                    return null;
                }
                case "held":
                    return guard(step.get("guard")).isValid();
                case "lost":
                    return guard(step.get("guard")).lost().toCompletableFuture().isDone();
                case "token":
                    return guard(step.get("guard")).token();
                case "cancel": {
                    CompletableFuture<Object> task = tasks.get(step.get("task"));
                    // Java's way: cancel the future; a grant that completed it first belongs to
                    // the caller, who closes it.
                    if (!task.cancel(true) && task.isDone() && !task.isCompletedExceptionally()) {
                        Lease lease = guards.get(step.get("task"));
                        if (lease != null) {
                            lease.close();
                        }
                    }
                    return null;
                }
                case "latch_create":
                    return latch(step).trySetCount((Long) step.get("count"), Duration.ofMillis((Long) step.get("ttl_ms")));
                case "latch_count_down":
                    return latch(step).countDown((Long) step.getOrDefault("n", 1L));
                case "latch_count": {
                    java.util.OptionalLong count = latch(step).currentCount();
                    return count.isPresent() ? (Object) count.getAsLong() : null;
                }
                case "latch_wait":
                    try {
                        return latch(step).await(Duration.ofMillis((Long) step.get("timeout_ms"))) ? "opened" : "timed_out";
                    } catch (LatchBrokenException e) {
                        return "vanished";
                    }
                case "command": {
                    List<Object> args = new ArrayList<>();
                    for (Object arg : (List<Object>) step.get("args")) {
                        args.add(String.valueOf(resolve(arg)));
                    }
                    Object reply = raw((String) step.getOrDefault("conn", "admin")).call(args.toArray());
                    if (reply instanceof RedisServer.RedisError) {
                        String message = reply.toString();
                        int space = message.indexOf(' ');
                        throw new StepError("server:" + (space < 0 ? message : message.substring(0, space)), null);
                    }
                    return reply;
                }
                case "info": {
                    Object reply = raw((String) step.getOrDefault("conn", "admin")).call("DLOCK.INFO", String.valueOf(resolve(step.get("key"))));
                    if (reply == null) {
                        return null;
                    }
                    List<Object> items = (List<Object>) reply;
                    Map<String, Object> info = new LinkedHashMap<>();
                    for (int i = 0; i + 1 < items.size(); i += 2) {
                        info.put(items.get(i).toString(), items.get(i + 1));
                    }
                    return info;
                }
                case "info_dlock": {
                    Object reply = raw((String) step.getOrDefault("conn", "admin")).call("INFO", "dlock");
                    Map<String, Object> fields = new LinkedHashMap<>();
                    for (String line : reply.toString().split("\r?\n")) {
                        int colon = line.indexOf(':');
                        if (line.startsWith("#") || colon < 0) {
                            continue;
                        }
                        String value = line.substring(colon + 1);
                        Object parsed = value;
                        try {
                            parsed = Long.parseLong(value);
                        } catch (NumberFormatException e) {
                            // not an integer
                        }
                        fields.put(line.substring(0, colon), parsed);
                    }
                    if (step.containsKey("field")) {
                        String field = (String) step.get("field");
                        if (!fields.containsKey(field)) {
                            throw new AssertionError("INFO dlock has no field " + field);
                        }
                        return fields.get(field);
                    }
                    return fields;
                }
                case "dlock_calls": {
                    Object reply = raw((String) step.getOrDefault("conn", "admin")).call("INFO", "commandstats");
                    return dlockCalls(reply.toString());
                }
                case "restart_server": {
                    for (RedisServer.Raw raw : conns.values()) {
                        raw.close();
                    }
                    conns.clear();
                    server.restart();
                    return null;
                }
                case "stop_server":
                    server.kill();
                    return null;
                case "start_server": {
                    for (RedisServer.Raw raw : conns.values()) {
                        raw.close();
                    }
                    conns.clear();
                    server.restart();
                    return null;
                }
                case "pause_server": {
                    // A connection of its own, so that the pause is not stuck behind another step.
                    try (RedisServer.Raw raw = new RedisServer.Raw(server.host(), server.port())) {
                        Object reply = raw.call("CLIENT", "PAUSE", String.valueOf(step.get("ms")), "ALL");
                        if (reply instanceof RedisServer.RedisError) {
                            throw new AssertionError("CLIENT PAUSE: " + reply);
                        }
                    }
                    return null;
                }
                case "sleep":
                    Thread.sleep((Long) step.get("ms"));
                    return null;
                default:
                    throw new AssertionError("unknown step " + op);
            }
        }

        /** The DLOCK commands the server received: calls and rejected_calls of cmdstat_dlock.*. */
        long dlockCalls(String commandstats) {
            long total = 0;
            for (String line : commandstats.split("\r?\n")) {
                if (!line.startsWith("cmdstat_dlock.") || line.indexOf(':') < 0) {
                    continue;
                }
                for (String field : line.substring(line.indexOf(':') + 1).split(",")) {
                    int equals = field.indexOf('=');
                    String name = equals < 0 ? field : field.substring(0, equals);
                    if (name.equals("calls") || name.equals("rejected_calls")) {
                        total += Long.parseLong(field.substring(equals + 1).trim());
                    }
                }
            }
            return total;
        }

        Map<String, Object> leaderValue(dev.dlock.Leader leader) {
            Map<String, Object> value = new LinkedHashMap<>();
            value.put("identity", leader.identity());
            value.put("term", leader.term());
            return value;
        }

        DCountDownLatch latch(Map<String, Object> step) {
            return client((String) step.get("client")).getCountDownLatch((String) step.get("key"));
        }

        StepError classify(Throwable e) {
            while ((e instanceof ExecutionException || e instanceof java.util.concurrent.CompletionException) && e.getCause() != null) {
                e = e.getCause();
            }
            if (e instanceof StepError) {
                return (StepError) e;
            }
            if (e instanceof LockBusyException) {
                return new StepError("busy", e);
            }
            if (e instanceof LockLostException) {
                return new StepError("lost", e);
            }
            if (e instanceof DeadlockException) {
                return new StepError("deadlock", e);
            }
            if (e instanceof NotOwnerException) {
                return new StepError("not_owner", e);
            }
            if (e instanceof WrongTypeException) {
                return new StepError("wrongtype", e);
            }
            if (e instanceof DLockTimeoutException) {
                return new StepError("timeout", e);
            }
            if (e instanceof dev.dlock.DLockConnectionException) {
                return new StepError("connection", e);
            }
            if (e instanceof DLockServerException) {
                return new StepError("server:" + ((DLockServerException) e).code(), e);
            }
            if (e instanceof IllegalArgumentException || e instanceof NullPointerException) {
                return new StepError("invalid_argument", e);
            }
            throw new AssertionError("unexpected exception " + e, e);
        }

        @Override
        public void close() {
            for (CompletableFuture<Object> task : tasks.values()) {
                task.cancel(true);
            }
            for (dev.dlock.DElection.Observer observer : observers.values()) {
                observer.close();
            }
            for (DLockClient client : clients.values()) {
                client.close();
            }
            for (RedisServer.Raw raw : conns.values()) {
                try {
                    raw.close();
                } catch (IOException e) {
                    // closing
                }
            }
        }
    }
}
