/**
 * The errors dlock rejects with. Every one extends {@link DlockError}.
 *
 * @module
 */

/** Base class of every dlock error. */
export class DlockError extends Error {
  override name = "DlockError";
  /** The server's error code (`NOTOWNER`, `ERR`, `MOVED`, ...), when the server sent one. */
  readonly code: string | undefined;
  constructor(message: string, code?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** The lock was not granted (at once, or within the wait). */
export class LockBusyError extends DlockError {
  override name = "LockBusyError";
  constructor(readonly keys: readonly string[]) {
    super(`lock busy: ${keys.join(", ")}`);
  }
}

/**
 * A lease was lost: a renewal was refused, or no renewal succeeded before
 * the local deadline. The `reason` of the lease's signal.
 */
export class LockLostError extends DlockError {
  override name = "LockLostError";
  constructor(
    readonly keys: readonly string[],
    readonly why: string,
    options?: { cause?: unknown },
  ) {
    super(`lock lost (${keys.join(", ")}): ${why}`, undefined, options);
  }
}

/** `NOTOWNER` from the server: the hold is gone (expired, deleted, taken over). */
export class NotOwnerError extends DlockError {
  override name = "NotOwnerError";
}

/** `DEADLOCK`: another owner already waits to upgrade its shared hold. */
export class DeadlockError extends DlockError {
  override name = "DeadlockError";
}

/** Any other error reply of the server (`ERR`, `WRONGTYPE`, `CROSSSLOT`, `NOPERM`, ...). */
export class ServerError extends DlockError {
  override name = "ServerError";
}

/** No reply within the time allowed (the wait plus the margin, or the response timeout). */
export class TimeoutError extends DlockError {
  override name = "TimeoutError";
}

/** Fewer replicas than asked confirmed a grant (`replicas` option); the grant was released. */
export class NotReplicatedError extends DlockError {
  override name = "NotReplicatedError";
  constructor(
    readonly wanted: number,
    readonly acked: number,
  ) {
    super(`only ${acked} of ${wanted} replicas confirmed the grant`);
  }
}

/** A reply of a shape dlock never sends. */
export class UnexpectedReplyError extends DlockError {
  override name = "UnexpectedReplyError";
}

/** Maps an error thrown by a client library to a dlock error. */
export function fromReplyError(err: unknown): Error {
  if (err instanceof DlockError) return err;
  if (!(err instanceof Error)) return new DlockError(String(err));
  const message = err.message;
  const code = /^[A-Z][A-Z_-]*(?= |$)/.exec(message)?.[0];
  // Connection errors of the libraries carry no server code; keep them as they are.
  const isReply =
    err.name === "ReplyError" ||
    err.name === "ErrorReply" ||
    err.name === "SimpleError" ||
    err.name === "BlobError" ||
    (code !== undefined &&
      code !== "Connection" &&
      /^(ERR|NOTOWNER|DEADLOCK|WRONGTYPE|MOVED|ASK|CROSSSLOT|NOPERM|OOM|READONLY|LOADING|BUSY|UNBLOCKED|TRYAGAIN|CLUSTERDOWN|NOSCRIPT|MASTERDOWN|NOAUTH|WRONGPASS|EXECABORT|NOREPLICAS)$/.test(
        code,
      ));
  if (!isReply) return err;
  if (code === "NOTOWNER") return new NotOwnerError(message, code, { cause: err });
  if (code === "DEADLOCK") return new DeadlockError(message, code, { cause: err });
  return new ServerError(message, code, { cause: err });
}
