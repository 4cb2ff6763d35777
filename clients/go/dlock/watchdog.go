package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// retryAfterFailure is how soon a renewal that failed for a transient
// reason (I/O, OOM, READONLY, LOADING) is tried again: 50 ms, at most
// lease/12 (R2.6).
const retryAfterFailure = 50 * time.Millisecond

func retryDelay(lease time.Duration) time.Duration {
	if d := lease / 12; d < retryAfterFailure {
		return d
	}
	return retryAfterFailure
}

type watchEntry struct {
	watched   bool
	inFlight  bool
	nextRenew time.Time
	deadline  time.Time
	period    time.Duration
	margin    time.Duration
}

// watchdog renews the leases of all of a client's locks from one
// goroutine. A renewal falls due every period; a round takes every lock
// due within half its period, so locks fall into step, and sends them as
// one pipeline (go-redis splits it per node in a Cluster). Each lock has
// at most one renewal in flight. A lock is lost when a renewal is refused
// or answered with another token, or when no renewal succeeded before
// sent + lease - margin, sent being when the last successful grant or
// renewal was sent.
type watchdog struct {
	c       *Client
	mu      sync.Mutex
	locks   map[*Lock]struct{}
	wake    chan struct{}
	quit    chan struct{}
	started bool
	stopped bool
	rounds  int64
	// sleepUntil is when the loop wakes next by itself: a new lock due
	// later needs no wake-up (a goroutine switch per acquire otherwise).
	sleepUntil time.Time
}

func newWatchdog(c *Client) *watchdog {
	return &watchdog{c: c, locks: map[*Lock]struct{}{}, wake: make(chan struct{}, 1), quit: make(chan struct{})}
}

func (w *watchdog) watch(l *Lock, anchor time.Time, renewNow bool) {
	period := w.c.period(l.lease)
	margin := w.c.margin(l.lease)
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		l.lost()
		return
	}
	l.wd = watchEntry{watched: true, period: period, margin: margin,
		nextRenew: anchor.Add(period), deadline: anchor.Add(l.lease - margin)}
	if renewNow {
		l.wd.nextRenew = time.Now()
	}
	w.locks[l] = struct{}{}
	if !w.started {
		w.started = true
		go w.loop()
	}
	wake := !l.wd.nextRenew.After(w.sleepUntil) || !l.wd.deadline.After(w.sleepUntil)
	w.mu.Unlock()
	if wake {
		w.poke()
	}
}

func (w *watchdog) unwatch(l *Lock) {
	w.mu.Lock()
	l.wd.watched = false
	delete(w.locks, l)
	w.mu.Unlock()
}

func (w *watchdog) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watchdog) stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	locks := w.locks
	w.locks = map[*Lock]struct{}{}
	w.mu.Unlock()
	close(w.quit)
	for l := range locks {
		l.lost()
	}
}

func (w *watchdog) loop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var due []*Lock
		var lost []*Lock
		next := now.Add(time.Hour)
		w.mu.Lock()
		for l := range w.locks {
			e := &l.wd
			if !now.Before(e.deadline) {
				lost = append(lost, l)
				delete(w.locks, l)
				e.watched = false
				continue
			}
			if !e.inFlight && !now.Before(e.nextRenew) {
				due = append(due, l)
			}
			if e.deadline.Before(next) {
				next = e.deadline
			}
			if !e.inFlight && e.nextRenew.Before(next) {
				next = e.nextRenew
			}
		}
		w.sleepUntil = next
		if len(due) > 0 {
			w.sleepUntil = now
			// Take along every lock due within half its period.
			for l := range w.locks {
				e := &l.wd
				if !e.inFlight && e.nextRenew.After(now) && e.nextRenew.Sub(now) <= e.period/2 {
					due = append(due, l)
				}
			}
			for _, l := range due {
				l.wd.inFlight = true
			}
			w.rounds++
		}
		w.mu.Unlock()
		for _, l := range lost {
			l.lost()
		}
		if len(due) > 0 {
			go w.round(due)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-w.quit:
			return
		case <-w.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}

