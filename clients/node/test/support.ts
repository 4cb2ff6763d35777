/**
 * Test harness: real redis-server and valkey-server processes with the
 * module, on free ports, always stopped; clients of both adapters.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis, Cluster } from "ioredis";
import { Redis as Redis6, Cluster as Cluster6 } from "ioredis6";
import { createClient, createCluster } from "redis";
import { createClient as createClient6, createCluster as createCluster6 } from "redis6";

const here = dirname(fileURLToPath(import.meta.url));
/** The repository's root (this file is clients/node/dist/test/support.js). */
export const REPO = resolve(here, "../../../..");
export const MODULE = process.env["DLOCK_MODULE"] ?? join(REPO, "target/release/libdlock.so");

/** redis: Debian 12's redis-server (7.0); redis8: Redis 8.0; valkey: Valkey 9. */
export type ServerKind = "redis" | "redis8" | "valkey";
export type AdapterName = "ioredis" | "node-redis";
export const ADAPTERS: AdapterName[] = ["ioredis", "node-redis"];

/** A server binary: the environment variable's path, else what the fetch script prints, else null. */
function fetched(env: string, script: string): () => string | null {
  let path: string | null | undefined;
  return () => {
    if (path !== undefined) return path;
    const fromEnv = process.env[env];
    if (fromEnv) return (path = fromEnv);
    try {
      path = execFileSync(join(REPO, "scripts", script), { encoding: "utf8" }).trim() || null;
    } catch {
      path = null;
    }
    return path;
  };
}
const valkeyServer = fetched("DLOCK_VALKEY_SERVER", "fetch-valkey.sh");
const redis8Server = fetched("DLOCK_REDIS8_SERVER", "fetch-redis8.sh");

/**
 * Redis 8 where it can be had (DLOCK_REDIS8_SERVER or
 * scripts/fetch-redis8.sh), else Redis 7.0 with the reason printed: the
 * server of the runs that moved from Redis 7.0 to Redis 8 (the conformance
 * scenarios and the stalled server through today's default libraries).
 */
export function redis8Kind(): ServerKind {
  if (redis8Server()) return "redis8";
  console.log(
    "# SKIPPED redis8: no Redis 8 (DLOCK_REDIS8_SERVER or scripts/fetch-redis8.sh), on redis instead",
  );
  return "redis";
}

/** The servers to run on: redis-server, and valkey-server when it can be had. */
export function serverKinds(): ServerKind[] {
  const kinds: ServerKind[] = ["redis"];
  if (valkeyServer()) kinds.push("valkey");
  else
    console.log(
      "# SKIPPED valkey: no valkey-server (DLOCK_VALKEY_SERVER or scripts/fetch-valkey.sh)",
    );
  return kinds;
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolvePort(port));
    });
  });
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `condition` every 5 ms until it holds; throws after `within` ms. */
export async function eventually(
  what: string,
  within: number,
  condition: () => boolean | Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + within;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`not within ${within} ms: ${what}`);
    await sleep(5);
  }
}

/** A server process with the module. */
export class Server {
  private constructor(
    readonly kind: ServerKind,
    readonly port: number,
    readonly proc: ChildProcess,
    private readonly dir: string,
    private readonly adminClient: Redis,
    private readonly extra: string[],
    /** A TLS-only server: its CA's certificate (PEM file); `port` is the TLS port. */
    readonly caFile?: string,
  ) {}

  static async start(kind: ServerKind, extra: string[] = []): Promise<Server> {
    if (!existsSync(MODULE)) throw new Error(`no module at ${MODULE}: run make build`);
    for (let attempt = 0; ; attempt++) {
      const port = await freePort();
      const server = await Server.spawnOn(kind, port, extra);
      if (server) return server;
      if (attempt >= 2) throw new Error(`${kind} server did not start on port ${port}`);
    }
  }

