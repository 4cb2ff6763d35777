// Package dlock is the Go client of dlock, a Redis module of distributed
// locks (DLOCK.* commands), on go-redis v9: one server, Sentinel
// (redis.NewFailoverClient) or Cluster.
//
// It gives Go services etcd's concurrency model on the Redis they run:
//
//   - a lock waits in the server's FIFO queue (no polling) for as long as
//     the context allows, and a cancelled context ends the wait on the
//     server (CLIENT UNBLOCK) and comes back as ctx.Err();
//   - every hold has a fencing token (Lock.Token) that grows with each new
//     hold: pass it to the resource you protect;
//   - one watchdog per Client renews every lease (every lease/3, pipelined)
//     and cancels a Lock's Context with cause ErrLockLost as soon as the
//     hold is gone or could be gone (a refused renewal, or no successful
//     renewal before the lease could end on the server);
//   - read-write locks (RWMutex), weighted semaphores shaped like
//     golang.org/x/sync/semaphore.Weighted, count-down latches, atomic
//     multi-key locks and leader election (Campaign, Leader, Observe,
//     Resign as in go.etcd.io/etcd/client/v3/concurrency).
//
// A minimal use:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	locks := dlock.New(rdb)
//	err := locks.Do(ctx, "orders:42", func(ctx context.Context) error {
//		return payOrder(ctx, 42) // ctx is cancelled if the lock is lost
//	})
//
// Commands that change state (DLOCK.ACQUIRE, FAIR, MACQUIRE, RELEASE,
// COUNTDOWN) are sent so that go-redis never retries them: a retry after a
// dropped connection could take a second hold. When such an acquire's
// reply is lost, the client releases the hold of its generated owner.
// Blocking waits run on connections of their own whose read deadline is
// the wait plus a margin, so go-redis's ReadTimeout can stay short. A
// stalled server holds no call past its bound: a wait ends by its ctx (at
// most a second later when the server answers nothing), Lock.Renew by the
// lock's local deadline, and the clean-up after a cancel or a timeout runs
// in the background.
//
// When a Lock's Context is done with ErrLockLost, stop: another client may
// hold the lock already, and its higher token makes the resource refuse
// this holder's writes.
package dlock
