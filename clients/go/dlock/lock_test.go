package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

func newClient(t *testing.T, s *server, opts ...dlock.Option) (*dlock.Client, *redis.Client) {
	rdb := s.client(t)
	c := dlock.New(rdb, opts...)
	t.Cleanup(func() { c.Close() })
	return c, rdb
}

func TestTryAcquireRelease(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		l, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= 0 || l.Holds() != 1 || l.Key() != k || len(l.Owner()) != 36 {
			t.Fatalf("grant: token %d holds %d key %q owner %q", l.Token(), l.Holds(), l.Key(), l.Owner())
		}
		if _, err := c.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
		}
		if l.Err() != nil {
			t.Fatalf("Err while held: %v", l.Err())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("second Release: %v, want nil (idempotent)", err)
		}
		<-l.Done()
		if !errors.Is(context.Cause(l.Context()), dlock.ErrReleased) || !errors.Is(l.Err(), dlock.ErrReleased) {
			t.Fatalf("cause after release: %v", context.Cause(l.Context()))
		}
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatal("key left after release")
		}
		l2, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Token() <= l.Token() {
			t.Fatalf("token did not grow: %d then %d", l.Token(), l2.Token())
		}
		l2.Release(ctx)
	})
}

func TestOptions(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		a, err := c.TryAcquire(ctx, k, dlock.Owner("me"), dlock.TTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.TryAcquire(ctx, k, dlock.Owner("me"))
		if err != nil {
			t.Fatal(err)
		}
		if b.Holds() != 2 || b.Token() != a.Token() || a.Owner() != "me" {
			t.Fatalf("re-entry: holds %d token %d/%d", b.Holds(), a.Token(), b.Token())
		}
		if pttl := info(t, rdb, k)["pttl"].(int64); pttl > 30000 || pttl < 1000 {
			t.Fatalf("pttl %d", pttl)
		}
		b.Release(ctx)
		a.Release(ctx)
		// shared holds coexist; a limit bounds them
		r1, err := c.TryAcquire(ctx, k, dlock.Limit(2))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := c.TryAcquire(ctx, k, dlock.Limit(2))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, k, dlock.Limit(2)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("third permit: %v", err)
		}
		if _, err := c.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("writer beside readers: %v", err)
		}
		r1.Release(ctx)
		r2.Release(ctx)
		// FAIR keeps a reservation for a poller
		h, _ := c.TryAcquire(ctx, k)
		if _, err := c.TryAcquire(ctx, k, dlock.Fair(), dlock.Owner("poller")); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		h.Release(ctx)
		if _, err := c.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("barged past a reservation: %v", err)
		}
		p, err := c.TryAcquire(ctx, k, dlock.Fair(), dlock.Owner("poller"))
		if err != nil {
			t.Fatal(err)
		}
		p.Release(ctx)
		// SESSION: the hold ends with its connection
		sl, err := c.TryAcquire(ctx, k, dlock.Session())
		if err != nil {
			t.Fatal(err)
		}
		if holders(t, rdb, k) != 1 {
			t.Fatal("session hold missing")
		}
		sl.Release(ctx)
		if holders(t, rdb, k) != 0 {
			t.Fatal("session hold left")
		}
		// a release answered NOTOWNER: an error, and the lock counts as lost
		gone, _ := c.TryAcquire(ctx, k)
		rdb.Del(ctx, k)
		if err := gone.Release(ctx); !errors.Is(err, dlock.ErrNotOwner) {
			t.Fatalf("release after DEL: %v", err)
		}
		if !errors.Is(gone.Err(), dlock.ErrLockLost) {
			t.Fatalf("state after a NOTOWNER release: %v", gone.Err())
		}
		// WRONGTYPE maps onto ErrWrongType
		rdb.Set(ctx, k+":str", "x", 0)
		if _, err := c.TryAcquire(ctx, k+":str"); !errors.Is(err, dlock.ErrWrongType) {
			t.Fatalf("WRONGTYPE: %v", err)
		}
	})
}

