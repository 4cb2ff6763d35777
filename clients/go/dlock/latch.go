package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Latch is a count-down latch (DLOCK.LATCH, COUNTDOWN, AWAIT): a count
// that only goes down, and waiters answered by the server the instant it
// reaches zero. It always has a ttl, so a coordinator that dies does not
// leave it for ever; waiters then learn that it vanished.
type Latch struct {
	c   *Client
	key string
}

// Latch returns the latch at key.
func (c *Client) Latch(key string) *Latch { return &Latch{c: c, key: key} }

// Init creates the latch with count and ttl; false when it exists already
// (left as it was). A count below 1 or a ttl below 1 ms fails with
// ErrInvalidArgument before anything is sent.
func (l *Latch) Init(ctx context.Context, count int64, ttl time.Duration) (bool, error) {
	if count < 1 || ttl < time.Millisecond {
		return false, fmt.Errorf("%w: a latch needs a count and a ttl of at least 1 (ms), not %d and %v", ErrInvalidArgument, count, ttl)
	}
	v, err := l.c.run(ctx, false, "DLOCK.LATCH", l.key, count, ms(ttl))
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// CountDown lowers the count by n and returns the count left (0 once
// open, or when the latch is missing). It is never retried. An n below 1
// fails with ErrInvalidArgument before anything is sent.
func (l *Latch) CountDown(ctx context.Context, n int64) (int64, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: count down by at least 1, not %d", ErrInvalidArgument, n)
	}
	v, err := l.c.run(ctx, false, "DLOCK.COUNTDOWN", l.key, n)
	if err != nil {
		return 0, err
	}
	left, _ := v.(int64)
	return left, nil
}

// Count returns the count left; ok is false when the latch does not exist
// (opened, expired, deleted or never created).
func (l *Latch) Count(ctx context.Context) (count int64, ok bool, err error) {
	v, err := l.c.run(ctx, true, "DLOCK.INFO", l.key)
	if err != nil || v == nil {
		return 0, false, err
	}
	switch m := v.(type) {
	case map[any]any:
		n, _ := m["count"].(int64)
		return n, true, nil
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if m[i] == "count" {
				n, _ := m[i+1].(int64)
				return n, true, nil
			}
		}
	}
	return 0, false, fmt.Errorf("dlock: unexpected reply %v", v)
}

// Await waits until the latch opens (nil, at once when it does not exist)
// or ctx is done (an error matching ctx.Err()). ErrLatchBroken when the
// latch vanished without opening. The wait runs on a dedicated connection
// and is ended with CLIENT UNBLOCK when ctx is cancelled.
func (l *Latch) Await(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	block, rctx, cancel, err := l.c.waitTimes(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	node, pool, err := l.c.nodeFor(ctx, l.key)
	if err != nil {
		return err
	}
	w, err := pool.get(ctx)
	if err != nil {
		return err
	}
	v, err, cancelled := w.blocking(ctx, rctx, node, pool, []any{"DLOCK.AWAIT", l.key, block}, nil)
	if cancelled {
		if n, ok := v.(int64); ok && n == 1 && err == nil {
			return nil // opened as the cancel came
		}
		return fmt.Errorf("dlock: await %q: %w", l.key, ctx.Err())
	}
	pool.put(w, err)
	if err != nil {
		return err
	}
	switch v {
	case int64(1):
		return nil
	case int64(0):
		return ErrLatchBroken
	case nil:
		return fmt.Errorf("dlock: await %q: %w", l.key, context.DeadlineExceeded)
	}
	return errors.New("dlock: unexpected AWAIT reply")
}
