/**
 * The small interface dlock needs from a Redis client library, and the reply
 * shape every adapter delivers.
 *
 * @module
 */

/** One word of a command. */
export type RedisArg = string | Buffer;

/**
 * A reply as dlock reads it: bulk and simple strings as strings, integers as
 * their exact decimal text (never a JS `number`, which loses precision above
 * 2^53), null replies as `null`, arrays as arrays. Error replies reject.
 */
export type Reply = string | Buffer | null | Reply[];

/** A server's address, as `CLUSTER SLOTS` names it. */
export interface NodeAddress {
  host: string;
  port: number;
}

/**
 * A connection that belongs to dlock alone. It must never re-send a command
 * after a reconnect (a re-sent `DLOCK.ACQUIRE` would count twice): an
 * adapter opens it with reconnection and re-sending off, and a connection
 * that broke stays closed (dlock opens a new one).
 */
export interface Connection {
  /** Sends one command; resolves to its reply, rejects with the server's error reply. */
  call(args: readonly RedisArg[]): Promise<Reply>;
  /** Closes at once; commands in flight reject. Idempotent. */
  close(): void;
  /** True once the connection is closed or broken. */
  readonly closed: boolean;
  /** Lets the process exit while this connection is idle (sockets are `unref`'d). */
  unref(): void;
  /** Keeps the process alive while a command is in flight. */
  ref(): void;
}

/** What {@link Dlock} asks of a Redis client library. */
export interface Transport {
  /** `"ioredis"`, `"node-redis"` or a name of your own. */
  readonly name: string;
  /** True for a Redis Cluster: dlock then routes every command by its key's slot. */
  readonly isCluster: boolean;
  /**
   * Opens a new dedicated connection to `node`, or, when `node` is
   * undefined, to the server (any reachable node of a cluster). When
   * `signal` aborts before the connection is ready (dlock's connect and
   * handshake timeout: a stalled server answers no handshake), give up the
   * opening (reject, or close what was opened); dlock closes a connection
   * that arrives after it.
   */
  connect(node?: NodeAddress, signal?: AbortSignal): Promise<Connection>;
}
