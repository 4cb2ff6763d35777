package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// Keys of the workload: two exclusive locks (re-entry, FAIR, BLOCK,
// SESSION), a read-write lock and a weighted semaphore (LIMIT 3).
var (
	exclusiveKeys = []string{"x:0", "x:1"}
	rwKey         = "rw"
	semKey        = "sem"
	semLimit      = int64(3)
	allKeys       = []string{"x:0", "x:1", "rw", "sem"}
)

// Store is the fenced store outside Redis: per key, the highest token
// written; a write with a lower token is refused.
type Store struct {
	mu  sync.Mutex
	max map[string]int64
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{max: map[string]int64{}} }

// Write accepts token if no higher one was written to key.
func (s *Store) Write(key string, token int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.max[key] {
		return false
	}
	s.max[key] = token
	return true
}

// worker is one client of the workload: its own go-redis client (its own
// connections) and its own dlock.Client.
type worker struct {
	id    int
	rec   *Recorder
	store *Store
	rdb   *redis.Client
	dl    *dlock.Client
	rng   *rand.Rand
	seq   int
	// Tunables (ms).
	maxHold int
	// replicas: every acquire waits for one replica (WAIT 1, via the
	// client's Replicas option); a grant not confirmed is released by the
	// client and counts as an unknown outcome.
	replicas bool
}

func newWorker(id int, t target, seed int64, rec *Recorder, store *Store, replicas bool) *worker {
	rdb := t.newClient(false)
	// No background renewal: every renewal the server sees is one the
	// history records (the watchdog's one renewal right after a granted
	// wait only pushes the lease later, which the model allows).
	dl := dlock.New(rdb, dlock.WithLease(500*time.Millisecond), dlock.WithRenewEvery(time.Hour), dlock.WithWaitMargin(400*time.Millisecond))
	return &worker{id: id, rec: rec, store: store, rdb: rdb, dl: dl, rng: rand.New(rand.NewSource(seed)), maxHold: 150, replicas: replicas}
}

func (w *worker) close() {
	_ = w.dl.Close()
	_ = w.rdb.Close()
}

// classify turns an error into an outcome.
func classify(err error) Output {
	if errors.Is(err, dlock.ErrNotOwner) {
		return Output{Status: NotOwner}
	}
	var se *dlock.ServerError
	if errors.As(err, &se) {
		if se.Code == "NOTOWNER" {
			return Output{Status: NotOwner}
		}
		return Output{Status: ErrReply, Err: se.Message}
	}
	var re redis.Error
	if errors.As(err, &re) {
		if strings.HasPrefix(err.Error(), "NOTOWNER") {
			return Output{Status: NotOwner}
		}
		return Output{Status: ErrReply, Err: err.Error()}
	}
	return Output{Status: Unknown, Err: err.Error()}
}

type holdSpec struct {
	key            string
	owner          string
	ttl            time.Duration
	shared         bool
	limit, weight  int64
	fair, session  bool
	block          time.Duration // > 0: a blocking wait bounded by ctx
	cancelAfter    time.Duration // > 0: the wait is cancelled
	lock           *dlock.Lock
	token, holds   int64
	sessionRelease bool
}

func (h *holdSpec) input(kind Kind, client int) Input {
	in := Input{Kind: kind, Key: h.key, Owner: h.owner, Client: client, Shared: h.shared, TTL: h.ttl.Milliseconds()}
	if h.limit > 0 {
		in.Limit, in.Weight = h.limit, h.weight
	}
	return in
}

func (h *holdSpec) options() []dlock.AcquireOption {
	opts := []dlock.AcquireOption{dlock.Owner(h.owner), dlock.TTL(h.ttl)}
	if h.shared {
		opts = append(opts, dlock.Shared())
	}
	if h.limit > 0 {
		opts = append(opts, dlock.Limit(h.limit))
		if h.weight > 1 {
			opts = append(opts, dlock.Weight(h.weight))
		}
	}
	return opts
}