// A fair poller without an Owner keeps its place (R8): the owner of a
// refused fair try is asked under again by the next fair try of the key,
// so the reservation it left is its own; a granted owner is never reused.
func TestFairPollerKeepsItsPlace(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, _ := newClient(t, s)
		other, _ := newClient(t, s)
		k := key(t, "k")
		h, err := other.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := c.TryAcquire(ctx, k, dlock.Fair()); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("try %d while held: %v", i, err)
			}
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryAcquire(ctx, k); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("barged past the poller's reservation: %v", err)
		}
		p, err := c.TryAcquire(ctx, k, dlock.Fair())
		if err != nil {
			t.Fatalf("the poller lost its place: %v", err)
		}
		granted := p.Owner()
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p2, err := c.TryAcquire(ctx, k, dlock.Fair())
		if err != nil {
			t.Fatal(err)
		}
		defer p2.Release(ctx)
		if p2.Owner() == granted {
			t.Fatalf("a granted owner was reused: %s", granted)
		}
	})
}

func TestAcquireWaitsForHandOff(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		a, _ := c.TryAcquire(ctx, k)
		got := make(chan *dlock.Lock, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := c.Acquire(wctx, k)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k) == 1 })
		a.Release(ctx)
		b := <-got
		if b == nil || b.Token() <= a.Token() {
			t.Fatal("no hand-off")
		}
		b.Release(ctx)
	})
}

func TestAcquireDeadlinePasses(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		a, _ := c.TryAcquire(ctx, k)
		defer a.Release(ctx)
		wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		defer cancel()
		_, err := c.Acquire(wctx, k)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want ErrNotAcquired and DeadlineExceeded", err)
		}
		if waiting(t, rdb, k) != 0 {
			t.Fatal("a waiter left")
		}
	})
}

// A wait longer than go-redis's ReadTimeout succeeds: it runs on a
// dedicated connection whose read deadline is the wait plus a margin, and
// is sent once.
func TestWaitLongerThanReadTimeout(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		rdb := redis.NewClient(&redis.Options{Addr: s.addr, ReadTimeout: 100 * time.Millisecond})
		defer rdb.Close()
		c := dlock.New(rdb)
		defer c.Close()
		k := key(t, "k")
		a, _ := c.TryAcquire(ctx, k)
		time.AfterFunc(600*time.Millisecond, func() { a.Release(context.Background()) })
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, err := c.Acquire(wctx, k)
		if err != nil {
			t.Fatalf("wait beyond ReadTimeout: %v", err)
		}
		if b.Holds() != 1 || holders(t, rdb, k) != 1 {
			t.Fatal("more than one hold")
		}
		b.Release(ctx)
	})
}

func TestDoneContextFailsEvenWhenFree(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		c, rdb := newClient(t, s)
		k := key(t, "k")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := c.Acquire(ctx, k); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire: %v", err)
		}
		if _, err := c.TryAcquire(ctx, k); !errors.Is(err, context.Canceled) {
			t.Fatalf("TryAcquire: %v", err)
		}
		if rdb.Exists(context.Background(), k).Val() != 0 {
			t.Fatal("a done context took the lock")
		}
	})
}

func TestCancelUnblocksTheWait(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		bg := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		a, _ := c.TryAcquire(bg, k)
		defer a.Release(bg)
		ctx, cancel := context.WithCancel(bg)
		errc := make(chan error, 1)
		go func() { _, err := c.Acquire(ctx, k); errc <- err }() // BLOCK 0
		eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k) == 1 })
		cancel()
		err := <-errc
		if !errors.Is(err, ctx.Err()) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		if waiting(t, rdb, k) != 0 {
			t.Fatal("the cancelled waiter stayed in the queue")
		}
	})
}

