/**
 * The client: {@link Dlock}.
 *
 * @module
 */
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { type ClientLike, toTransport } from "./adapters.js";
import {
  DlockError,
  LockBusyError,
  NotOwnerError,
  NotReplicatedError,
  UnexpectedReplyError,
} from "./errors.js";
import { ABORTED, raceAbort } from "./abort.js";
import { Lease } from "./lease.js";
import { Latch, Semaphore } from "./primitives.js";
import { Election } from "./election.js";
import { type GrantText, toGrantText, toNumber } from "./replies.js";
import { type Blocking, Router } from "./router.js";
import { slotOf } from "./slots.js";
import type { RedisArg, Reply } from "./transport.js";
import { Watchdog } from "./watchdog.js";

/** Settings of a {@link Dlock}; every one has a default. */
export interface DlockOptions {
  /** Default lease, ms. Default 30000. */
  ttl?: number;
  /** Renew each lease every `ttl / renewDivisor`. Default 3. */
  renewDivisor?: number;
  /** Fixed part of the margin by which a lease counts as lost before it ends, ms. Default 5. */
  safetyMargin?: number;
  /** Part of that margin proportional to the lease. Default 0.01. */
  clockDrift?: number;
  /** A blocking wait's read timeout is the wait plus this, ms. Default 2000. */
  waitMargin?: number;
  /** Reply timeout of immediate commands, ms. Default 5000. */
  responseTimeout?: number;
  /** Idle connections kept per server for blocking waits. Default 16. */
  maxIdle?: number;
}

/** Options of one lock request. */
export interface AcquireOptions {
  /** The lease, ms (the command's `ttl`). Default: the client's `ttl` (30 s). */
  ttl?: number;
  /** How long to wait in the lock's queue, ms (`BLOCK`). `Infinity` waits forever. Default: no wait. */
  wait?: number;
  /** Aborting it ends the wait (with `CLIENT UNBLOCK`) and rejects with `signal.reason`. */
  signal?: AbortSignal;
  /**
   * The owner name; default a new one per lease (R1.1: 128 random bits drawn
   * once per process, then a count). Pass one only to re-enter a lock you hold.
   */
  owner?: string;
  /** `DLOCK.FAIR` instead of `DLOCK.ACQUIRE` (single keys only). */
  fair?: boolean;
  /** `SESSION`: the hold ends when dlock's connection closes. */
  session?: boolean;
  /** `SHARED`: a read lock or a semaphore permit. */
  shared?: boolean;
  /** `LIMIT n` (with `shared`): a semaphore of `n` permits. */
  limit?: number;
  /** `WEIGHT w` (with `shared` and `limit`): take `w` permits. */
  weight?: number;
  /** After the grant, `WAIT count timeout`; fewer confirmations release it and reject. */
  replicas?: { count: number; timeout: number };
  /** The watchdog's period for this lease, ms. Default `ttl / renewDivisor`. */
  renewEvery?: number;
  /** False: no watchdog renewals (the lease still counts as lost at its deadline). Default true. */
  autoRenew?: boolean;
}

/** First and longest delay between a background release's attempts, ms. */
const CLEANUP_RETRY_MS = 100;
const CLEANUP_RETRY_MAX_MS = 1_000;

const DEFAULTS: Required<DlockOptions> = {
  ttl: 30_000,
  renewDivisor: 3,
  safetyMargin: 5,
  clockDrift: 0.01,
  waitMargin: 2_000,
  responseTimeout: 5_000,
  maxIdle: 16,
};

/**
 * Generated owners (R1.1): 128 random bits drawn once per process (a
 * worker thread loads its own copy of this module, so draws its own),
 * then a count, so that no two acquisitions anywhere share an owner. One
 * `randomUUID()` per acquisition cost more than the rest of building the
 * command.
 */
const OWNER_PREFIX = `${randomBytes(16).toString("hex")}-`;
let ownerCount = 0;

function newOwner(): string {
  return OWNER_PREFIX + (++ownerCount).toString(36);
}

/**
 * At most this many keys keep the owner of a failed fair try; beyond it the
 * oldest are forgotten (their reservations then end on the server by
 * themselves, after `dlock.fair-reservation-ms`).
 */
const FAIR_OWNERS_KEPT = 10_000;

/**
 * A dlock client over a node-redis or ioredis client or cluster.
 *
 * ```ts
 * const dlock = new Dlock(redisClient);
 * await using lease = await dlock.acquire("orders:42", { wait: 10_000 });
 * await pay(42, lease.token, { signal: lease.signal });
 * ```
 *
 * It opens its own connections (duplicates of the client passed): close it
 * with {@link Dlock.close} (or `await using`). Idle connections and the
 * watchdog's timers never keep the process alive.
 */
