package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
)

func TestRWMutex(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		rw := c.RWMutex(k)
		r1, err := rw.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if !r1.Shared() || holders(t, rdb, k) != 2 {
			t.Fatal("two readers do not share")
		}
		if _, err := rw.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("writer beside readers: %v", err)
		}
		wch := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := rw.Lock(wctx)
			wch <- err
		}()
		eventually(t, 5*time.Second, "a waiting writer", func() bool { return waiting(t, rdb, k) == 1 })
		if _, err := rw.TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("a reader overtook a waiting writer: %v", err)
		}
		rw.RUnlock(ctx)
		rw.RUnlock(ctx)
		if err := <-wch; err != nil {
			t.Fatal(err)
		}
		if m := info(t, rdb, k); m["shared"].(int64) != 0 || len(m["holders"].([]any)) != 1 {
			t.Fatalf("writer not alone: %v", m)
		}
		if err := rw.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if holders(t, rdb, k) != 0 {
			t.Fatal("left held")
		}
	})
}

func TestSemaphore(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		sem := c.Semaphore(k, 2)
		if err := sem.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if !sem.TryAcquire(1) {
			t.Fatal("second permit refused")
		}
		if sem.TryAcquire(1) {
			t.Fatal("third permit granted")
		}
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			done <- sem.Acquire(wctx, 1)
		}()
		eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k) == 1 })
		sem.Release(1)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// a done context fails even with free permits; a request above the
		// size is refused at once (R9.2), unlike semaphore.Weighted's wait
		sem.Release(1)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := sem.Acquire(cctx, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("done ctx: %v", err)
		}
		if err := sem.Acquire(ctx, 3); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("above the size: %v", err)
		}
		sem.Release(1)
		func() {
			defer func() {
				if recover() == nil {
					t.Error("Release of nothing did not panic")
				}
			}()
			sem.Release(1)
		}()
		if holders(t, rdb, k) != 0 {
			t.Fatal("permits left")
		}
	})
}

func TestWeightedSemaphore(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		if !supportsWeight(t, s) {
			t.Skip("the server's module has no WEIGHT (branch srv-weights)")
		}
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		sem := c.Semaphore(k, 4)
		if err := sem.Acquire(ctx, 3); err != nil {
			t.Fatal(err)
		}
		// a large head blocks smaller requests behind it (strict FIFO)
		big := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			big <- sem.Acquire(wctx, 2)
		}()
		eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k) == 1 })
		if sem.TryAcquire(1) {
			t.Fatal("a small request overtook the waiting large one")
		}
		sem.Release(3)
		if err := <-big; err != nil {
			t.Fatal(err)
		}
		if !sem.TryAcquire(2) || sem.TryAcquire(1) {
			t.Fatal("weights do not add up to the size")
		}
		sem.Release(2)
		sem.Release(2)
	})
}

func supportsWeight(t *testing.T, s *server) bool {
	rdb := s.client(t)
	err := rdb.Do(context.Background(), "DLOCK.ACQUIRE", t.Name()+":probe", "p", 1000, "SHARED", "LIMIT", 2, "WEIGHT", 1).Err()
	rdb.Del(context.Background(), t.Name()+":probe")
	return err == nil
}

func TestLatch(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		l := c.Latch(k)
		if ok, err := l.Init(ctx, 2, time.Minute); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, _ := l.Init(ctx, 5, time.Minute); ok {
			t.Fatal("created twice")
		}
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			done <- l.Await(wctx)
		}()
		eventually(t, 5*time.Second, "an awaiter", func() bool { return info(t, rdb, k)["waiting"] == int64(1) })
		if n, _ := l.CountDown(ctx, 1); n != 1 {
			t.Fatalf("left %d", n)
		}
		if n, ok, _ := l.Count(ctx); n != 1 || !ok {
			t.Fatalf("count %d", n)
		}
		if n, _ := l.CountDown(ctx, 1); n != 0 {
			t.Fatalf("left %d", n)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := l.Await(ctx); err != nil {
			t.Fatalf("an open latch: %v", err)
		}
		if _, ok, _ := l.Count(ctx); ok {
			t.Fatal("an open latch still exists")
		}
		// timeout, cancel and a latch that vanishes
		l.Init(ctx, 1, time.Minute)
		tctx, tcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer tcancel()
		if err := l.Await(tctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timeout: %v", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			eventually(t, 5*time.Second, "an awaiter", func() bool { return info(t, rdb, k)["waiting"] == int64(1) })
			cancel()
		}()
		if err := l.Await(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel: %v", err)
		}
		eventually(t, 5*time.Second, "no awaiter", func() bool { return info(t, rdb, k)["waiting"] == int64(0) })
		go func() {
			eventually(t, 5*time.Second, "an awaiter", func() bool { return info(t, rdb, k)["waiting"] == int64(1) })
			rdb.Del(ctx, k)
		}()
		if err := l.Await(ctx); !errors.Is(err, dlock.ErrLatchBroken) {
			t.Fatalf("vanished: %v", err)
		}
	})
}

