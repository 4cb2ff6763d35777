package dlock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// A stalled server (CLIENT PAUSE longer than every wait) holds no caller
// past its bound (R4.6), the clean-ups run in the background (R4.7), and
// once it answers again no waiter and no hold of an owner the caller never
// got remains (R4.4, R5.3). One pause of a server of the test's own (a
// pause would stall every other test on a shared one) for every case.
func TestStalledServer(t *testing.T) {
	const pause = 4 * time.Second
	eachServer(t, func(t *testing.T, s0 *server) {
		s, err := startServer(s0.name, s0.bin)
		if err != nil {
			t.Fatal(err)
		}
		defer s.stop()
		bg := context.Background()
		admin := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, ReadTimeout: 10 * time.Second})
		defer admin.Close()
		// The shared connections of c time out after 1 s, as a user's may.
		rdb := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: time.Second})
		defer rdb.Close()
		c := dlock.New(rdb)
		defer c.Close()

		held, err := c.TryAcquire(bg, "held")
		if err != nil {
			t.Fatal(err)
		}
		short, err := c.TryAcquire(bg, "short", dlock.TTL(1500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		// Warm the waiter pool: the waits below find their dedicated
		// connections open, as in a long-running program (a new
		// connection's handshake would end with ctx by itself).
		var warm sync.WaitGroup
		for i := 0; i < 3; i++ {
			warm.Add(1)
			go func() {
				defer warm.Done()
				ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
				defer cancel()
				_, _ = c.Acquire(ctx, "held")
			}()
		}
		warm.Wait()
		eventually(t, 5*time.Second, "no waiter", func() bool { return waiting(t, admin, "held") == 0 })

		if err := admin.Do(bg, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		paused := time.Now()
		type outcome struct {
			err  error
			took time.Duration
		}
		run := func(f func() error) <-chan outcome {
			ch := make(chan outcome, 1)
			go func() {
				began := time.Now()
				err := f()
				ch <- outcome{err, time.Since(began)}
			}()
			return ch
		}
		// A wait with a 1 s deadline on a free key: the postponed ACQUIRE
		// would be granted after the resume to an owner never returned.
		// Bound: the wait plus the margin of R4.2 (2 s).
		deadline := run(func() error {
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			_, err := c.Acquire(ctx, "free")
			return err
		})
		// A wait without a deadline, cancelled after 500 ms: bound by the
		// cancel plus the margin.
		cctx, cancelWait := context.WithCancel(bg)
		cancelled := run(func() error { _, err := c.Acquire(cctx, "held"); return err })
		time.AfterFunc(500*time.Millisecond, cancelWait)
		// A try on the shared connection: bound by its read timeout (1 s)
		// plus slack; its owner's possible hold is released later (R5.3).
		try := run(func() error { _, err := c.TryAcquire(bg, "tried"); return err })
		// A renewal by hand: bound by the guard's local deadline (1.5 s).
		renew := run(func() error { return short.Renew(bg) })

		check := func(name string, ch <-chan outcome, bound time.Duration, want func(error) bool) {
			o := <-ch
			if o.took > bound {
				t.Errorf("%s returned after %v, want within %v", name, o.took, bound)
			}
			if !want(o.err) {
				t.Errorf("%s: unexpected error %v", name, o.err)
			}
		}
		check("Acquire with a 1 s deadline", deadline, 3*time.Second, func(err error) bool {
			return errors.Is(err, dlock.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded)
		})
		check("a cancelled Acquire", cancelled, 2500*time.Millisecond, func(err error) bool {
			return errors.Is(err, context.Canceled)
		})
		check("TryAcquire", try, 2500*time.Millisecond, func(err error) bool {
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout()
		})
		// R4.6: lost once the local deadline has passed, or earlier the
		// shared connection's read timeout (1 s), which comes first when
		// the watchdog renewed short (at ttl/3) before the pause began.
		check("Renew", renew, 1500*time.Millisecond+500*time.Millisecond, func(err error) bool {
			var ne net.Error
			return errors.Is(err, dlock.ErrLockLost) || (errors.As(err, &ne) && ne.Timeout())
		})
		eventually(t, 2*time.Second, "the guard whose renewal went unanswered is lost", func() bool {
			return errors.Is(short.Err(), dlock.ErrLockLost)
		})
		if time.Since(paused) >= pause {
			t.Fatalf("the calls outlasted the pause (%v): nothing was tested", time.Since(paused))
		}

		// After the resume: no hold and no waiter of the ended calls.
		if err := admin.Ping(bg).Err(); err != nil { // answered once the pause ends
			t.Fatal(err)
		}
		for _, k := range []string{"free", "tried"} {
			eventually(t, 5*time.Second, k+" free", func() bool { return info(t, admin, k) == nil })
		}
		eventually(t, 5*time.Second, "nobody waits for held", func() bool { return waiting(t, admin, "held") == 0 })
		if holders(t, admin, "held") != 1 || held.Err() != nil {
			t.Fatalf("the held guard: %v %v", info(t, admin, "held"), held.Err())
		}
		// The next calls are not delayed by the clean-ups.
		began := time.Now()
		if err := held.Renew(bg); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		next, err := c.Acquire(ctx, "next")
		if err != nil {
			t.Fatal(err)
		}
		if err := next.Release(bg); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("the next calls took %v", took)
		}
		_ = held.Release(bg)
	})
}