export class Dlock implements AsyncDisposable {
  /** @internal */
  readonly router: Router;
  /** @internal The one timer of every lease this client grants. */
  readonly watchdog = new Watchdog();
  /** The settings in force. */
  readonly options: Readonly<Required<DlockOptions>>;
  /**
   * Per key, the generated owner of the last fair request that was not
   * granted: the next fair request for that key without an `owner` asks
   * under it again, so a poller keeps its reservation, its place in the
   * queue (R8). An owner is checked out while its request is in flight, so
   * two concurrent requests never share one (they would re-enter each
   * other's hold).
   */
  private readonly fairOwners = new Map<string, string>();
  /** Clean-ups running in the background (R4.7). */
  private readonly cleanups = new Set<Promise<void>>();
  /** Aborted by {@link Dlock.close}: background releases stop trying again. */
  private readonly closing = new AbortController();

  constructor(client: ClientLike, options: DlockOptions = {}) {
    this.options = { ...DEFAULTS, ...options };
    this.router = new Router(toTransport(client), {
      responseTimeout: this.options.responseTimeout,
      maxIdle: this.options.maxIdle,
    });
  }

  /** Takes the lock on `key`; rejects with {@link LockBusyError} when not granted in the wait. */
  acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    return this.grant([key], false, options, true) as Promise<Lease>;
  }

  /** Like {@link Dlock.acquire}, but resolves to `null` when busy. */
  tryAcquire(key: string, options: AcquireOptions = {}): Promise<Lease | null> {
    return this.grant([key], false, options);
  }

  /**
   * Takes every key in one atomic step (`DLOCK.MACQUIRE`), or none. In a
   * Cluster the keys must share a slot (use a hash tag: `{order:42}:a`).
   */
  acquireMany(keys: readonly string[], options: AcquireOptions = {}): Promise<Lease> {
    return this.grant(keys, true, options, true) as Promise<Lease>;
  }

  /** {@link Dlock.acquireMany} that resolves to `null` when busy. */
  tryAcquireMany(keys: readonly string[], options: AcquireOptions = {}): Promise<Lease | null> {
    return this.grant(keys, true, options);
  }

  /** A read lock: a shared hold (readers share; a writer excludes everyone). */
  readLock(key: string, options: AcquireOptions = {}): Promise<Lease> {
    return this.acquire(key, { ...options, shared: true, limit: undefined });
  }

  /** A write lock: an exclusive hold of the same key. */
  writeLock(key: string, options: AcquireOptions = {}): Promise<Lease> {
    return this.acquire(key, { ...options, shared: false, limit: undefined });
  }

  /**
   * A semaphore of `limit` permits on `key` (weights with `acquire({ weight })`).
   * A limit that is not a whole number of at least 1 throws a RangeError.
   */
  semaphore(key: string, limit: number): Semaphore {
    return new Semaphore(this, key, limit);
  }

  /** Leader election on the lock at `key` (campaign, leader, observe, resign). */
  election(key: string): Election {
    return new Election(this, key);
  }

  /** The count-down latch at `key`. */
  latch(key: string): Latch {
    return new Latch(this, key);
  }

  /**
   * Runs `routine` under the lock and releases it after. `signal` aborts when
   * the lease is lost (or `options.signal` aborts): stop the work then.
   */
  async withLock<T>(
    key: string,
    options: AcquireOptions,
    routine: (lease: Lease, signal: AbortSignal) => Promise<T> | T,
  ): Promise<T> {
    const lease = await this.acquire(key, options);
    try {
      const signal = options.signal
        ? AbortSignal.any([lease.signal, options.signal])
        : lease.signal;
      return await routine(lease, signal);
    } finally {
      await lease.release();
    }
  }

  /**
   * Closes dlock's connections. Leases still held end with their lease on
   * the server. Clean-ups still running (the release of a wait that timed
   * out or was aborted) get up to the response timeout first.
   */
  async close(): Promise<void> {
    // Clean-ups try no more; an attempt in flight may end.
    this.closing.abort();
    if (this.cleanups.size > 0 && !this.router.isClosed) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.all(this.cleanups),
        new Promise((resolve) => {
          timer = setTimeout(resolve, this.options.responseTimeout);
        }),
      ]);
      clearTimeout(timer);
    }
    this.router.close();
  }

  /** Closes: `await using dlock = new Dlock(client)`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * @internal Builds and sends an acquire: the lease, or when not granted
   * null (`busy` false) or a {@link LockBusyError} (`busy` true).
   */
  async grant(
    keys: readonly string[],
    multi: boolean,
    options: AcquireOptions,
    busy = false,
  ): Promise<Lease | null> {
    const signal = options.signal;
    signal?.throwIfAborted();
    if (keys.length === 0) throw new DlockError("no key to lock");
    const ttl = options.ttl ?? this.options.ttl;
    checkArguments(keys, ttl, options);
    if (multi && options.fair) throw new DlockError("fair is for single keys");
    const generated = options.owner === undefined;
    const keepsPlace = generated && options.fair === true && !multi;
    let owner = options.owner;
    if (owner === undefined) {
      const kept = keepsPlace ? this.fairOwners.get(keys[0] as string) : undefined;
      if (kept !== undefined) this.fairOwners.delete(keys[0] as string);
      owner = kept ?? newOwner();
    }
    const shared = options.shared === true;
    const first = keys[0] as string;
    const args: RedisArg[] = multi
      ? ["DLOCK.MACQUIRE", String(keys.length), ...keys, owner, String(ttl)]
      : [options.fair ? "DLOCK.FAIR" : "DLOCK.ACQUIRE", first, owner, String(ttl)];
    if (shared) args.push("SHARED");
    if (options.limit !== undefined) args.push("LIMIT", String(options.limit));
    if (options.weight !== undefined && options.weight !== 1)
      args.push("WEIGHT", String(options.weight));
    if (options.session) args.push("SESSION");
    if (this.router.transport.isCluster && multi) {
      const slot = slotOf(first);
      const other = keys.find((key) => slotOf(key) !== slot);
      if (other !== undefined) {
        throw new DlockError(
          `CROSSSLOT keys ${first} and ${other} are in different slots: use a hash tag`,
          "CROSSSLOT",
        );
      }
    }
    const wait = options.wait ?? 0;
    const blocking = wait > 0 || options.replicas !== undefined || options.session === true;

    let grants: GrantText[] | null;
    let since: number;
    let session: { node: string; blocking: Blocking } | undefined;
    if (!blocking) {
      const stamp = { sent: 0 };
      let reply: Reply;
      try {
        reply = await this.router.call(first, args, stamp);
      } catch (err) {
        if (generated) this.settleUnanswered(err, keys, owner, shared, ttl);
        throw err;
      }
      since = stamp.sent;
      grants = readGrants(reply, multi);
      if (signal?.aborted) {
        if (grants) this.inBackground(this.releaseUntil(keys, owner, shared, ttl));
        throw signal.reason;
      }
    } else {
      // The whole call, a connection's opening included, ends by the wait
      // plus the margin (R4.2, R4.6); a wait without end opens its
      // connection within the response timeout.
      const started = performance.now();
      const bound = Number.isFinite(wait) ? wait + this.options.waitMargin : undefined;
      // A single server's node and an idle pooled connection come without an await.
      const nodeOrPromise = this.router.nodeOf(first);
      const node = typeof nodeOrPromise === "string" ? nodeOrPromise : await nodeOrPromise;
      const taken = this.router.takeBlocking(node, bound);
      let conn: Blocking;
      if ("conn" in taken) {
        conn = taken;
      } else if (signal) {
        // An abort ends the call while its connection opens (R4.6); the
        // connection, once open, goes to the pool.
        const opened = await raceAbort(taken, signal);
        if (opened === ABORTED) {
          taken.then(
            (late) => this.router.giveBack(node, late),
            () => {},
          );
          throw signal.reason;
        }
        conn = opened;
      } else {
        conn = await taken;
      }
      if (signal?.aborted) {
        // Aborted while the connection opened: nothing was sent.
        this.router.giveBack(node, conn);
        throw signal.reason;
      }
      let giveBack = true;
      try {
        const stamp = { sent: 0 };
        let timeout = bound;
        if (bound !== undefined) {
          const spent = performance.now() - started;
          timeout = Math.max(1, bound - spent);
          if (wait > 0) args.push("BLOCK", String(Math.max(1, Math.ceil(wait - spent))));
        } else if (wait > 0) {
          args.push("BLOCK", "0");
        }
        const pending = conn.conn.call(args, timeout, stamp);
        let outcome: Reply | typeof ABORTED;
        try {
          if (signal) {
            // Raced against the signal, the reply may come (or fail) unread.
            pending.catch(() => {});
            outcome = await raceAbort(pending, signal);
          } else {
            outcome = await pending;
          }
        } catch (err) {
          if (generated) this.settleUnanswered(err, keys, owner, shared, ttl);
          throw err;
        }
        if (outcome === ABORTED) {
          giveBack = false;
          this.inBackground(
            this.cancelWait(node, conn, pending, keys, owner, generated, shared, ttl),
          );
          throw (signal as AbortSignal).reason;
        }
        grants = readGrants(outcome, multi);
        // A blocked grant's lease starts when the server grants it: count from the reply.
        since = wait > 0 ? performance.now() : stamp.sent;
        if (grants && options.replicas) {
          const acked = toNumber(
            await conn.conn.call(
              ["WAIT", String(options.replicas.count), String(options.replicas.timeout)],
              options.replicas.timeout + this.options.waitMargin,
            ),
            "WAIT",
          );
          if (acked < options.replicas.count) {
            // The server answers: the release is awaited (bounded by the response timeout).
            await this.releaseAll(keys, owner, shared).catch(() => {});
            throw new NotReplicatedError(options.replicas.count, acked);
          }
        }
        if (grants && options.session) {
          session = { node, blocking: conn };
          giveBack = false;
        }
      } catch (err) {
        if (conn.conn.closed) giveBack = false;
        throw err;
      } finally {
        if (giveBack) this.router.giveBack(node, conn);
      }
    }
    if (!grants) {
      if (keepsPlace) this.keepFairOwner(first, owner);
      if (busy) throw new LockBusyError(keys);
      return null;
    }
    const firstGrant = grants[0] as GrantText;
    return new Lease({
      router: this.router,
      watchdog: this.watchdog,
      keys: multi ? [...keys] : keys,
      owner: firstGrant.owner,
      tokens: multi ? grants.map((g) => g.token) : [firstGrant.token],
      holds: firstGrant.holds,
      shared,
      ttl,
      since,
      session,
      settings: {
        renewEvery: options.renewEvery ?? ttl / this.options.renewDivisor,
        safetyMargin: this.options.safetyMargin,
        clockDrift: this.options.clockDrift,
        autoRenew: options.autoRenew ?? true,
      },
    });
  }

  /** Remembers the owner of a fair request that was not granted (its reservation's). */
  private keepFairOwner(key: string, owner: string): void {
    this.fairOwners.delete(key); // re-inserted last: the map's order is its age
    this.fairOwners.set(key, owner);
    if (this.fairOwners.size > FAIR_OWNERS_KEPT) {
      const oldest = this.fairOwners.keys().next().value as string;
      this.fairOwners.delete(oldest);
    }
  }

  /**
   * Runs a clean-up in the background (R4.7): the caller, other calls and
   * the library's I/O never wait for it; {@link Dlock.close} gives those
   * still running a short while.
   */
  private inBackground(cleanup: Promise<void>): void {
    const running = cleanup.catch(() => {});
    this.cleanups.add(running);
    void running.finally(() => this.cleanups.delete(running));
  }

  /**
   * Ends an aborted wait, in the background: `CLIENT UNBLOCK` on the wait's
   * node, then settles a grant that raced the abort. Redis 7.0 can drop the
   * reply of a waiter granted in the same turn as the unblock; a `PING`
   * sent behind the wait answers in its place, and a generated owner is
   * released blindly. When the unblock gets no answer (a stalled server),
   * closing the wait's connection ends the wait on the server.
   */
  private async cancelWait(
    node: string,
    conn: Blocking,
    pending: Promise<Reply>,
    keys: readonly string[],
    owner: string,
    generated: boolean,
    shared: boolean,
    ttl: number,
  ): Promise<void> {
    try {
      const unblocked = await this.router.callOn(node, ["CLIENT", "UNBLOCK", conn.id]).then(
        () => true,
        () => false,
      );
      // The PING's timeout closes the connection, which settles `pending` too.
      if (unblocked) void conn.conn.call(["PING"], this.options.responseTimeout).catch(() => {});
      else conn.conn.close();
      const late = await pending.catch(() => null);
      conn.conn.close();
      if (Array.isArray(late) || generated) await this.releaseUntil(keys, owner, shared, ttl);
    } finally {
      conn.conn.close();
    }
  }

  /**
   * An acquire that failed without an answer (a broken connection, a read
   * timeout: R5.3) may have been granted, or may still be granted when a
   * stalled server resumes: for a generated owner, which holds at most that
   * one hold, a release settles it, in the background. Error replies need
   * nothing.
   */
  private settleUnanswered(
    err: unknown,
    keys: readonly string[],
    owner: string,
    shared: boolean,
    ttl: number,
  ): void {
    if (err instanceof DlockError && err.code !== undefined) return;
    this.inBackground(this.releaseUntil(keys, owner, shared, ttl));
  }

  /**
   * Releases one hold of each key, trying again after a failure without an
   * answer (a stalled or restarting server) until the lease would have
   * ended by itself, or the client closes.
   */
  private async releaseUntil(
    keys: readonly string[],
    owner: string,
    shared: boolean,
    ttl: number,
  ): Promise<void> {
    const until = performance.now() + ttl;
    for (let delay = CLEANUP_RETRY_MS; ; delay = Math.min(delay * 2, CLEANUP_RETRY_MAX_MS)) {
      try {
        await this.releaseAll(keys, owner, shared);
        return;
      } catch (err) {
        if (err instanceof DlockError && err.code !== undefined) return;
        if (this.closing.signal.aborted || performance.now() + delay >= until) return;
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, delay).unref();
        const closing = this.closing.signal;
        closing.addEventListener("abort", done, { once: true });
        function done() {
          clearTimeout(timer);
          closing.removeEventListener("abort", done);
          resolve();
        }
      });
      if (this.closing.signal.aborted) return;
    }
  }

  /** Releases one hold of each key; NOTOWNER is not an error here. */
  private async releaseAll(keys: readonly string[], owner: string, shared: boolean): Promise<void> {
    await Promise.all(
      keys.map((key) =>
        this.router
          .call(
            key,
            shared ? ["DLOCK.RELEASE", key, owner, "SHARED"] : ["DLOCK.RELEASE", key, owner],
          )
          .catch((err: unknown) => {
            if (!(err instanceof NotOwnerError)) throw err;
          }),
      ),
    );
  }
}

