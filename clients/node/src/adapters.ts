/**
 * Adapters from node-redis (`redis` v5+) and ioredis (v5+) to {@link Transport}.
 * Neither library is imported: each adapter takes the user's client and opens
 * dlock's own connections with its `duplicate()`, so dlock has no runtime
 * dependency and never sends a command on the user's shared connection.
 *
 * @module
 */
import type { Connection, NodeAddress, RedisArg, Reply, Transport } from "./transport.js";

/** The part of an ioredis `Redis` that dlock uses. */
export interface IoRedisClient {
  call(command: string, ...args: RedisArg[]): Promise<unknown>;
  duplicate(override?: Record<string, unknown>): IoRedisClient;
  connect(): Promise<void>;
  disconnect(): void;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  readonly status: string;
  readonly stream?: { ref(): void; unref(): void };
}

/** The part of an ioredis `Cluster` that dlock uses. */
export interface IoRedisCluster {
  readonly isCluster: boolean;
  nodes(role?: "all" | "master" | "slave"): IoRedisClient[];
  readonly status: string;
  once(event: string, listener: (...args: unknown[]) => void): unknown;
}

/** The part of a node-redis client that dlock uses. */
export interface NodeRedisClient {
  sendCommand(args: RedisArg[]): Promise<unknown>;
  duplicate(overrides?: Record<string, unknown>): NodeRedisClient;
  connect(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<void>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  ref(): void;
  unref(): void;
  readonly options?: object;
}

/** The part of a node-redis cluster that dlock uses. */
export interface NodeRedisCluster {
  readonly masters: Array<{ host: string; port: number }>;
  nodeClient(node: { host: string; port: number }): Promise<NodeRedisClient>;
}

/**
 * Options dlock's ioredis connections override: no re-send, no reconnect,
 * exact integers, and (ioredis 6, RESP3 by default) RESP2-shaped replies:
 * maps as flat `[key, value, ...]` arrays even when the user's client asks
 * for `replyMapping: "resp3"` (ioredis 5 knows neither option and speaks RESP2).
 */
const IOREDIS_OVERRIDES = {
  replyMapping: "legacy",
  lazyConnect: true,
  autoResendUnfulfilledCommands: false,
  stringNumbers: true,
  retryStrategy: () => null,
  reconnectOnError: () => false,
  enableOfflineQueue: false,
  enableAutoPipelining: false,
  maxRetriesPerRequest: 0,
  connectionName: "dlock",
};

/** RESP type code of integers (`:`), mapped to `String` so that no integer loses precision. */
const RESP_NUMBER = 58;
/** RESP3 big numbers (`(`). */
const RESP_BIG_NUMBER = 40;
/**
 * RESP3 maps (`%`) and sets (`~`), mapped to flat arrays: the shape RESP2
 * gives them, which dlock's readers take. node-redis 6 speaks RESP3 unless
 * told otherwise, and maps would come as objects.
 */
const RESP_MAP = 37;
const RESP_SET = 126;
/** The type mapping of dlock's node-redis connections, whatever the user's client speaks. */
const NODE_REDIS_TYPES = {
  [RESP_NUMBER]: String,
  [RESP_BIG_NUMBER]: String,
  [RESP_MAP]: Array,
  [RESP_SET]: Array,
};

class IoRedisConnection implements Connection {
  closed = false;
  constructor(private readonly client: IoRedisClient) {
    const mark = () => {
      this.closed = true;
    };
    client.on("close", mark);
    client.on("end", mark);
    client.on("error", () => {});
  }
  call(args: readonly RedisArg[]): Promise<Reply> {
    // The library's promise as it is: no extra async frame per command. The
    // first word is always the command's name, a string.
    return this.client.call(...(args as readonly [string, ...RedisArg[]])) as Promise<Reply>;
  }
  close(): void {
    this.closed = true;
    this.client.disconnect();
  }
  ref(): void {
    this.client.stream?.ref();
  }
  unref(): void {
    this.client.stream?.unref();
  }
}

class NodeRedisConnection implements Connection {
  closed = false;
  constructor(private readonly client: NodeRedisClient) {
    const mark = () => {
      this.closed = true;
    };
    client.on("end", mark);
    client.on("error", mark);
  }
  call(args: readonly RedisArg[]): Promise<Reply> {
    return this.client.sendCommand([...args]) as Promise<Reply>;
  }
  close(): void {
    if (this.closed && this.destroyed) return;
    this.closed = true;
    this.destroyed = true;
    try {
      if (this.client.destroy) this.client.destroy();
      else void this.client.disconnect?.().catch(() => {});
    } catch {
      // already closed
    }
  }
  private destroyed = false;
  ref(): void {
    this.client.ref();
  }
  unref(): void {
    this.client.unref();
  }
}

/**
 * Opens `wrapped` with `connect`, closing it when `signal` aborts first (the
 * library's pending handshake then fails) or when the opening fails.
 */
async function connectOrAbort(
  wrapped: Connection,
  connect: () => Promise<unknown>,
  signal: AbortSignal | undefined,
): Promise<void> {
  const onAbort = () => wrapped.close();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    signal?.throwIfAborted();
    await connect();
    signal?.throwIfAborted();
  } catch (err) {
    wrapped.close();
    throw err;
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

/** Waits until an ioredis cluster has its topology (its node list). */
async function ioClusterReady(cluster: IoRedisCluster): Promise<void> {
  if (cluster.status === "ready") return;
  await new Promise<void>((resolve, reject) => {
    cluster.once("ready", () => resolve());
    cluster.once("end", () => reject(new Error("the ioredis cluster closed before it was ready")));
  });
}

/** A {@link Transport} over an ioredis `Redis` or `Cluster`. */
export function ioredisTransport(client: IoRedisClient | IoRedisCluster): Transport {
  const isCluster = (client as IoRedisCluster).isCluster === true;
  return {
    name: "ioredis",
    isCluster,
    async connect(node?: NodeAddress, signal?: AbortSignal): Promise<Connection> {
      let base: IoRedisClient;
      if (isCluster) {
        const cluster = client as IoRedisCluster;
        await ioClusterReady(cluster);
        const first = cluster.nodes("master")[0];
        if (!first) throw new Error("the ioredis cluster knows no master");
        base = first;
      } else {
        base = client as IoRedisClient;
      }
      const conn = base.duplicate(node ? { ...IOREDIS_OVERRIDES, ...node } : IOREDIS_OVERRIDES);
      const wrapped = new IoRedisConnection(conn);
      await connectOrAbort(wrapped, () => conn.connect(), signal);
      return wrapped;
    },
  };
}

/** A {@link Transport} over a node-redis client or cluster (`redis` v5+). */
export function nodeRedisTransport(client: NodeRedisClient | NodeRedisCluster): Transport {
  const isCluster = typeof (client as NodeRedisCluster).nodeClient === "function";
  return {
    name: "node-redis",
    isCluster,
    async connect(node?: NodeAddress, signal?: AbortSignal): Promise<Connection> {
      let base: NodeRedisClient;
      if (isCluster) {
        const cluster = client as NodeRedisCluster;
        const first = cluster.masters[0];
        if (!first) throw new Error("the node-redis cluster knows no master (connect it first)");
        base = await cluster.nodeClient(first);
      } else {
        base = client as NodeRedisClient;
      }
      const socket: Record<string, unknown> = {
        ...((base.options as { socket?: object } | undefined)?.socket ?? {}),
        reconnectStrategy: false,
      };
      if (node) {
        socket["host"] = node.host;
        socket["port"] = node.port;
      }
      const overrides: Record<string, unknown> = {
        disableOfflineQueue: true,
        socket,
        name: "dlock",
        commandOptions: { typeMapping: NODE_REDIS_TYPES },
      };
      if (node) overrides["url"] = undefined;
      const conn = base.duplicate(overrides);
      const wrapped = new NodeRedisConnection(conn);
      await connectOrAbort(wrapped, () => conn.connect(), signal);
      return wrapped;
    },
  };
}

/** Anything {@link Dlock} accepts: a transport, or a client of either library. */
export type ClientLike =
  Transport | IoRedisClient | IoRedisCluster | NodeRedisClient | NodeRedisCluster;

/** Chooses the adapter for `client` by its shape. */
export function toTransport(client: ClientLike): Transport {
  const c = client as unknown as Record<string, unknown>;
  if (typeof c["connect"] === "function" && typeof c["isCluster"] === "boolean" && !("call" in c)) {
    return client as Transport;
  }
  if (c["isCluster"] === true && typeof c["nodes"] === "function") {
    return ioredisTransport(client as IoRedisCluster);
  }
  if (typeof c["call"] === "function" && typeof c["duplicate"] === "function") {
    return ioredisTransport(client as IoRedisClient);
  }
  if (typeof c["nodeClient"] === "function") {
    return nodeRedisTransport(client as NodeRedisCluster);
  }
  if (typeof c["sendCommand"] === "function" && typeof c["duplicate"] === "function") {
    return nodeRedisTransport(client as NodeRedisClient);
  }
  throw new TypeError("dlock: pass a node-redis or ioredis client or cluster, or a Transport");
}
