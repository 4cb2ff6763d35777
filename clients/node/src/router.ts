/**
 * dlock's connections: per server (per master in a Cluster) one connection
 * for immediate commands (acquires without a wait, renewals, releases,
 * `CLIENT UNBLOCK`), and a small pool of connections for blocking waits, so
 * that a long wait never delays a renewal. None is the user's own
 * connection, none reconnects or re-sends, and idle ones never keep the
 * process alive.
 *
 * @module
 */
import { DlockError, ServerError, TimeoutError, fromReplyError } from "./errors.js";
import { performance } from "node:perf_hooks";
import { slotOf } from "./slots.js";
import { MAX_TIMER_MS } from "./watchdog.js";
import type { Connection, RedisArg, Reply, Transport } from "./transport.js";

/** A command in flight: when it must have been answered (Infinity: no timeout). */
interface InFlight {
  at: number;
  timeoutMs: number | undefined;
  command: RedisArg;
}

/**
 * A connection that refs its socket only while a command is in flight, and
 * closes it when a command goes unanswered past its timeout. One timer per
 * connection watches every command in flight (not one timer and one extra
 * promise per command, which were a measurable part of an acquire +
 * release pair): it re-arms itself for the earliest deadline and lapses
 * once nothing is in flight. A connection answers its commands in order, so
 * the commands in flight are a queue, each reply settling the oldest, and
 * the call is one `then` on the library's promise (no async frame).
 */
export class Tracked {
  /** The commands in flight, oldest first. */
  private readonly inflight: InFlight[] = [];
  private timer: NodeJS.Timeout | undefined;
  /** When the timer fires (Infinity: not armed). */
  private timerAt = Infinity;
  /** Set when the timer closed the connection: commands due by then reject with a TimeoutError. */
  private expiredAt: number | undefined;
  constructor(
    readonly conn: Connection,
    readonly node: string,
  ) {
    conn.unref();
  }
  get closed(): boolean {
    return this.conn.closed;
  }
  /**
   * Sends `args`; after `timeoutMs` without a reply the connection is closed
   * and the call rejects with a {@link TimeoutError}. `stamp` gets the time
   * the command was written.
   */
  call(
    args: readonly RedisArg[],
    timeoutMs: number | undefined,
    stamp?: SendStamp,
  ): Promise<Reply> {
    const now = performance.now();
    if (stamp) stamp.sent = now;
    let pending: Promise<Reply>;
    try {
      pending = this.conn.call(args);
    } catch (err) {
      return Promise.reject(fromReplyError(err));
    }
    // Recorded once sent (a reply cannot come before this tick ends).
    if (this.inflight.length === 0) this.conn.ref();
    const at = timeoutMs === undefined ? Infinity : now + timeoutMs;
    this.inflight.push({ at, timeoutMs, command: args[0] as RedisArg });
    if (at < this.timerAt) this.arm(at);
    return pending.then(this.answered, this.failed);
  }
  /** Takes the oldest command in flight off the queue: the one just settled. */
  private settle(): InFlight | undefined {
    const settled = this.inflight.shift();
    if (this.inflight.length === 0 && !this.conn.closed) this.conn.unref();
    return settled;
  }
  private readonly answered = (reply: Reply): Reply => {
    this.settle();
    return reply;
  };
  private readonly failed = (err: unknown): never => {
    const settled = this.settle();
    if (settled && this.expiredAt !== undefined && settled.at <= this.expiredAt) {
      throw new TimeoutError(
        `no reply to ${String(settled.command)} within ${settled.timeoutMs} ms`,
      );
    }
    throw fromReplyError(err);
  };
  private arm(at: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    // At most MAX_TIMER_MS ahead (a longer delay fires at once): check re-arms.
    this.timer = setTimeout(
      () => this.check(),
      Math.min(MAX_TIMER_MS, Math.max(0, at - performance.now())),
    );
    // The socket is ref'd while a command is in flight: that keeps the process alive.
    this.timer.unref();
  }
  private check(): void {
    this.timer = undefined;
    this.timerAt = Infinity;
    const now = performance.now();
    let earliest = Infinity;
    for (const command of this.inflight) earliest = Math.min(earliest, command.at);
    if (earliest <= now) {
      this.expiredAt = now;
      this.conn.close();
    } else if (earliest < Infinity) {
      this.arm(earliest);
    }
  }
  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
    this.conn.close();
  }
}