// acquire records one acquire; it returns the outcome.
func (w *worker) acquire(ctx context.Context, h *holdSpec, reentry bool) Output {
	in := h.input(Acquire, w.id)
	opts := h.options()
	if w.replicas {
		opts = append(opts, dlock.Replicas(1, 250*time.Millisecond))
	}
	if !reentry {
		in.Fair, in.Session, in.Block = h.fair, h.session, h.block > 0 || h.cancelAfter > 0
		if h.fair {
			opts = append(opts, dlock.Fair())
		}
		if h.session {
			opts = append(opts, dlock.Session())
		}
	}
	i := w.rec.Begin(in)
	var lock *dlock.Lock
	var err error
	switch {
	case !reentry && h.cancelAfter > 0:
		cctx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(h.cancelAfter, cancel)
		lock, err = w.dl.Acquire(cctx, h.key, opts...)
		t.Stop()
		cancel()
	case !reentry && h.block > 0:
		cctx, cancel := context.WithTimeout(ctx, h.block)
		lock, err = w.dl.Acquire(cctx, h.key, opts...)
		cancel()
	default:
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lock, err = w.dl.TryAcquire(cctx, h.key, opts...)
		cancel()
	}
	var out Output
	switch {
	case err == nil:
		out = Output{Status: Grant, Token: lock.Token(), Holds: lock.Holds()}
		if !reentry {
			h.lock = lock
			h.sessionRelease = h.session
		}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// A wait the client ended itself (its context), whatever the
		// wording: the server may have granted it meanwhile, so the
		// outcome is unknown. Checked before ErrNotAcquired, which such an
		// error also wraps.
		out = Output{Status: MaybeGranted, Err: err.Error()}
	case errors.Is(err, dlock.ErrNotAcquired):
		// The server's own null (busy, or the end of BLOCK): definite.
		out = Output{Status: Null}
	default:
		out = classify(err)
	}
	w.rec.End(i, out)
	if out.Status == MaybeGranted && h.cancelAfter > 0 && errors.Is(err, context.Canceled) {
		w.checkLeftover(h, w.rec.CallOf(i))
	}
	return out
}

// checkLeftover reads DLOCK.INFO after a cancelled wait: the owner must
// be neither queued nor holding. The client's clean-up (CLIENT UNBLOCK, the
// release of a grant that raced the cancel) runs in the background (R4.7),
// so the check looks again for up to leftoverPatience before it records
// what it saw last.
func (w *worker) checkLeftover(h *holdSpec, call int64) {
	deadline := time.Now().Add(leftoverPatience)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		v, err := w.rdb.Do(ctx, "DLOCK.INFO", h.key).Result()
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			return // server unavailable: no check
		}
		queue, holders := parseInfo(v)
		l := Leftover{Key: h.key, Owner: h.owner, Call: call, At: w.rec.Now()}
		for _, o := range queue {
			l.Queued = l.Queued || o == h.owner
		}
		for _, o := range holders {
			l.Holds = l.Holds || o == h.owner
		}
		if (!l.Queued && !l.Holds) || time.Now().After(deadline) {
			w.rec.Leftover(l)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leftoverPatience bounds how long a cancelled wait's background clean-up
// may take before what it left counts as left behind.
const leftoverPatience = time.Second

// parseInfo reads the queue's owners and the holders' owners of a
// DLOCK.INFO reply (RESP2 array or RESP3 map; null: no lock).
func parseInfo(v any) (queue, holders []string) {
	fields := map[string]any{}
	switch r := v.(type) {
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if k, ok := r[i].(string); ok {
				fields[k] = r[i+1]
			}
		}
	case map[any]any:
		for k, x := range r {
			if s, ok := k.(string); ok {
				fields[s] = x
			}
		}
	}
	if q, ok := fields["queue"].([]any); ok {
		for _, o := range q {
			if s, ok := o.(string); ok {
				queue = append(queue, s)
			}
		}
	}
	if hs, ok := fields["holders"].([]any); ok {
		for _, e := range hs {
			if arr, ok := e.([]any); ok && len(arr) > 0 {
				if s, ok := arr[0].(string); ok {
					holders = append(holders, s)
				}
			}
		}
	}
	return queue, holders
}