func TestAcquireMulti(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k1, k2 := key(t, "{x}1"), key(t, "{x}2")
		one, _ := c.TryAcquire(ctx, k2)
		if _, err := c.TryAcquireMulti(ctx, []string{k1, k2}); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("multi over a held key: %v", err)
		}
		if rdb.Exists(ctx, k1).Val() != 0 {
			t.Fatal("a refused multi-lock left a key")
		}
		got := make(chan error, 1)
		var m *dlock.Lock
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var err error
			m, err = c.AcquireMulti(wctx, []string{k1, k2}, dlock.TTL(400*time.Millisecond))
			got <- err
		}()
		eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k2) == 1 })
		one.Release(ctx)
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if toks := m.Tokens(); len(toks) != 2 || toks[0] == toks[1] || m.Token() != toks[0] {
			t.Fatalf("tokens %v", toks)
		}
		time.Sleep(900 * time.Millisecond) // two leases: the watchdog renews both keys
		if m.Err() != nil || holders(t, rdb, k1) != 1 || holders(t, rdb, k2) != 1 {
			t.Fatal("a key's lease ended")
		}
		if err := m.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if holders(t, rdb, k1)+holders(t, rdb, k2) != 0 {
			t.Fatal("multi-lock left a hold")
		}
	})
}

func TestElection(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		if !s.hasCommand("DLOCK.WATCH") {
			t.Skip("the server's module has no DLOCK.WATCH (branch srv-watch)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, _ := newClient(t, s)
		k := key(t, "k")
		e1, e2 := c.Election(k), c.Election(k)
		if ld, err := e1.Leader(ctx); err != nil || ld.Term != 0 {
			t.Fatalf("leader of nobody: %v %v", ld, err)
		}
		octx, ocancel := context.WithCancel(ctx)
		defer ocancel()
		obs := c.Election(k).Observe(octx)
		if ld := <-obs; ld.Term != 0 {
			t.Fatalf("first observation %v", ld)
		}
		l1, err := e1.Campaign(ctx, "host-1#a")
		if err != nil {
			t.Fatal(err)
		}
		if ld := <-obs; ld.Value != "host-1#a" || ld.Term != l1.Token() {
			t.Fatalf("observed %+v", ld)
		}
		if ld, _ := e2.Leader(ctx); ld.Value != "host-1#a" || ld.Term != l1.Token() {
			t.Fatalf("leader %+v", ld)
		}
		second := make(chan *dlock.Lock, 1)
		go func() {
			l, err := e2.Campaign(ctx, "host-2")
			if err != nil {
				t.Error(err)
			}
			second <- l
		}()
		if err := e1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		l2 := <-second
		if l2 == nil || l2.Token() <= l1.Token() {
			t.Fatal("no new term")
		}
		var ld dlock.Leader
		deadline := time.After(5 * time.Second)
		for ld.Term != l2.Token() {
			select {
			case ld = <-obs:
			case <-deadline:
				t.Fatalf("observer stuck at %+v", ld)
			}
		}
		if ld.Value != "host-2" {
			t.Fatalf("observed %+v", ld)
		}
		if err := e1.Resign(ctx); !errors.Is(err, dlock.ErrNotLeader) {
			t.Fatalf("resign twice: %v", err)
		}
		e2.Resign(ctx)
		ocancel()
		for range obs {
		}
	})
}

// Bad limits, weights and owners are refused before anything is sent
// (R9.2): no key is created, and errors.Is matches ErrInvalidArgument.
func TestBadArgumentsAreRefused(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		bad := map[string][]dlock.AcquireOption{
			"Limit(0)":             {dlock.Limit(0)},
			"Limit(-1)":            {dlock.Limit(-1)},
			"Weight(0)":            {dlock.Limit(3), dlock.Weight(0)},
			"Weight(-2)":           {dlock.Limit(3), dlock.Weight(-2)},
			"Weight above Limit":   {dlock.Limit(2), dlock.Weight(3)},
			"Weight without Limit": {dlock.Weight(2)},
			"Owner(*)":             {dlock.Owner("*")},
			"TTL(0)":               {dlock.TTL(0)},
			"TTL(-5s)":             {dlock.TTL(-5 * time.Second)},
		}
		for name, opts := range bad {
			if _, err := c.TryAcquire(ctx, k, opts...); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("TryAcquire with %s: %v", name, err)
			}
			if _, err := c.Acquire(ctx, k, opts...); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Acquire with %s: %v", name, err)
			}
		}
		for _, n := range []int64{0, -2} {
			if err := c.Semaphore(k, 3).Acquire(ctx, n); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("Semaphore(k, 3).Acquire(%d): %v", n, err)
			}
		}
		if err := c.Semaphore(k, 0).Acquire(ctx, 1); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("Semaphore(k, 0): %v", err)
		}
		if c.Semaphore(k, 0).TryAcquire(1) {
			t.Error("Semaphore(k, 0).TryAcquire(1) granted")
		}
		latch := c.Latch(k)
		for name, f := range map[string]func() error{
			"Latch.Init(0, 1 s)":  func() error { _, err := latch.Init(ctx, 0, time.Second); return err },
			"Latch.Init(-1, 1 s)": func() error { _, err := latch.Init(ctx, -1, time.Second); return err },
			"Latch.Init(1, 0)":    func() error { _, err := latch.Init(ctx, 1, 0); return err },
			"Latch.Init(1, -5 s)": func() error { _, err := latch.Init(ctx, 1, -5*time.Second); return err },
			"Latch.Init(1, 1 µs)": func() error { _, err := latch.Init(ctx, 1, time.Microsecond); return err },
			"Latch.CountDown(0)":  func() error { _, err := latch.CountDown(ctx, 0); return err },
			"Latch.CountDown(-2)": func() error { _, err := latch.CountDown(ctx, -2); return err },
		} {
			if err := f(); !errors.Is(err, dlock.ErrInvalidArgument) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("a bad call reached the server: exists=%d %v", n, err)
		}
	})
}