/** Filled with the monotonic time a command was written (after any connection was opened). */
export interface SendStamp {
  sent: number;
}

/** A pooled connection for one blocking wait, with its `CLIENT ID`. */
export interface Blocking {
  readonly conn: Tracked;
  readonly id: string;
}

interface NodeState {
  command?: Promise<Tracked>;
  /** The command connection once open, for the hot path without a promise hop. */
  ready?: Tracked;
  idle: Blocking[];
}

/** Settings of {@link Router}. */
export interface RouterOptions {
  /** Reply timeout of immediate commands, ms. */
  responseTimeout: number;
  /** Most idle blocking connections kept per node. */
  maxIdle: number;
}

const MAX_REDIRECTS = 3;

/** Routes commands to the node of their key and owns every connection dlock opens. */
export class Router {
  private readonly nodes = new Map<string, NodeState>();
  private slots: string[] | undefined;
  private slotsLoad: Promise<void> | undefined;
  private closed = false;
  /** Every connection opened and not yet seen closed, so that close() reaches them all. */
  private readonly open_ = new Set<Tracked>();

  constructor(
    readonly transport: Transport,
    readonly options: RouterOptions,
  ) {}

  private state(node: string): NodeState {
    let state = this.nodes.get(node);
    if (!state) {
      state = { idle: [] };
      this.nodes.set(node, state);
    }
    return state;
  }