  /**
   * A server with only a TLS port (`port 0`, `tls-port`: the settings of
   * docs/operations.md's "TLS and ACL users"), its certificates made by
   * scripts/tls-test-certs.sh in its folder; `admin` connects over TLS.
   * Null (with the reason printed) when the binary has no TLS built in.
   */
  static async startTls(kind: ServerKind, extra: string[] = []): Promise<Server | null> {
    if (!existsSync(MODULE)) throw new Error(`no module at ${MODULE}: run make build`);
    for (let attempt = 0; ; attempt++) {
      const port = await freePort();
      const certs = mkdtempSync(join(tmpdir(), "dlock-node-tls-"));
      execFileSync(join(REPO, "scripts/tls-test-certs.sh"), [certs]);
      const server = await Server.spawnOn(kind, port, extra, certs);
      if (server) return server;
      const log = Server.lastLog;
      rmSync(certs, { recursive: true, force: true });
      if (log.includes("TLS support") || log.includes("connection type tls")) {
        console.log(`# SKIPPED TLS on ${kind}: the server has no TLS built in`);
        return null;
      }
      if (attempt >= 2) throw new Error(`${kind} TLS server did not start on port ${port}: ${log}`);
    }
  }

  /** The log of the last server that did not start. */
  private static lastLog = "";

  private static async spawnOn(
    kind: ServerKind,
    port: number,
    extra: string[],
    certs?: string,
  ): Promise<Server | undefined> {
    const bin =
      kind === "redis"
        ? "redis-server"
        : ((kind === "redis8" ? redis8Server() : valkeyServer()) as string);
    const dir = mkdtempSync(join(tmpdir(), "dlock-node-"));
    const listen = certs
      ? [
          "--port",
          "0",
          "--tls-port",
          String(port),
          "--tls-cert-file",
          join(certs, "server.crt"),
          "--tls-key-file",
          join(certs, "server.key"),
          "--tls-ca-cert-file",
          join(certs, "ca.crt"),
          "--tls-auth-clients",
          "no",
        ]
      : ["--port", String(port)];
    const proc = spawn(
      bin,
      [
        ...listen,
        "--bind",
        "127.0.0.1",
        "--dir",
        dir,
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--logfile",
        join(dir, "log"),
        "--loadmodule",
        MODULE,
        ...extra,
      ],
      { stdio: "ignore" },
    );
    const admin = new Redis({
      port,
      host: "127.0.0.1",
      lazyConnect: true,
      stringNumbers: true,
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
      ...(certs ? { tls: { ca: readFileSync(join(certs, "ca.crt")) } } : {}),
    });
    admin.on("error", () => {});
    const caFile = certs ? join(certs, "ca.crt") : undefined;
    const server = new Server(kind, port, proc, dir, admin, extra, caFile);
    let exited = false;
    proc.once("exit", () => (exited = true));
    const deadline = Date.now() + 10_000;
    while (!exited && Date.now() < deadline) {
      try {
        await admin.connect();
        // A server that could not bind its port exits, but until it has,
        // another test's server may answer there: only our own process counts.
        // INFO answers while the data set loads; PING only once it is loaded.
        await admin.ping();
        const info = await admin.info("server");
        if (new RegExp(`^process_id:${proc.pid}\\s*$`, "m").test(info)) return server;
        admin.disconnect();
        await sleep(20);
      } catch {
        admin.disconnect();
        await sleep(20);
      }
    }
    try {
      Server.lastLog = readFileSync(join(dir, "log"), "utf8");
    } catch {
      Server.lastLog = "";
    }
    await server.stop();
    return undefined;
  }

  /** Stops the server and starts it again on the same port, with no state. */
  async restart(): Promise<Server> {
    await this.stop();
    for (let attempt = 0; attempt < 50; attempt++) {
      const server = await Server.spawnOn(this.kind, this.port, this.extra);
      if (server) return server;
      await sleep(50);
    }
    throw new Error(`could not restart the server on port ${this.port}`);
  }

  /** A plain connection to this server (integers as strings). */
  get admin(): Redis {
    return this.adminClient;
  }