// round sends one pipeline of RENEW for the due locks (renewals are
// idempotent: go-redis may retry them).
func (w *watchdog) round(due []*Lock) {
	type renewal struct {
		l    *Lock
		cmds []*redis.Cmd
	}
	sent := time.Now()
	// The round cannot outlive the soonest deadline among its locks.
	deadline := sent.Add(time.Hour)
	w.mu.Lock()
	for _, l := range due {
		if l.wd.deadline.Before(deadline) {
			deadline = l.wd.deadline
		}
	}
	w.mu.Unlock()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	pipe := w.c.rdb.Pipeline()
	rs := make([]renewal, len(due))
	for i, l := range due {
		rs[i].l = l
		for _, k := range l.keys {
			cmd := redis.NewCmd(ctx, "DLOCK.RENEW", k, l.owner, ms(l.lease))
			_ = pipe.Process(ctx, cmd)
			rs[i].cmds = append(rs[i].cmds, cmd)
		}
	}
	_, _ = pipe.Exec(ctx)
	var lost []*Lock
	w.mu.Lock()
	for _, r := range rs {
		l, e := r.l, &r.l.wd
		e.inFlight = false
		if !e.watched {
			continue
		}
		verdict := renewVerdict(l, r.cmds)
		switch verdict {
		case nil:
			e.deadline = sent.Add(l.lease - e.margin)
			e.nextRenew = sent.Add(e.period)
		case errRetry:
			e.nextRenew = time.Now().Add(retryDelay(l.lease))
		default:
			e.watched = false
			delete(w.locks, l)
			lost = append(lost, l)
		}
	}
	w.mu.Unlock()
	for _, l := range lost {
		l.lost()
	}
	w.poke()
}

var errRetry = errors.New("retry")

// renewVerdict: nil renewed, errRetry transient, another error lost.
func renewVerdict(l *Lock, cmds []*redis.Cmd) error {
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			return ErrLockLost
		}
		if err != nil {
			err = serverError(err)
			if transient(err) {
				return errRetry
			}
			return err
		}
		tok, ok := v.(int64)
		if !ok || tok != l.tokens[i] {
			return ErrLockLost
		}
	}
	return nil
}

// renewNow renews l at once (Lock.Renew). It ends by the lock's local
// deadline at the latest (R4.6), whatever the go-redis client's timeouts:
// once that deadline has passed without a reply the lock is lost.
func (w *watchdog) renewNow(ctx context.Context, l *Lock) error {
	w.mu.Lock()
	deadline, watched := l.wd.deadline, l.wd.watched
	w.mu.Unlock()
	if !watched {
		return ErrLockLost
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	cmds := make([]*redis.Cmd, len(l.keys))
	for i, k := range l.keys {
		cmds[i] = redis.NewCmd(rctx, "DLOCK.RENEW", k, l.owner, ms(l.lease))
	}
	done := make(chan struct{})
	go func() {
		// On a goroutine of its own: a stalled server's reply may never
		// come before go-redis's own read timeout.
		defer close(done)
		if len(cmds) == 1 {
			_ = w.c.rdb.Process(rctx, cmds[0])
			return
		}
		pipe := w.c.rdb.Pipeline()
		for _, cmd := range cmds {
			_ = pipe.Process(rctx, cmd)
		}
		_, _ = pipe.Exec(rctx)
	}()
	select {
	case <-done:
	case <-rctx.Done():
		if err := ctx.Err(); err != nil {
			return err // the caller's own cancel or deadline
		}
		w.unwatch(l)
		l.lost()
		return fmt.Errorf("%w: no reply to the renewal before the lease could end", ErrLockLost)
	}
	verdict := renewVerdict(l, cmds)
	switch verdict {
	case nil:
		w.mu.Lock()
		if l.wd.watched {
			l.wd.deadline = sent.Add(l.lease - l.wd.margin)
			l.wd.nextRenew = sent.Add(l.wd.period)
		}
		w.mu.Unlock()
		return nil
	case errRetry:
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				if ctx.Err() == nil && time.Now().After(deadline) {
					w.unwatch(l)
					l.lost()
					return fmt.Errorf("%w: %w", ErrLockLost, err)
				}
				return serverError(err)
			}
		}
		return verdict
	default:
		w.unwatch(l)
		l.lost()
		return fmt.Errorf("%w: %w", ErrLockLost, verdict)
	}
}