// A release that hands the lock to a waiter at the moment its wait is
// cancelled, 50 times: either the waiter gets the lock, or its error says
// cancelled, and neither a waiter nor a hold is left behind (R4.4).
func TestCancelRacingAGrant(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		bg := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		for i := 0; i < 50; i++ {
			a, err := c.TryAcquire(bg, k)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(bg)
			type result struct {
				l   *dlock.Lock
				err error
			}
			res := make(chan result, 1)
			go func() { l, err := c.Acquire(ctx, k); res <- result{l, err} }()
			eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k) == 1 })
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); a.Release(bg) }()
			go func() { defer wg.Done(); cancel() }()
			wg.Wait()
			r := <-res
			if r.err == nil {
				r.l.Release(bg)
			} else if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("round %d: %v", i, r.err)
			}
			eventually(t, 5*time.Second, "the lock free", func() bool { return holders(t, rdb, k) == 0 && waiting(t, rdb, k) == 0 })
		}
	})
}

// The other cancellation path: a release that hands the lock over at the
// moment the waiter's context deadline passes, 50 times (the release is
// aimed a little before or after the deadline): the waiter gets the lock
// or a deadline error, and neither a waiter nor a hold is left behind.
func TestDeadlineRacingAGrant(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		bg := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		granted := 0
		for i := 0; i < 50; i++ {
			a, err := c.TryAcquire(bg, k)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(40 * time.Millisecond)
			ctx, cancel := context.WithDeadline(bg, deadline)
			offset := time.Duration(i%5-2) * time.Millisecond // -2 .. +2 ms
			release := time.AfterFunc(time.Until(deadline)+offset, func() { a.Release(bg) })
			l, err := c.Acquire(ctx, k)
			cancel()
			if err == nil {
				granted++
				l.Release(bg)
			} else if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("round %d: %v", i, err)
			}
			if release.Stop() {
				a.Release(bg) // the acquire ended before the release was due
			}
			eventually(t, 5*time.Second, "the lock free", func() bool { return holders(t, rdb, k) == 0 && waiting(t, rdb, k) == 0 })
		}
		t.Logf("granted in %d of 50 rounds", granted)
	})
}

func TestWatchdogKeepsAShortLease(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		l, err := c.TryAcquire(ctx, k, dlock.TTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Fatalf("lost: %v", l.Err())
		case <-time.After(1200 * time.Millisecond): // four leases
		}
		m := info(t, rdb, k)
		if m == nil || m["token"].(int64) != l.Token() {
			t.Fatalf("not held after four leases: %v", m)
		}
		l.Release(ctx)
	})
}

func TestManyLocksRenewed(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		var locks []*dlock.Lock
		for i := 0; i < 200; i++ {
			l, err := c.TryAcquire(ctx, key(t, string(rune('a'+i%26)))+":"+time.Duration(i).String(), dlock.TTL(400*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
		}
		time.Sleep(1200 * time.Millisecond) // three leases: the scenario, not a synchronisation
		for _, l := range locks {
			if l.Err() != nil {
				t.Fatalf("lost: %v", l.Err())
			}
			if holders(t, rdb, l.Key()) != 1 {
				t.Fatal("lease ended")
			}
			l.Release(ctx)
		}
	})
}

func TestLostOnDelete(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		var lostCalls atomic.Int32
		c, rdb := newClient(t, s, dlock.WithOnLost(func(*dlock.Lock) { lostCalls.Add(1) }))
		k := key(t, "k")
		l, _ := c.TryAcquire(ctx, k, dlock.TTL(300*time.Millisecond))
		rdb.Del(ctx, k)
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("not lost")
		}
		if !errors.Is(context.Cause(l.Context()), dlock.ErrLockLost) {
			t.Fatalf("cause %v", context.Cause(l.Context()))
		}
		eventually(t, time.Second, "the lost callback", func() bool { return lostCalls.Load() == 1 })
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release of a lost lock: %v", err)
		}
	})
}