// raw sends a dlock command on the worker's own client, never retried.
func (w *worker) raw(args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return w.rdb.Do(ctx, args...).Result()
}

func (w *worker) renew(h *holdSpec) Output {
	in := h.input(Renew, w.id)
	i := w.rec.Begin(in)
	v, err := w.raw("DLOCK.RENEW", h.key, h.owner, h.ttl.Milliseconds())
	out := Output{}
	if err != nil {
		out = classify(err)
	} else if t, ok := v.(int64); ok {
		out = Output{Status: TokenReply, Token: t}
	} else {
		out = Output{Status: ErrReply, Err: fmt.Sprint(v)}
	}
	w.rec.End(i, out)
	return out
}

// release gives back one hold: raw DLOCK.RELEASE, or Lock.Release for the
// last hold of a SESSION lock (which gives its connection back).
func (w *worker) release(h *holdSpec, last bool) Output {
	in := h.input(Release, w.id)
	i := w.rec.Begin(in)
	var out Output
	if last && h.sessionRelease && h.lock != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.lock.Release(ctx)
		cancel()
		switch {
		case err == nil && errors.Is(context.Cause(h.lock.Context()), dlock.ErrReleased):
			out = Output{Status: Count, Holds: -1}
		case err == nil:
			out = Output{Status: MaybeReleased}
		default:
			out = classify(err)
		}
	} else {
		args := []any{"DLOCK.RELEASE", h.key, h.owner}
		if h.shared {
			args = append(args, "SHARED")
		}
		v, err := w.raw(args...)
		if err != nil {
			out = classify(err)
		} else if n, ok := v.(int64); ok {
			out = Output{Status: Count, Holds: n}
		} else {
			out = Output{Status: ErrReply, Err: fmt.Sprint(v)}
		}
	}
	w.rec.End(i, out)
	return out
}

func (w *worker) write(h *holdSpec) bool {
	in := Input{Kind: Write, Key: h.key, Owner: h.owner, Client: w.id, Token: h.token}
	i := w.rec.Begin(in)
	ok := w.store.Write(h.key, h.token)
	w.rec.End(i, Output{Status: map[bool]Status{true: Accepted, false: Refused}[ok]})
	return ok
}

func (w *worker) ms(lo, hi int) time.Duration {
	return time.Duration(lo+w.rng.Intn(hi-lo+1)) * time.Millisecond
}

// nextHold picks the next hold's key, mode and way of acquiring.
func (w *worker) nextHold() *holdSpec {
	w.seq++
	h := &holdSpec{owner: fmt.Sprintf("c%02d.%d", w.id, w.seq), ttl: w.ms(300, 800)}
	switch r := w.rng.Intn(10); {
	case r < 5:
		h.key = exclusiveKeys[w.rng.Intn(len(exclusiveKeys))]
	case r < 7:
		h.key = rwKey
		h.shared = w.rng.Intn(3) > 0
	default:
		h.key = semKey
		h.shared, h.limit, h.weight = true, semLimit, int64(1+w.rng.Intn(2))
	}
	switch r := w.rng.Intn(20); {
	case r < 6: // immediate
	case r < 9:
		h.fair = true
	case r < 16:
		h.block = w.ms(100, 700)
	case r < 18:
		h.session = true
		if w.rng.Intn(2) == 0 {
			h.block = w.ms(100, 500)
		}
	default:
		h.cancelAfter = w.ms(20, 200)
	}
	return h
}