  /** Whether {@link Router.close} was called. */
  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Opens a connection to `node`, its handshake included, within
   * `timeoutMs` (R4.7): a stalled server (paused, frozen) accepts the TCP
   * connection and then answers no handshake, and neither library bounds
   * that. On the timeout the opening is aborted (the transport's signal),
   * and a connection that still arrives is closed.
   */
  private async open(node: string, timeoutMs: number): Promise<Tracked> {
    if (this.closed) throw new DlockError("dlock is closed");
    const address = node === "" ? undefined : parseAddress(node);
    const abort = new AbortController();
    const connecting = this.transport.connect(address, abort.signal);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => {
          reject(
            new TimeoutError(
              `no connection to ${node === "" ? "the server" : node} within ${Math.round(timeoutMs)} ms`,
            ),
          );
          abort.abort();
        },
        Math.min(MAX_TIMER_MS, Math.max(1, timeoutMs)),
      );
    });
    let conn: Connection;
    try {
      conn = await Promise.race([connecting, timedOut]);
    } catch (err) {
      connecting.then(
        (late) => late.close(),
        () => {},
      );
      throw err;
    } finally {
      clearTimeout(timer);
    }
    if (this.closed) {
      conn.close();
      throw new DlockError("dlock is closed");
    }
    const tracked = new Tracked(conn, node);
    if (this.open_.size >= 64) {
      for (const known of this.open_) if (known.closed) this.open_.delete(known);
    }
    this.open_.add(tracked);
    return tracked;
  }

  /** The node serving `key`: `""` on a single server (without a promise). */
  nodeOf(key: string | Buffer): string | Promise<string> {
    if (!this.transport.isCluster) return "";
    return this.clusterNodeOf(key);
  }

  private async clusterNodeOf(key: string | Buffer): Promise<string> {
    if (!this.slots) await this.loadSlots();
    const node = this.slots?.[slotOf(key)];
    if (node === undefined) throw new DlockError(`no node serves the slot of key ${String(key)}`);
    return node;
  }

  /** Reads the slot map with `CLUSTER SLOTS` (one load at a time). */
  loadSlots(): Promise<void> {
    this.slotsLoad ??= (async () => {
      let conn: Tracked | undefined;
      try {
        const known = this.slots ? [...new Set(this.slots)].filter(Boolean) : [];
        conn = await this.open(known[0] ?? "", this.options.responseTimeout);
        const reply = await conn.call(["CLUSTER", "SLOTS"], this.options.responseTimeout);
        const slots: string[] = this.slots ? [...this.slots] : new Array<string>(16384).fill("");
        for (const range of (reply as Reply[]) ?? []) {
          const [start, end, master] = range as [string, string, Reply[]];
          const host = String(master[0]) || "127.0.0.1";
          const port = String(master[1]);
          for (let slot = Number(start); slot <= Number(end); slot++)
            slots[slot] = `${host}:${port}`;
        }
        this.slots = slots;
      } finally {
        conn?.close();
        this.slotsLoad = undefined;
      }
    })();
    return this.slotsLoad;
  }

  /** The command connection of `node`, opened within the response timeout. */
  private command(node: string): Promise<Tracked> {
    const state = this.state(node);
    const current = state.command;
    if (current) {
      return current.then(
        (conn) => {
          if (!conn.closed) return conn;
          if (state.command === current) {
            state.command = undefined;
            state.ready = undefined;
          }
          return this.command(node);
        },
        () => {
          if (state.command === current) state.command = undefined;
          return this.command(node);
        },
      );
    }
    const opening = this.open(node, this.options.responseTimeout);
    state.command = opening;
    void opening.then(
      (conn) => {
        if (state.command === opening) state.ready = conn;
      },
      () => {},
    );
    opening.catch(() => {
      if (state.command === opening) state.command = undefined;
    });
    return opening;
  }

  /**
   * Sends an immediate command for `key` on the command connection of its
   * node, following `MOVED` (the command did not run there) up to 3 times.
   */
  call(key: string | Buffer, args: readonly RedisArg[], stamp?: SendStamp): Promise<Reply> {
    // A single server sends no MOVED: straight to its connection.
    if (!this.transport.isCluster) return this.callOn("", args, stamp);
    return this.callRouted(key, args, stamp);
  }

  private async callRouted(
    key: string | Buffer,
    args: readonly RedisArg[],
    stamp?: SendStamp,
  ): Promise<Reply> {
    let node = await this.nodeOf(key);
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.callOn(node, args, stamp);
      } catch (err) {
        const moved = movedTo(err);
        if (moved === undefined || attempt >= MAX_REDIRECTS) throw err;
        if (this.slots) this.slots[slotOf(key)] = moved;
        void this.loadSlots().catch(() => {});
        node = moved;
      }
    }
  }

  /**
   * Sends an immediate command on `node`'s command connection. The response
   * timeout bounds the whole call, the opening of that connection included.
   */
  callOn(node: string, args: readonly RedisArg[], stamp?: SendStamp): Promise<Reply> {
    const ready = this.nodes.get(node)?.ready;
    const timeout = this.options.responseTimeout;
    if (ready && !ready.closed) return ready.call(args, timeout, stamp);
    const started = performance.now();
    return this.command(node).then((conn) =>
      conn.call(args, Math.max(1, timeout - (performance.now() - started)), stamp),
    );
  }

  /**
   * A connection for one blocking wait on `node`: an idle one from the pool
   * (without a promise), or a new one, opened and identified (`CLIENT ID`)
   * within `timeoutMs` (default: the response timeout).
   */
  takeBlocking(node: string, timeoutMs?: number): Blocking | Promise<Blocking> {
    const state = this.state(node);
    while (state.idle.length > 0) {
      const blocking = state.idle.pop() as Blocking;
      if (!blocking.conn.closed) return blocking;
    }
    return this.openBlocking(node, timeoutMs ?? this.options.responseTimeout);
  }

  private async openBlocking(node: string, timeoutMs: number): Promise<Blocking> {
    const started = performance.now();
    const conn = await this.open(node, timeoutMs);
    try {
      const left = Math.max(1, timeoutMs - (performance.now() - started));
      const id = await conn.call(["CLIENT", "ID"], left);
      return { conn, id: String(id) };
    } catch (err) {
      conn.close();
      throw err;
    }
  }

  /** Returns a blocking connection whose last command was answered; closes it when the pool is full. */
  giveBack(node: string, blocking: Blocking): void {
    const state = this.state(node);
    if (this.closed || blocking.conn.closed || state.idle.length >= this.options.maxIdle) {
      blocking.conn.close();
      this.open_.delete(blocking.conn);
      return;
    }
    state.idle.push(blocking);
  }

  /** Closes every connection; calls in flight reject. */
  close(): void {
    this.closed = true;
    for (const conn of this.open_) conn.close();
    this.open_.clear();
    for (const state of this.nodes.values()) {
      void state.command?.then((conn) => conn.close()).catch(() => {});
      for (const blocking of state.idle) blocking.conn.close();
      state.idle = [];
    }
    this.nodes.clear();
  }
}

function parseAddress(node: string): { host: string; port: number } {
  const colon = node.lastIndexOf(":");
  return { host: node.slice(0, colon), port: Number(node.slice(colon + 1)) };
}

/** The node a `MOVED` error names, if `err` is one. */
function movedTo(err: unknown): string | undefined {
  if (!(err instanceof ServerError) || err.code !== "MOVED") return undefined;
  return err.message.split(" ")[2];
}
