package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lock is one hold of a lock (of every key, for a multi-lock). Its
// Context is cancelled when the hold is lost (cause ErrLockLost) or
// released (cause ErrReleased). While it is held, the client's watchdog
// renews its lease.
type Lock struct {
	c      *Client
	keys   []string
	owner  string
	shared bool
	lease  time.Duration
	tokens []int64
	holds  int64

	mu       sync.Mutex
	released bool
	ended    error                   // ErrLockLost or ErrReleased once the hold ended
	ctx      context.Context         // made by the first Context or Done
	cancel   context.CancelCauseFunc // cancels ctx with ended
	session  func()                  // gives back a SESSION hold's dedicated connection

	// watchdog state, guarded by the watchdog's mutex
	wd watchEntry

	// The request's own storage, in the Lock's one allocation (an
	// uncontended acquire + release allocates little): its options, its
	// key and token for a single key, its arguments, and the key and owner
	// boxed once for the acquire and the release.
	cfg              acquireConfig
	key1             [1]string
	token1           [1]int64
	args             [12]any
	relArgs          [4]any
	keyArg, ownerArg any
}

// Key returns the lock's key (the first key of a multi-lock).
func (l *Lock) Key() string { return l.keys[0] }

// Keys returns every key of the hold.
func (l *Lock) Keys() []string { return append([]string(nil), l.keys...) }

// Owner returns the owner the hold was granted to.
func (l *Lock) Owner() string { return l.owner }

// Token returns the fencing token (of the first key): pass it to the
// resource, which refuses tokens lower than the highest it has seen.
func (l *Lock) Token() int64 { return l.tokens[0] }

// Tokens returns one token per key, in the order of Keys.
func (l *Lock) Tokens() []int64 { return append([]int64(nil), l.tokens...) }

// Holds returns the owner's hold count after this grant (above 1 for a
// re-entry).
func (l *Lock) Holds() int64 { return l.holds }

// Shared reports whether the hold is shared (a read lock or a permit).
func (l *Lock) Shared() bool { return l.shared }

// Lease returns the lease the watchdog renews.
func (l *Lock) Lease() time.Duration { return l.lease }

// Context returns a context cancelled when the hold ends: with cause
// ErrLockLost when it is lost, ErrReleased when released. Run the work the
// lock protects under it.
func (l *Lock) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		// Made on demand: a lock nobody asks it of costs no context.
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		if l.ended != nil {
			l.cancel(l.ended)
		}
	}
	return l.ctx
}

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Err returns nil while the lock is held, then ErrLockLost or ErrReleased.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended
}

// end records the end of the hold once (cause ErrLockLost or ErrReleased)
// and cancels the Context; false when it had ended already.
func (l *Lock) end(cause error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended != nil {
		return false
	}
	l.ended = cause
	if l.cancel != nil {
		l.cancel(cause)
	}
	return true
}

// Renew resets the lease now (the watchdog does it by itself). A NOTOWNER
// reply marks the lock lost and matches ErrNotOwner and ErrLockLost.
func (l *Lock) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	return l.c.wd.renewNow(ctx, l)
}

// Release gives the hold back and cancels the Context (cause
// ErrReleased). It is idempotent: later calls return nil. A lock already
// lost is still released on the server (in case it kept the hold), without
// an error. A NOTOWNER reply for a lock not known lost returns an error
// matching ErrNotOwner and marks the lock lost (cause ErrLockLost).
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	session := l.session
	wasLost := l.ended != nil
	l.mu.Unlock()
	l.c.wd.unwatch(l)
	var err error
	if len(l.keys) == 1 {
		// The key and owner boxed by the acquire, in the Lock's array.
		args := append(l.relArgs[:0], "DLOCK.RELEASE", l.keyArg, l.ownerArg)
		if l.shared {
			args = append(args, "SHARED")
		}
		_, err = l.c.run(ctx, false, args...)
	} else {
		err = l.c.release(ctx, l.keys, l.owner, l.shared)
	}
	if session != nil {
		session()
	}
	if wasLost {
		return nil // the loss was reported already; the release was a courtesy
	}
	if errors.Is(err, ErrNotOwner) {
		// The hold was gone before the watchdog noticed: a loss (R3.5).
		l.lost()
		return err
	}
	l.end(ErrReleased)
	return err
}

// lost marks the lock lost once.
func (l *Lock) lost() {
	if !l.end(ErrLockLost) {
		return
	}
	if f := l.c.onLost; f != nil {
		go f(l)
	}
}