  /** `DLOCK.INFO key` as a field map, or null. */
  async info(key: string): Promise<Record<string, unknown> | null> {
    const reply = (await this.admin.call("DLOCK.INFO", key)) as unknown[] | null;
    if (!reply) return null;
    const fields: Record<string, unknown> = {};
    for (let i = 0; i < reply.length; i += 2) fields[String(reply[i])] = reply[i + 1];
    return fields;
  }

  async hasCommand(name: string): Promise<boolean> {
    const reply = (await this.admin.call("COMMAND", "INFO", name)) as unknown[];
    return Array.isArray(reply) && reply[0] !== null;
  }

  /** Kills the process at once (SIGKILL). */
  kill(): void {
    this.proc.kill("SIGKILL");
  }

  async stop(): Promise<void> {
    this.adminClient.disconnect();
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise<void>((r) => this.proc.once("exit", () => r()));
      this.proc.kill("SIGKILL");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
    if (this.caFile) rmSync(dirname(this.caFile), { recursive: true, force: true });
  }
}

/** A user's client of either library, connected to one server. */
export interface UserClient {
  adapter: AdapterName;
  client: Redis | ReturnType<typeof createClient>;
  close(): Promise<void>;
}

/**
 * `DLOCK_NODE_LIBRARY` (one of {@link LIBRARIES}) runs every suite's
 * clients of its adapter on that library instead of the default one.
 */
function libraryOverride(adapter: AdapterName): Library | undefined {
  const wanted = process.env["DLOCK_NODE_LIBRARY"];
  if (!wanted) return undefined;
  if (!(LIBRARIES as readonly string[]).includes(wanted))
    throw new Error(`DLOCK_NODE_LIBRARY=${wanted}: not one of ${LIBRARIES.join(", ")}`);
  return wanted.startsWith(adapter) ? (wanted as Library) : undefined;
}

/**
 * A user's client of the adapter's default library (ioredis 5, node-redis
 * 5), or of `library` (one of the adapter's in {@link LIBRARIES});
 * `DLOCK_NODE_LIBRARY` wins over both.
 */
export async function userClient(
  adapter: AdapterName,
  port: number,
  wanted?: Library,
): Promise<UserClient> {
  const library = libraryOverride(adapter) ?? wanted;
  if (library) {
    const { client, close } = await libraryClient(library, port);
    return { adapter, client: client as UserClient["client"], close };
  }
  if (adapter === "ioredis") {
    const client = new Redis({ port, host: "127.0.0.1" });
    client.on("error", () => {});
    await client.ping();
    return { adapter, client, close: async () => void client.disconnect() };
  }
  const client = createClient({ socket: { port, host: "127.0.0.1" } });
  client.on("error", () => {});
  await client.connect();
  return { adapter, client, close: async () => void client.destroy() };
}

/** A small cluster of three masters with the module. */
export class TestCluster {
  private constructor(readonly servers: Server[]) {}

  static async start(kind: ServerKind): Promise<TestCluster> {
    const servers = await Promise.all(
      [0, 1, 2].map(() =>
        Server.start(kind, [
          "--cluster-enabled",
          "yes",
          "--cluster-config-file",
          "nodes.conf",
          "--cluster-node-timeout",
          "5000",
        ]),
      ),
    );
    const cluster = new TestCluster(servers);
    try {
      const per = Math.ceil(16384 / servers.length);
      await Promise.all(
        servers.map((s, i) =>
          s.admin.call(
            "CLUSTER",
            "ADDSLOTSRANGE",
            String(i * per),
            String(Math.min(16383, (i + 1) * per - 1)),
          ),
        ),
      );
      for (const s of servers.slice(1)) {
        await s.admin.call("CLUSTER", "MEET", "127.0.0.1", String((servers[0] as Server).port));
      }
      await eventually("the cluster is ok", 20_000, async () => {
        for (const s of servers) {
          const info = String(await s.admin.call("CLUSTER", "INFO"));
          if (!info.includes("cluster_state:ok") || !info.includes("cluster_known_nodes:3"))
            return false;
          const slots = (await s.admin.call("CLUSTER", "SLOTS")) as unknown[];
          if (slots.length !== 3) return false;
        }
        return true;
      });
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  /** The server whose slots include `slot`. */
  serverOfSlot(slot: number): Server {
    const per = Math.ceil(16384 / this.servers.length);
    return this.servers[Math.floor(slot / per)] as Server;
  }

  async stop(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop()));
  }
}

