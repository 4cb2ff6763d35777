/**
 * A held lock and its watchdog.
 *
 * @module
 */
import { performance } from "node:perf_hooks";
import { DlockError, LockLostError, NotOwnerError, ServerError } from "./errors.js";
import { toBigInt } from "./replies.js";
import type { Blocking, Router } from "./router.js";
import type { Reply } from "./transport.js";
import { MAX_TIMER_MS, type Watchdog, type Watched } from "./watchdog.js";

/** How the watchdog of one lease is set. */
export interface WatchdogSettings {
  /** Renewal period, ms. */
  renewEvery: number;
  /** Fixed part of the safety margin, ms. */
  safetyMargin: number;
  /** Part of the margin proportional to the lease. */
  clockDrift: number;
  /** False: no renewals; the lease is still marked lost at its local deadline. */
  autoRenew: boolean;
}

/** Retry delay after a renewal failed for a reason that may pass (connection, OOM, LOADING). */
const RETRY_MS = 50;

/** @internal What the client hands a new lease. */
export interface LeaseInit {
  router: Router;
  /** The client's one timer for all its leases. */
  watchdog: Watchdog;
  keys: readonly string[];
  owner: string;
  /** Each key's token as the server's decimal text. */
  tokens: readonly string[];
  holds: number;
  shared: boolean;
  ttl: number;
  /** Monotonic time (`performance.now()`) the lease is counted from. */
  since: number;
  settings: WatchdogSettings;
  /** A SESSION hold's connection, given back to the pool at release. */
  session?: { node: string; blocking: Blocking };
}

/** The reason a lease's signal carries once the lease was released. */
export class LeaseReleasedError extends DlockError {
  override name = "LeaseReleasedError";
}

/**
 * A hold on one or more keys, renewed by a watchdog until {@link Lease.release}.
 *
 * `await using lease = await dlock.acquire("k")` releases it at the end of the block.
 */