// Writes paused on the server: no renewal succeeds, and the lock counts as
// lost before its lease could end there.
func TestLostBeforeTheLeaseWhenRenewalsStall(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		lease := 400 * time.Millisecond
		before := time.Now()
		l, err := c.TryAcquire(ctx, k, dlock.TTL(lease))
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.Do(ctx, "CLIENT", "PAUSE", 1500, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		defer rdb.Do(ctx, "CLIENT", "UNPAUSE")
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("not lost")
		}
		lostAt := time.Now()
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Fatal(l.Err())
		}
		// Renewals sent at least every lease/3 succeed until the pause; the
		// last one was sent before the pause began, so the server's lease
		// ends no earlier than before+lease; the client must not be later
		// than the last renewal's send + lease.
		if lostAt.Sub(before) > 2*lease {
			t.Fatalf("lost %v after the grant, lease %v", lostAt.Sub(before), lease)
		}
		rdb.Do(ctx, "CLIENT", "UNPAUSE")
		l.Release(ctx)
	})
}

func TestKilledServerLosesTheLockWithinTheLease(t *testing.T) {
	eachServer(t, func(t *testing.T, s0 *server) {
		s, err := startServer(s0.name, s0.bin)
		if err != nil {
			t.Fatal(err)
		}
		defer s.stop()
		ctx := context.Background()
		rdb := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 200 * time.Millisecond})
		defer rdb.Close()
		c := dlock.New(rdb)
		defer c.Close()
		lease := time.Second
		sent := time.Now()
		l, err := c.TryAcquire(ctx, key(t, "k"), dlock.TTL(lease))
		if err != nil {
			t.Fatal(err)
		}
		s.cmd.Process.Kill()
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("not lost")
		}
		if !errors.Is(l.Err(), dlock.ErrLockLost) {
			t.Fatal(l.Err())
		}
		// The server's lease ends no earlier than sent+lease; the client's
		// deadline is 15 ms before that (100 ms of slack for scheduling).
		if elapsed := time.Since(sent); elapsed > lease+100*time.Millisecond {
			t.Fatalf("lost %v after the send, after the lease of %v", elapsed, lease)
		}
	})
}

// Replicas(n) with fewer replicas: the grant is released and the error
// says so.
func TestReplicasNotConfirmed(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		_, err := c.TryAcquire(ctx, k, dlock.Replicas(1, 50*time.Millisecond))
		if !errors.Is(err, dlock.ErrNotReplicated) {
			t.Fatalf("err %v, want ErrNotReplicated", err)
		}
		if holders(t, rdb, k) != 0 {
			t.Fatal("an unreplicated grant was kept")
		}
		l, err := c.TryAcquire(ctx, k, dlock.Replicas(0, 50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	})
}

func TestDoCancelsOnLoss(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		c, rdb := newClient(t, s)
		k := key(t, "k")
		err := c.Do(ctx, k, func(ctx context.Context) error {
			rdb.Del(context.Background(), k)
			<-ctx.Done()
			return context.Cause(ctx)
		}, dlock.TTL(300*time.Millisecond))
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("Do: %v", err)
		}
		ran := false
		if err := c.Do(ctx, k, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
			t.Fatal(err)
		}
		if rdb.Exists(ctx, k).Val() != 0 {
			t.Fatal("Do did not release")
		}
	})
}

// 16 goroutines take one lock in turn: never two inside, tokens increase.
func TestMutualExclusionWithFencing(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		c, _ := newClient(t, s)
		k := key(t, "k")
		var inside atomic.Int32
		var mu sync.Mutex
		var last int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					err := c.Do(ctx, k, func(ctx context.Context) error {
						if inside.Add(1) != 1 {
							t.Error("two holders at once")
						}
						mu.Lock()
						if l := last; l >= 0 {
							last = l + 1
						}
						mu.Unlock()
						inside.Add(-1)
						return nil
					})
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if last != 160 {
			t.Fatalf("%d critical sections, want 160", last)
		}
	})
}

// dropProxy forwards connections to a server and, while armed, drops the
// connection after forwarding a command that contains marker, before the
// reply reaches the client. It counts the markers it forwarded.
type dropProxy struct {
	ln      net.Listener
	target  string
	marker  []byte
	armed   atomic.Bool
	seen    atomic.Int32
	dropped atomic.Int32
}

