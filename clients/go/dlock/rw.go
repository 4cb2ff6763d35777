package dlock

import (
	"context"
	"sync"
)

// RWMutex is a distributed read-write lock shaped like sync.RWMutex: any
// number of readers or one writer, and readers that arrive after a waiting
// writer queue behind it (the server's FIFO queue), so writers are never
// starved. Each Lock or RLock takes a hold of its own (a new owner), so
// goroutines exclude each other as with sync.RWMutex. Lock, RLock and the
// Try forms return the hold for its token and Context; Unlock and RUnlock
// give back the most recent one.
type RWMutex struct {
	c       *Client
	key     string
	opts    []AcquireOption
	mu      sync.Mutex
	writers []*Lock
	readers []*Lock
}

// RWMutex returns the read-write lock at key; opts apply to every hold
// (TTL, Session, ...).
func (c *Client) RWMutex(key string, opts ...AcquireOption) *RWMutex {
	return &RWMutex{c: c, key: key, opts: opts}
}

// Lock waits for the write lock (exclusive) until ctx is done.
func (rw *RWMutex) Lock(ctx context.Context) (*Lock, error) {
	return rw.take(ctx, true, false)
}

// TryLock takes the write lock if it is free now.
func (rw *RWMutex) TryLock(ctx context.Context) (*Lock, error) {
	return rw.take(ctx, false, false)
}

// RLock waits for a read lock (shared) until ctx is done.
func (rw *RWMutex) RLock(ctx context.Context) (*Lock, error) {
	return rw.take(ctx, true, true)
}

// TryRLock takes a read lock if no writer holds or waits.
func (rw *RWMutex) TryRLock(ctx context.Context) (*Lock, error) {
	return rw.take(ctx, false, true)
}

func (rw *RWMutex) take(ctx context.Context, wait, shared bool) (*Lock, error) {
	opts := append(append([]AcquireOption(nil), rw.opts...), func(a *acquireConfig) {
		a.shared = shared
		a.limit = 0
	})
	l, err := rw.c.acquire(ctx, rw.key, nil, wait, opts)
	if err != nil {
		return nil, err
	}
	rw.mu.Lock()
	if shared {
		rw.readers = append(rw.readers, l)
	} else {
		rw.writers = append(rw.writers, l)
	}
	rw.mu.Unlock()
	return l, nil
}

// Unlock releases the most recent write lock taken through rw (no error
// when none is held, as a Release of a released Lock).
func (rw *RWMutex) Unlock(ctx context.Context) error {
	return rw.pop(ctx, &rw.writers)
}

// RUnlock releases the most recent read lock taken through rw.
func (rw *RWMutex) RUnlock(ctx context.Context) error {
	return rw.pop(ctx, &rw.readers)
}

func (rw *RWMutex) pop(ctx context.Context, stack *[]*Lock) error {
	rw.mu.Lock()
	n := len(*stack)
	if n == 0 {
		rw.mu.Unlock()
		return nil
	}
	l := (*stack)[n-1]
	*stack = (*stack)[:n-1]
	rw.mu.Unlock()
	return l.Release(ctx)
}
