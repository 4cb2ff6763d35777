/**
 * Leader election on an exclusive lock with the watchdog, and `DLOCK.WATCH`
 * to follow changes without polling.
 *
 * The lock's owner string is `<identity>#<id>` (docs/clients.md R7.6):
 * the identity the candidate gives (host, address), then 32 lowercase hex
 * digits (a UUID v4 without its dashes) that keep the owner unique per
 * campaign. A leader's identity is the owner up to its last `#`, as every
 * dlock client reads it.
 *
 * @module
 */
import { randomUUID } from "node:crypto";
import { ABORTED, raceAbort } from "./abort.js";
import type { Dlock } from "./dlock.js";
import { DlockError, UnexpectedReplyError } from "./errors.js";
import type { Lease } from "./lease.js";
import { toBigInt, toNumber, toText } from "./replies.js";
import type { Reply } from "./transport.js";

/** The byte that ends the identity in a candidate's owner string. */
export const OWNER_SEPARATOR = "#";
/** The longest identity: an owner is at most 512 bytes, 33 of them `#` and the id. */
export const MAX_IDENTITY_BYTES = 512 - 33;

/** A leader as observed. */
export interface Leader {
  /** The identity the leader campaigned with. */
  identity: string;
  /** The lock's owner string (`<identity>#<id>`). */
  owner: string;
  /** The term: the leader's fencing token. Pass it to what the leader writes. */
  term: bigint;
  /** The lease left when observed, ms (-1 unknown). */
  pttl: number;
}

/**
 * The identity in an election owner string: the owner up to its last `#`,
 * or all of it when it has none (a hold taken outside an election).
 */
export function identityOf(owner: string): string {
  const at = owner.lastIndexOf(OWNER_SEPARATOR);
  return at >= 0 ? owner.slice(0, at) : owner;
}

/** Options of a campaign. */
export interface CampaignOptions {
  /** The leadership's lease, ms (renewed by the watchdog). Default: the client's ttl. */
  ttl?: number;
  /** How long to wait to lead, ms. Default: `Infinity` (wait until elected). */
  wait?: number;
  /** Aborting it ends the campaign (rejects with its reason). */
  signal?: AbortSignal;
  /** Tie the leadership to dlock's connection (`SESSION`). */
  session?: boolean;
}

/**
 * Leadership won by {@link Election.campaign}. A leader must stop acting
 * as one when {@link Leadership.signal} aborts: another may lead already,
 * with a larger term.
 */
export class Leadership implements AsyncDisposable {
  /** @internal */
  constructor(
    /** The lease that holds the leadership. */
    readonly lease: Lease,
    /** The identity campaigned with. */
    readonly identity: string,
  ) {}
  /** The term (the lease's fencing token). */
  get term(): bigint {
    return this.lease.token;
  }
  /** Aborted when the leadership is lost (a LockLostError) or resigned. */
  get signal(): AbortSignal {
    return this.lease.signal;
  }
  /** Whether it still leads (neither lost nor resigned). */
  get isLeader(): boolean {
    return this.lease.held;
  }
  /** Gives up the leadership. */
  resign(): Promise<void> {
    return this.lease.release();
  }
  /** Resigns: `await using leadership = await election.campaign(...)`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.resign();
  }
}

/** Options of {@link Election.observe}. */
export interface ObserveOptions {
  /** Ends the observation (the iterator finishes). */
  signal?: AbortSignal;
  /** Each `DLOCK.WATCH` waits this long before asking again, ms. Default 30000. */
  watchTimeout?: number;
}

/** Leader election on the lock at `key`. */
export class Election {
  /** @internal */
  constructor(
    private readonly dlock: Dlock,
    readonly key: string,
  ) {}

  /** Waits to lead with `identity`; rejects with LockBusyError when not elected in `options.wait`. */
  async campaign(identity: string, options: CampaignOptions = {}): Promise<Leadership> {
    const bytes = Buffer.byteLength(identity);
    if (bytes === 0 || bytes > MAX_IDENTITY_BYTES) {
      throw new DlockError(`an identity must be 1 to ${MAX_IDENTITY_BYTES} bytes`);
    }
    const owner = `${identity}${OWNER_SEPARATOR}${randomUUID().replaceAll("-", "")}`;
    const lease = await this.dlock.acquire(this.key, {
      owner,
      ttl: options.ttl,
      wait: options.wait ?? Infinity,
      signal: options.signal,
      session: options.session,
    });
    return new Leadership(lease, identity);
  }