func newDropProxy(t *testing.T, target, marker string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, target: target, marker: []byte(marker)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(cn)
		}
	}()
	return p
}

func (p *dropProxy) serve(cn net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		cn.Close()
		return
	}
	var drop atomic.Bool
	go func() { // replies
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 && !drop.Load() {
				if _, werr := cn.Write(buf[:n]); werr != nil {
					break
				}
			}
			if drop.Load() {
				cn.Close()
				up.Close()
				return
			}
			if err != nil {
				break
			}
		}
		cn.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := cn.Read(buf)
		if n > 0 {
			if bytes.Contains(buf[:n], p.marker) {
				p.seen.Add(1)
				if p.armed.CompareAndSwap(true, false) {
					drop.Store(true)
					p.dropped.Add(1)
				}
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = err
			}
			break
		}
	}
	up.Close()
}

// A connection dropped between an ACQUIRE's send and its reply: go-redis
// must not send it again (a second hold of the same owner), and the client
// releases what the lost reply granted.
func TestNoRetryWhenTheReplyIsLost(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		p := newDropProxy(t, s.addr, "DLOCK.ACQUIRE")
		rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: 5})
		defer rdb.Close()
		direct := s.client(t)
		c := dlock.New(rdb)
		defer c.Close()
		k := key(t, "k")
		p.armed.Store(true)
		_, err := c.TryAcquire(ctx, k)
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire through a dropped reply: %v", err)
		}
		if p.seen.Load() != 1 || p.dropped.Load() != 1 {
			t.Fatalf("ACQUIRE forwarded %d times", p.seen.Load())
		}
		eventually(t, 5*time.Second, "no hold left", func() bool { return holders(t, direct, k) == 0 })
		// the same with a waiting acquire on its dedicated connection
		a, _ := c.TryAcquire(ctx, k)
		if a == nil {
			t.Fatal("not acquired after the drop")
		}
		before := p.seen.Load()
		p.armed.Store(true)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		time.AfterFunc(200*time.Millisecond, func() { a.Release(context.Background()) })
		_, err = c.Acquire(wctx, k)
		if err == nil {
			t.Fatal("Acquire through a dropped connection succeeded")
		}
		if got := p.seen.Load() - before; got != 1 {
			t.Fatalf("blocking ACQUIRE forwarded %d times", got)
		}
		eventually(t, 5*time.Second, "no hold left", func() bool { return holders(t, direct, k) == 0 && waiting(t, direct, k) == 0 })
	})
}

// Errors name the key once and say "dlock:" once; an I/O error of a wait
// (the server stopped) names its key and still matches with errors.Is.
func TestWaitErrorsNameTheKey(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		ctx := context.Background()
		own, err := startServer(s.name, s.bin)
		if err != nil {
			t.Fatal(err)
		}
		defer own.stop()
		rdb := redis.NewClient(&redis.Options{Addr: own.addr})
		defer rdb.Close()
		c := dlock.New(rdb)
		defer c.Close()
		k := key(t, "k")
		if _, err := c.TryAcquire(ctx, k); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = c.Acquire(dctx, k)
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a wait past its deadline: %v", err)
		}
		if msg := err.Error(); strings.Count(msg, "dlock:") != 1 || strings.Count(msg, strconv.Quote(k)) != 1 {
			t.Fatalf("the message repeats itself or misses the key: %s", msg)
		}
		done := make(chan error, 1)
		go func() {
			_, err := c.Acquire(ctx, k)
			done <- err
		}()
		eventually(t, 5*time.Second, "a waiter", func() bool { return waiting(t, rdb, k) == 1 })
		own.stop()
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the wait outlived its server")
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("not the connection's error: %v", err)
		}
		if !strings.Contains(err.Error(), strconv.Quote(k)) {
			t.Fatalf("the error does not name the key: %v", err)
		}
	})
}
