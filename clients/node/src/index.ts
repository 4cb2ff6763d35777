/**
 * dlock for Node.js: locks, read-write locks, semaphores, latches and
 * elections on the dlock Redis module, over node-redis or ioredis.
 *
 * @packageDocumentation
 */
export { Dlock, type AcquireOptions, type DlockOptions } from "./dlock.js";
export { Lease, LeaseReleasedError } from "./lease.js";
export {
  Election,
  Leadership,
  identityOf,
  type Leader,
  type CampaignOptions,
  type ObserveOptions,
} from "./election.js";
export { Semaphore, Latch, type LatchWait, type PermitOptions } from "./primitives.js";
export {
  DlockError,
  LockBusyError,
  LockLostError,
  NotOwnerError,
  DeadlockError,
  ServerError,
  TimeoutError,
  NotReplicatedError,
  UnexpectedReplyError,
} from "./errors.js";
export {
  ioredisTransport,
  nodeRedisTransport,
  type ClientLike,
  type IoRedisClient,
  type IoRedisCluster,
  type NodeRedisClient,
  type NodeRedisCluster,
} from "./adapters.js";
export type { Connection, NodeAddress, RedisArg, Reply, Transport } from "./transport.js";
export { slotOf } from "./slots.js";
export { toBigInt } from "./replies.js";