  /** Who leads now, or null. */
  async leader(): Promise<Leader | null> {
    const reply = await this.dlock.router.call(this.key, ["DLOCK.INFO", this.key]);
    return leaderOfInfo(reply);
  }

  /**
   * The leadership changes, as an async iterator: first who leads now, then
   * each change (`null`: nobody leads). It never misses the latest state;
   * quick successive changes may be seen as one. Breaking out of the loop
   * or aborting `options.signal` ends the wait with `CLIENT UNBLOCK`.
   */
  async *observe(options: ObserveOptions = {}): AsyncGenerator<Leader | null, void, undefined> {
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const timeout = Math.max(1, Math.ceil(options.watchTimeout ?? 30_000));
    const router = this.dlock.router;
    try {
      let state = await this.leader();
      if (signal.aborted) return;
      yield state;
      let failures = 0;
      while (!signal.aborted) {
        const last = state ? state.term : 0n;
        const node = await router.nodeOf(this.key);
        const conn = await router.takeBlocking(node);
        let giveBack = true;
        let reply: Reply | typeof ABORTED;
        try {
          const pending = conn.conn.call(
            ["DLOCK.WATCH", this.key, String(last), String(timeout)],
            timeout + this.dlock.options.waitMargin,
          );
          pending.catch(() => {});
          reply = await raceAbort(pending, signal);
          if (reply === ABORTED) {
            giveBack = false;
            // In the background (R4.7): the unblock, then closing the connection.
            void router
              .callOn(node, ["CLIENT", "UNBLOCK", conn.id])
              .catch(() => {})
              .finally(() => conn.conn.close());
            return;
          }
          failures = 0;
        } catch (err) {
          if (conn.conn.closed) giveBack = false;
          if (++failures > 5) throw err;
          await new Promise((r) => setTimeout(r, 50 * 2 ** failures).unref());
          continue;
        } finally {
          if (giveBack) router.giveBack(node, conn);
        }
        if (reply === null) continue; // the watch timed out: ask again
        state = leaderOfWatch(reply);
        yield state;
      }
    } finally {
      stop.abort();
    }
  }
}

/** The newest holder in a `DLOCK.INFO` reply. */
export function leaderOfInfo(reply: Reply): Leader | null {
  if (reply === null) return null;
  if (!Array.isArray(reply)) throw new UnexpectedReplyError("DLOCK.INFO: expected an array");
  const field = (name: string) => {
    for (let i = 0; i + 1 < reply.length; i += 2)
      if (String(reply[i]) === name) return reply[i + 1];
    return undefined;
  };
  const owner = field("owner");
  if (owner !== null && owner !== undefined) {
    const ownerText = toText(owner, "DLOCK.INFO owner");
    return {
      owner: ownerText,
      identity: identityOf(ownerText),
      term: toBigInt(field("token"), "DLOCK.INFO token"),
      pttl: toNumber(field("pttl"), "DLOCK.INFO pttl"),
    };
  }
  let newest: Leader | null = null;
  const holders = field("holders");
  if (Array.isArray(holders)) {
    for (const holder of holders) {
      if (!Array.isArray(holder)) continue;
      const ownerText = toText(holder[0], "holder owner");
      const term = toBigInt(holder[3], "holder token");
      if (!newest || term > newest.term) {
        newest = {
          owner: ownerText,
          identity: identityOf(ownerText),
          term,
          pttl: toNumber(holder[4], "holder pttl"),
        };
      }
    }
  }
  return newest;
}

/** A `DLOCK.WATCH` reply `[token, owner, pttl]` (`[0, nil, -1]`: nobody). */
export function leaderOfWatch(reply: Reply): Leader | null {
  if (!Array.isArray(reply) || reply.length !== 3) {
    throw new UnexpectedReplyError("DLOCK.WATCH: expected [token, owner, pttl]");
  }
  const term = toBigInt(reply[0], "DLOCK.WATCH token");
  if (term === 0n || reply[1] === null) return null;
  const owner = toText(reply[1], "DLOCK.WATCH owner");
  return { owner, identity: identityOf(owner), term, pttl: toNumber(reply[2], "DLOCK.WATCH pttl") };
}