func settled(o Output) bool {
	return o.Status != Unknown && o.Status != MaybeGranted && o.Status != MaybeReleased
}

// run loops until ctx ends: acquire, work (fenced writes, re-entries,
// renewals), release; an unknown outcome abandons the owner.
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		h := w.nextHold()
		out := w.acquire(ctx, h, false)
		for tries := 0; h.fair && out.Status == Null && tries < 3 && ctx.Err() == nil; tries++ {
			time.Sleep(w.ms(20, 60)) // FAIR polling keeps the reservation
			out = w.acquire(ctx, h, false)
		}
		if out.Status != Grant {
			if !settled(out) || out.Status == ErrReply {
				time.Sleep(w.ms(30, 80)) // the server is away: do not spin
			} else {
				time.Sleep(w.ms(0, 20))
			}
			continue
		}
		h.token, h.holds = out.Token, 1
		w.hold(ctx, h)
	}
}

func (w *worker) hold(ctx context.Context, h *holdSpec) {
	steps := 1 + w.rng.Intn(4)
	for s := 0; s < steps; s++ {
		switch r := w.rng.Intn(10); {
		case r < 5:
			if !h.shared { // shared holders have no order among themselves
				w.write(h)
			}
		case r < 7:
			out := w.acquire(ctx, h, true)
			if out.Status == Grant {
				h.holds++
			} else if !settled(out) {
				return
			}
		case r < 9:
			out := w.renew(h)
			if !settled(out) {
				return
			}
		}
		time.Sleep(w.ms(5, w.maxHold/steps))
	}
	if w.rng.Intn(20) == 0 {
		return // walk away: the lease ends on its own
	}
	for h.holds > 0 {
		out := w.release(h, h.holds == 1)
		if out.Status != Count {
			return
		}
		h.holds--
	}
}

// stall: a holder takes x:0, writes, stops for longer than its lease (no
// renewal, as a paused process would), while another owner waits for the
// lock, gets it when the lease ends and writes with its newer token; then
// the stalled holder wakes up and writes with its old token: the fenced
// store must refuse it.
func (w *worker) stall(ctx context.Context, pause time.Duration) {
	w.seq++
	h := &holdSpec{key: "x:0", owner: fmt.Sprintf("stalled%02d.%d", w.id, w.seq), ttl: 300 * time.Millisecond, block: time.Second}
	out := w.acquire(ctx, h, false)
	if out.Status != Grant {
		return
	}
	h.token, h.holds = out.Token, 1
	w.write(h)
	done := time.Now().Add(pause)
	w.seq++
	next := &holdSpec{key: "x:0", owner: fmt.Sprintf("successor%02d.%d", w.id, w.seq), ttl: 300 * time.Millisecond, block: pause}
	newer := false
	if o := w.acquire(ctx, next, false); o.Status == Grant {
		next.token = o.Token
		newer = w.write(next)
		w.release(next, true)
	}
	time.Sleep(time.Until(done))
	ok := w.write(h)
	if newer {
		w.rec.Stale(!ok)
	}
	w.release(h, true)
}

// sampler reads every key's queue with DLOCK.INFO for the FIFO check.
func sampler(ctx context.Context, t target, rec *Recorder) {
	rdb := t.newClient(true)
	defer rdb.Close()
	for ctx.Err() == nil {
		for _, k := range allKeys {
			call := rec.Now()
			c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			v, err := rdb.Do(c, "DLOCK.INFO", k).Result()
			cancel()
			ret := rec.Now()
			if err != nil {
				continue
			}
			q, _ := parseInfo(v)
			if len(q) > 0 {
				rec.Snapshot(Snapshot{Key: k, Call: call, Ret: ret, Queue: q})
			}
		}
		time.Sleep(15 * time.Millisecond)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...interface{}) {}

// go-redis logs every failed dial while the server is down on purpose.
func init() { redis.SetLogger(quietLogger{}) }