function readGrants(reply: Reply, multi: boolean): GrantText[] | null {
  if (reply === null) return null;
  if (!multi) return [toGrantText(reply, "DLOCK.ACQUIRE")];
  if (!Array.isArray(reply)) throw new UnexpectedReplyError("DLOCK.MACQUIRE: expected an array");
  return reply.map((grant) => toGrantText(grant, "DLOCK.MACQUIRE"));
}

/** The longest owner, bytes (R1.3). */
const MAX_OWNER_BYTES = 512;

function typeName(value: unknown): string {
  return value === null ? "null" : typeof value;
}

/**
 * R9.2: a bad argument is refused before anything is sent, with a
 * TypeError (not a string, not a number) or a RangeError (out of range),
 * as node-redis refuses a key that is not a string; never quietly changed
 * into another value (ioredis would send `null` as "" and 42 as "42").
 */
function checkArguments(keys: readonly unknown[], ttl: unknown, options: AcquireOptions): void {
  for (const key of keys) {
    if (typeof key !== "string")
      throw new TypeError(`dlock: a key is a string, not ${typeName(key)}`);
  }
  if (typeof ttl !== "number")
    throw new TypeError(`dlock: ttl is a number of ms, not ${typeName(ttl)}`);
  if (!Number.isSafeInteger(ttl) || ttl <= 0)
    throw new RangeError(`dlock: invalid ttl ${ttl}: a whole number of ms, 1 to 2^53-1`);
  const { owner, wait, limit, weight } = options as Record<string, unknown>;
  if (owner !== undefined) {
    if (typeof owner !== "string")
      throw new TypeError(`dlock: an owner is a string, not ${typeName(owner)}`);
    const bytes = Buffer.byteLength(owner);
    if (owner === "*" || bytes < 1 || bytes > MAX_OWNER_BYTES)
      throw new RangeError(`dlock: an owner is 1 to ${MAX_OWNER_BYTES} bytes and not "*"`);
  }
  if (wait !== undefined) {
    if (typeof wait !== "number")
      throw new TypeError(`dlock: wait is a number of ms, not ${typeName(wait)}`);
    if (Number.isNaN(wait) || wait < 0)
      throw new RangeError(`dlock: invalid wait ${wait}: 0 or more ms`);
  }
  if (
    limit !== undefined &&
    (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 1)
  )
    throw new RangeError(`dlock: invalid limit ${String(limit)}: a whole number, at least 1`);
  if (weight !== undefined) {
    if (typeof weight !== "number" || !Number.isSafeInteger(weight) || weight < 1)
      throw new RangeError(`dlock: invalid weight ${String(weight)}: a whole number, at least 1`);
    if (limit === undefined) throw new RangeError("dlock: a weight needs a limit (a semaphore)");
    if (weight > (limit as number))
      throw new RangeError(`dlock: the weight ${weight} is above the limit ${String(limit)}`);
  }
}
