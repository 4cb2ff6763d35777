package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Semaphore is a distributed weighted semaphore shaped like
// golang.org/x/sync/semaphore.Weighted: Acquire(ctx, n) waits for n of
// size permits, strictly first in, first out (a large request at the head
// is never overtaken by smaller ones: the server's queue); TryAcquire(n)
// fails while anyone waits; a request larger than the size never queues.
// Each Acquire is a hold of its own with a lease the watchdog renews, so
// a crashed holder's permits come back when its lease ends. Every user of
// one semaphore must pass the same size. A weight above 1 needs a server
// with WEIGHT.
type Semaphore struct {
	c    *Client
	key  string
	size int64
	opts []AcquireOption
	mu   sync.Mutex
	held map[int64][]*Lock
}

// Semaphore returns the semaphore of size permits at key.
func (c *Client) Semaphore(key string, size int64, opts ...AcquireOption) *Semaphore {
	return &Semaphore{c: c, key: key, size: size, opts: opts, held: map[int64][]*Lock{}}
}

func (s *Semaphore) options(n int64) []AcquireOption {
	return append(append([]AcquireOption(nil), s.opts...), Limit(s.size), Weight(n))
}

// Acquire waits for n permits until ctx is done; on failure it returns
// ctx's error and takes nothing. An already-done ctx fails even when
// permits are free, as with semaphore.Weighted; unlike it, a size or an n
// below 1, or n above the size, fails at once with ErrInvalidArgument
// (semaphore.Weighted would wait for ctx, or grant 0 permits).
func (s *Semaphore) Acquire(ctx context.Context, n int64) error {
	_, err := s.AcquirePermit(ctx, n)
	return err
}

// AcquirePermit is Acquire returning the hold (token, Context); give it
// back with its Release or with Semaphore.Release(n).
func (s *Semaphore) AcquirePermit(ctx context.Context, n int64) (*Lock, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	l, err := s.c.acquire(ctx, s.key, nil, true, s.options(n))
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, ctx.Err()
		}
		return nil, err
	}
	s.push(n, l)
	return l, nil
}

// TryAcquire takes n permits if they are free now and nobody waits, as
// semaphore.Weighted.TryAcquire. A server error counts as a failure.
func (s *Semaphore) TryAcquire(n int64) bool {
	_, err := s.TryAcquirePermit(context.Background(), n)
	return err == nil
}

// check refuses a size or a request out of range before anything is sent.
func (s *Semaphore) check(n int64) error {
	switch {
	case s.size < 1:
		return fmt.Errorf("%w: a semaphore's size must be at least 1, not %d", ErrInvalidArgument, s.size)
	case n < 1:
		return fmt.Errorf("%w: take at least 1 permit, not %d", ErrInvalidArgument, n)
	case n > s.size:
		return fmt.Errorf("%w: %d permits of a semaphore of %d", ErrInvalidArgument, n, s.size)
	}
	return nil
}

func (s *Semaphore) push(n int64, l *Lock) {
	s.mu.Lock()
	s.held[n] = append(s.held[n], l)
	s.mu.Unlock()
}

// TryAcquirePermit is TryAcquire returning the hold, or ErrNotAcquired.
func (s *Semaphore) TryAcquirePermit(ctx context.Context, n int64) (*Lock, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	l, err := s.c.acquire(ctx, s.key, nil, false, s.options(n))
	if err != nil {
		return nil, err
	}
	s.push(n, l)
	return l, nil
}

// Release gives back n permits taken by one Acquire(n) of this Semaphore.
// Like semaphore.Weighted, it panics when no such permits are held.
func (s *Semaphore) Release(n int64) {
	s.mu.Lock()
	stack := s.held[n]
	if len(stack) == 0 {
		s.mu.Unlock()
		panic("dlock: semaphore: released more than held")
	}
	l := stack[len(stack)-1]
	s.held[n] = stack[:len(stack)-1]
	s.mu.Unlock()
	_ = l.Release(context.Background())
}