export class Lease implements AsyncDisposable, Watched {
  /** The keys held, in the order asked. */
  readonly keys: readonly string[];
  /** The owner name the holds are under (unique per lease unless you passed one). */
  readonly owner: string;
  /** Each key's fencing token, exact. */
  get tokens(): readonly bigint[] {
    // Made on first use: most leases are released without anyone reading it.
    this.parsedTokens ??= this.tokenTexts.map((text) => BigInt(text));
    return this.parsedTokens;
  }
  /** The hold count after this grant (of the first key). */
  readonly holds: number;
  /** Whether the holds are shared (read lock, semaphore permit). */
  readonly shared: boolean;
  /** The lease, ms. */
  readonly ttl: number;
  /**
   * Aborted when the lease is lost (reason: a {@link LockLostError}), and
   * only then: a release is not a loss (R3.3), so work still running with
   * this signal after a release is not aborted by it. Pass it to the work
   * the lock protects.
   */
  get signal(): AbortSignal {
    // Made on first use: most leases are released without anyone reading
    // it, and an AbortController, its abort event and the reason's stack
    // trace were a large part of an acquire + release pair's CPU time.
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lostError) this.controller.abort(this.lostError);
    }
    return this.controller.signal;
  }

  private controller: AbortController | undefined;
  /** How the lease ended first, if it has: its signal's reason. */
  private ended: "released" | "lost" | undefined;
  private readonly tokenTexts: readonly string[];
  private parsedTokens: readonly bigint[] | undefined;
  private readonly router: Router;
  private readonly watchdog: Watchdog;
  private readonly settings: WatchdogSettings;
  private readonly margin: number;
  /** The local deadline: the lease counts as lost from then on unless a renewal moved it. */
  private deadline: number;
  /** When the next renewal is due (Infinity: none scheduled, or one in flight). */
  private renewAt: number;
  /** Whether the watchdog wakes the lease at its deadline too. */
  private watchDeadline: boolean;
  /** @internal The watchdog's: when it wakes this lease. */
  wakeAt = Infinity;
  /** @internal The watchdog's: this lease's place in its heap. */
  heapIndex = -1;
  private renewing: Promise<unknown> | undefined;
  private releasing: Promise<void> | undefined;
  private lostError: LockLostError | undefined;
  private session: LeaseInit["session"];

  /** @internal */
  constructor(init: LeaseInit) {
    this.router = init.router;
    this.watchdog = init.watchdog;
    this.keys = init.keys;
    this.owner = init.owner;
    this.tokenTexts = init.tokens;
    this.holds = init.holds;
    this.shared = init.shared;
    this.ttl = init.ttl;
    this.settings = init.settings;
    this.session = init.session;
    this.margin = init.settings.safetyMargin + init.ttl * init.settings.clockDrift;
    this.deadline = init.since + init.ttl - this.margin;
    // Counted from the send (or the grant), a little before now: never late.
    this.renewAt = this.settings.autoRenew ? init.since + this.settings.renewEvery : Infinity;
    // The deadline matters only once a renewal is due (the renewal's wake-up
    // starts watching it), unless no renewal comes before it.
    this.watchDeadline = this.renewAt >= this.deadline;
    this.reschedule();
  }

  /** The fencing token of the first key. */
  get token(): bigint {
    return this.tokens[0] as bigint;
  }

  /** The first key. */
  get key(): string {
    return this.keys[0] as string;
  }

  /** True once the lease is known lost (and not because it was released). */
  get lost(): boolean {
    return this.lostError !== undefined;
  }

  /** True while neither lost nor released. */
  get held(): boolean {
    return this.ended === undefined;
  }

  /** Why the lease was lost, if it was. */
  get lostReason(): LockLostError | undefined {
    return this.lostError;
  }

  /**
   * Renews every key's lease now (the watchdog does it by itself). Rejects
   * with a {@link LockLostError} when the server no longer has the hold.
   */
  async renew(): Promise<void> {
    if (this.lostError) throw this.lostError;
    if (this.releasing) throw new LeaseReleasedError("the lease was released");
    if (performance.now() >= this.deadline) {
      this.lose("no renewal succeeded before the local deadline");
      throw this.lostError;
    }
    // R4.6: a renewal by hand ends by the local deadline at the latest (a
    // stalled server answers nothing), lost then; and a round that renewed
    // nothing (no answer, a refused connection) rejects with its failure.
    let timer: NodeJS.Timeout | undefined;
    const failure = await Promise.race([
      this.renewOnce(),
      new Promise<unknown>((resolve) => {
        timer = setTimeout(
          () => {
            this.lose("no renewal succeeded before the local deadline");
            resolve(undefined);
          },
          Math.min(MAX_TIMER_MS, Math.max(0, this.deadline - performance.now())),
        );
      }),
    ]);
    clearTimeout(timer);
    if (this.lostError) throw this.lostError;
    if (failure !== undefined) throw failure;
  }

  /**
   * Gives back one hold of each key. Idempotent: later calls return the first
   * call's promise. A lease already lost is still released on the server (it
   * may have kept the hold), and a `NOTOWNER` is then not an error; for a
   * lease not known lost it rejects with {@link NotOwnerError}.
   */
  release(): Promise<void> {
    this.releasing ??= this.doRelease();
    return this.releasing;
  }

  /** Releases: `await using lease = ...`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.release();
  }

  private async doRelease(): Promise<void> {
    this.stopTimers();
    const wasLost = this.lost;
    // A release is not a loss (R3.3): the signal stays as it is.
    if (this.ended === undefined) this.ended = "released";
    try {
      let notOwner: NotOwnerError | undefined;
      if (this.keys.length === 1) {
        // One key, the usual case: its reply as it comes, nothing gathered.
        try {
          await this.releaseKey(this.keys[0] as string);
        } catch (err) {
          if (!(err instanceof NotOwnerError)) throw err;
          notOwner = err;
        }
      } else {
        const replies = await Promise.allSettled(this.keys.map((key) => this.releaseKey(key)));
        for (const reply of replies) {
          if (reply.status === "rejected" && !(reply.reason instanceof NotOwnerError)) {
            throw reply.reason;
          }
          if (reply.status === "rejected") notOwner = reply.reason as NotOwnerError;
        }
      }
      // The server had ended a hold the watchdog had not yet seen end: the
      // lease is lost, and the release says so.
      if (notOwner && !wasLost) {
        this.lostError = new LockLostError(
          this.keys,
          "the server had ended the hold (NOTOWNER at release)",
          {
            cause: notOwner,
          },
        );
        // The loss is learnt here: the signal fires, once, with it.
        this.controller?.abort(this.lostError);
        throw notOwner;
      }
    } finally {
      if (this.session) {
        this.router.giveBack(this.session.node, this.session.blocking);
        this.session = undefined;
      }
    }
  }

  private releaseKey(key: string): Promise<Reply> {
    return this.router.call(
      key,
      this.shared
        ? ["DLOCK.RELEASE", key, this.owner, "SHARED"]
        : ["DLOCK.RELEASE", key, this.owner],
    );
  }

  private stopTimers(): void {
    this.renewAt = Infinity;
    this.watchDeadline = false;
    this.watchdog.cancel(this);
  }

  /** Asks the watchdog for the earlier of the next renewal and the watched deadline. */
  private reschedule(): void {
    const at = this.watchDeadline ? Math.min(this.renewAt, this.deadline) : this.renewAt;
    if (at === Infinity) this.watchdog.cancel(this);
    else this.watchdog.schedule(this, at);
  }

  /** @internal The watchdog's call: the deadline passed, or a renewal is due. */
  wake(now: number): void {
    if (this.ended) return;
    if (this.watchDeadline && now >= this.deadline) {
      this.lose("no renewal succeeded before the local deadline");
      return;
    }
    if (now >= this.renewAt) {
      this.renewAt = Infinity;
      this.watchDeadline = true;
      void this.renewOnce().catch(() => {});
    }
    this.reschedule();
  }

  /**
   * One renewal round: never two in flight for one lease. Resolves to
   * undefined when it renewed (or the lease ended), else to the failure
   * that left a retry due (no answer, a connection error).
   */
  private renewOnce(): Promise<unknown> {
    this.renewing ??= this.renewRound().finally(() => {
      this.renewing = undefined;
    });
    return this.renewing;
  }

  private async renewRound(): Promise<unknown> {
    if (this.ended) return undefined;
    const ttl = String(this.ttl);
    const stamps = this.keys.map(() => ({ sent: performance.now() }));
    const results = await Promise.allSettled(
      this.keys.map((key, i) =>
        this.router.call(key, ["DLOCK.RENEW", key, this.owner, ttl], stamps[i]),
      ),
    );
    // The renewed lease counts from the earliest of the renewals' sends.
    const sent = Math.min(...stamps.map((stamp) => stamp.sent));
    if (this.ended) return undefined;
    let retry: unknown;
    for (const [index, result] of results.entries()) {
      if (result.status === "rejected") {
        const err = result.reason;
        if (err instanceof NotOwnerError) {
          this.lose("the server no longer has the hold (NOTOWNER)", err);
          return undefined;
        }
        if (err instanceof ServerError && err.code === "WRONGTYPE") {
          this.lose("the key now holds another type (WRONGTYPE)", err);
          return undefined;
        }
        retry ??= err ?? new DlockError("the renewal failed");
        continue;
      }
      let token: bigint | undefined;
      try {
        token = result.value === null ? undefined : toBigInt(result.value, "DLOCK.RENEW");
      } catch {
        token = undefined;
      }
      if (token !== this.tokens[index]) {
        this.lose(`a renewal answered ${token === undefined ? "null" : `token ${token}`}`);
        return undefined;
      }
    }
    const now = performance.now();
    if (retry !== undefined) {
      if (now + RETRY_MS < this.deadline) {
        this.renewAt = now + RETRY_MS;
        this.reschedule();
      }
      return retry;
    }
    this.deadline = Math.max(this.deadline, sent + this.ttl - this.margin);
    this.watchDeadline = true;
    if (this.settings.autoRenew) this.renewAt = now + this.settings.renewEvery;
    this.reschedule();
    return undefined;
  }

  private lose(why: string, cause?: unknown): void {
    if (this.ended) return;
    this.stopTimers();
    this.lostError = new LockLostError(this.keys, why, cause === undefined ? undefined : { cause });
    this.ended = "lost";
    this.controller?.abort(this.lostError);
  }
}
