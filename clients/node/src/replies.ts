/**
 * Reading dlock's replies exactly.
 *
 * @module
 */
import { UnexpectedReplyError } from "./errors.js";
import type { Reply } from "./transport.js";

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const DECIMAL = /^-?\d+$/;

/** An integer reply as an exact bigint (adapters deliver integers as decimal text). */
export function toBigInt(reply: unknown, what: string): bigint {
  if (typeof reply === "bigint") return reply;
  if (typeof reply === "string" && DECIMAL.test(reply)) return BigInt(reply);
  if (typeof reply === "number" && Number.isSafeInteger(reply)) return BigInt(reply);
  throw new UnexpectedReplyError(`${what}: expected an exact integer, got ${describe(reply)}`);
}

/**
 * An integer reply as its exact decimal text, checked but not yet a bigint
 * (a lease's token is made a bigint only when read: `BigInt()` of every
 * grant was a visible part of an acquire's cost).
 */
export function toIntegerText(reply: unknown, what: string): string {
  if (typeof reply === "string" && DECIMAL.test(reply)) return reply;
  return toBigInt(reply, what).toString();
}

/** An integer reply known to be small (hold counts, latch counts). */
export function toNumber(reply: unknown, what: string): number {
  // Up to 15 digits is always below 2^53: exact as a JS number, no bigint needed.
  if (typeof reply === "string" && reply.length <= 15 && DECIMAL.test(reply)) return Number(reply);
  const value = toBigInt(reply, what);
  if (value > MAX_SAFE || value < MIN_SAFE) {
    throw new UnexpectedReplyError(`${what}: ${value} is beyond a safe JS number`);
  }
  return Number(value);
}

/** A string reply (bulk or simple). */
export function toText(reply: unknown, what: string): string {
  if (typeof reply === "string") return reply;
  if (Buffer.isBuffer(reply)) return reply.toString();
  throw new UnexpectedReplyError(`${what}: expected a string, got ${describe(reply)}`);
}

/** A grant `[token, holds, owner]`. */
export interface Grant {
  token: bigint;
  holds: number;
  owner: string;
}

/** A grant with its token as checked decimal text. */
export interface GrantText {
  token: string;
  holds: number;
  owner: string;
}

/** Reads a grant reply, its token as decimal text. */
export function toGrantText(reply: Reply, what: string): GrantText {
  if (!Array.isArray(reply) || reply.length < 3) {
    throw new UnexpectedReplyError(
      `${what}: expected [token, holds, owner], got ${describe(reply)}`,
    );
  }
  return {
    token: toIntegerText(reply[0], `${what} token`),
    holds: toNumber(reply[1], `${what} holds`),
    owner: toText(reply[2], `${what} owner`),
  };
}

/** Reads a grant reply. */
export function toGrant(reply: Reply, what: string): Grant {
  const grant = toGrantText(reply, what);
  return { token: BigInt(grant.token), holds: grant.holds, owner: grant.owner };
}

function describe(reply: unknown): string {
  if (reply === null) return "null";
  if (Array.isArray(reply)) return `an array of ${reply.length}`;
  return `${typeof reply} ${String(reply).slice(0, 40)}`;
}