export interface UserCluster {
  adapter: AdapterName;
  client: Cluster | ReturnType<typeof createCluster>;
  close(): Promise<void>;
}

export async function userCluster(
  adapter: AdapterName,
  cluster: TestCluster,
): Promise<UserCluster> {
  const nodes = cluster.servers.map((s) => ({ host: "127.0.0.1", port: s.port }));
  const library = libraryOverride(adapter);
  if (library && library !== "ioredis@5") {
    // DLOCK_NODE_LIBRARY: the cluster client of that library and protocol.
    const RESP = library.includes("RESP2") ? 2 : 3;
    if (library.startsWith("node-redis")) {
      const rootNodes = nodes.map((n) => ({ socket: n }));
      const client = library.startsWith("node-redis@6")
        ? createCluster6({ rootNodes, RESP })
        : createCluster({ rootNodes, RESP });
      client.on("error", () => {});
      await client.connect();
      return {
        adapter,
        client: client as UserCluster["client"],
        close: async () => void client.destroy(),
      };
    }
    const redisOptions = {
      protocol: RESP as 2 | 3,
      ...(library.endsWith("resp3") ? { replyMapping: "resp3" as const } : {}),
    };
    const client = new Cluster6(nodes, { redisOptions });
    client.on("error", () => {});
    await new Promise<void>((r, j) => {
      client.once("ready", () => r());
      client.once("error", j);
    });
    return {
      adapter,
      client: client as unknown as UserCluster["client"],
      close: async () => void client.disconnect(),
    };
  }
  if (adapter === "ioredis") {
    const client = new Cluster(nodes);
    client.on("error", () => {});
    await new Promise<void>((r, j) => {
      client.once("ready", () => r());
      client.once("error", j);
    });
    return { adapter, client, close: async () => void client.disconnect() };
  }
  const client = createCluster({ rootNodes: nodes.map((n) => ({ socket: n })) });
  client.on("error", () => {});
  await client.connect();
  return { adapter, client, close: async () => void client.destroy() };
}

/**
 * The library matrix (clients/node/README.md, "Compatibility"): the oldest
 * supported and today's newest major of each library, with each protocol
 * it speaks. `node-redis@6` speaks RESP3 unless told otherwise, ioredis 6
 * too (with RESP2-shaped replies unless `replyMapping: "resp3"`).
 */
export const LIBRARIES = [
  "node-redis@5 RESP2",
  "node-redis@5 RESP3",
  "node-redis@6 RESP2",
  "node-redis@6 RESP3",
  "ioredis@5",
  "ioredis@6 RESP2",
  "ioredis@6 RESP3",
  "ioredis@6 RESP3 replyMapping=resp3",
] as const;
export type Library = (typeof LIBRARIES)[number];

/** A user's client of one library of the matrix, connected to one server. */
export async function libraryClient(
  library: Library,
  port: number,
): Promise<{ client: object; close(): Promise<void> }> {
  const socket = { port, host: "127.0.0.1" };
  if (library.startsWith("node-redis")) {
    const RESP = library.endsWith("RESP2") ? 2 : 3;
    const client = library.startsWith("node-redis@6")
      ? createClient6({ socket, RESP })
      : createClient({ socket, RESP });
    client.on("error", () => {});
    await client.connect();
    return { client, close: async () => void client.destroy() };
  }
  const options = { port, host: "127.0.0.1" };
  const client =
    library === "ioredis@5"
      ? new Redis(options)
      : new Redis6({
          ...options,
          protocol: library.includes("RESP2") ? 2 : 3,
          ...(library.endsWith("resp3") ? { replyMapping: "resp3" as const } : {}),
        });
  client.on("error", () => {});
  await client.ping();
  return { client, close: async () => void client.disconnect() };
}
