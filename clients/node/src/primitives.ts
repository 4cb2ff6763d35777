/**
 * Semaphores and count-down latches.
 *
 * @module
 */
import { performance } from "node:perf_hooks";
import type { AcquireOptions, Dlock } from "./dlock.js";
import { ABORTED, raceAbort } from "./abort.js";
import type { Lease } from "./lease.js";
import { toBigInt, toNumber } from "./replies.js";

/** Options of a permit request: a lock request's, and `weight`. */
export type PermitOptions = Omit<AcquireOptions, "shared" | "limit">;

/**
 * A semaphore of `limit` permits on one key (shared holds with `LIMIT`). Each
 * permit is a {@link Lease} with its own lease, so a crashed holder's permit
 * comes back when its lease ends. Every user of one key must pass the same limit.
 */
export class Semaphore {
  /** @internal */
  constructor(
    private readonly dlock: Dlock,
    readonly key: string,
    readonly limit: number,
  ) {
    if (!Number.isSafeInteger(limit) || limit < 1)
      throw new RangeError(`dlock: invalid limit ${limit}: a whole number, at least 1`);
  }

  /** Takes a permit (`weight` permits with `options.weight`); rejects with LockBusyError when busy. */
  acquire(options: PermitOptions = {}): Promise<Lease> {
    return this.dlock.acquire(this.key, { ...options, shared: true, limit: this.limit });
  }

  /** Like {@link Semaphore.acquire}, null when busy. */
  tryAcquire(options: PermitOptions = {}): Promise<Lease | null> {
    return this.dlock.tryAcquire(this.key, { ...options, shared: true, limit: this.limit });
  }

  /** Runs `routine` holding a permit, and gives it back after. */
  async withPermit<T>(
    options: PermitOptions,
    routine: (lease: Lease, signal: AbortSignal) => Promise<T> | T,
  ): Promise<T> {
    return this.dlock.withLock(this.key, { ...options, shared: true, limit: this.limit }, routine);
  }
}

/** How a latch wait ended. */
export type LatchWait = "opened" | "vanished" | "timed_out";

/** A count-down latch (`DLOCK.LATCH`, `DLOCK.COUNTDOWN`, `DLOCK.AWAIT`). */
export class Latch {
  /** @internal */
  constructor(
    private readonly dlock: Dlock,
    readonly key: string,
  ) {}

  /** Creates the latch with `count` for at most `ttl` ms; false when it already exists. */
  async init(count: number, ttl: number): Promise<boolean> {
    const reply = await this.dlock.router.call(this.key, [
      "DLOCK.LATCH",
      this.key,
      String(count),
      String(ttl),
    ]);
    return toNumber(reply, "DLOCK.LATCH") === 1;
  }

  /** Counts down by `n` (default 1); resolves to the count left (0 once open or missing). */
  async countDown(n = 1): Promise<bigint> {
    const reply = await this.dlock.router.call(this.key, ["DLOCK.COUNTDOWN", this.key, String(n)]);
    return toBigInt(reply, "DLOCK.COUNTDOWN");
  }

  /** The count left, or null when no latch exists (opened, expired, never made). */
  async count(): Promise<bigint | null> {
    const reply = await this.dlock.router.call(this.key, ["DLOCK.INFO", this.key]);
    if (reply === null) return null;
    if (!Array.isArray(reply)) return null;
    for (let i = 0; i + 1 < reply.length; i += 2) {
      if (String(reply[i]) === "count") return toBigInt(reply[i + 1], "DLOCK.INFO count");
    }
    return null;
  }

  /**
   * Waits for the latch to open, at most `timeout` ms (`Infinity`: no end),
   * on a connection of its own. Aborting `signal` ends the wait with
   * `CLIENT UNBLOCK` and rejects with `signal.reason`.
   */
  async wait(timeout: number = Infinity, signal?: AbortSignal): Promise<LatchWait> {
    signal?.throwIfAborted();
    const router = this.dlock.router;
    // The whole wait, a connection's opening included, ends by the timeout
    // plus the margin (R4.6).
    const started = performance.now();
    const bound = Number.isFinite(timeout) ? timeout + this.dlock.options.waitMargin : undefined;
    const node = await router.nodeOf(this.key);
    const conn = await router.takeBlocking(node, bound);
    let giveBack = true;
    try {
      const spent = performance.now() - started;
      const ms = Number.isFinite(timeout) ? String(Math.max(1, Math.ceil(timeout - spent))) : "0";
      const limit = bound === undefined ? undefined : Math.max(1, bound - spent);
      const pending = conn.conn.call(["DLOCK.AWAIT", this.key, ms], limit);
      pending.catch(() => {});
      const outcome = signal ? await raceAbort(pending, signal) : await pending;
      if (outcome === ABORTED) {
        giveBack = false;
        // In the background (R4.7): the unblock, then closing the connection.
        void router
          .callOn(node, ["CLIENT", "UNBLOCK", conn.id])
          .catch(() => {})
          .finally(() => conn.conn.close());
        throw (signal as AbortSignal).reason;
      }
      if (outcome === null) return "timed_out";
      return toNumber(outcome, "DLOCK.AWAIT") === 1 ? "opened" : "vanished";
    } catch (err) {
      if (conn.conn.closed) giveBack = false;
      throw err;
    } finally {
      if (giveBack) router.giveBack(node, conn);
    }
  }
}
