package dlock

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client sends dlock's commands through a go-redis client: one server, a
// Sentinel failover client or a Cluster. It runs one watchdog goroutine for
// all its locks and keeps dedicated connections for blocking waits. A
// Client is safe for concurrent use; make one per go-redis client.
type Client struct {
	rdb          redis.UniversalClient
	lease        time.Duration
	renewDivisor int
	renewEvery   time.Duration
	safety       time.Duration
	drift        float64
	waitMargin   time.Duration
	onLost       func(*Lock)

	wd      *watchdog
	waiters waiterPools

	// reserved holds, per key, the owner of a Fair request without an
	// Owner that was not granted: the next such request for the key asks
	// under it again, so a poller keeps its reservation (R8). A granted
	// owner is taken out, never reused.
	reservedMu sync.Mutex
	reserved   map[string]string

	lastMs atomic.Pointer[boxedMs]
}

// maxReserved bounds the owners kept for fair pollers.
const maxReserved = 4096

// reservedOwner takes the owner a fair poller of key left, or makes one.
func (c *Client) reservedOwner(key string) string {
	c.reservedMu.Lock()
	owner, ok := c.reserved[key]
	if ok {
		delete(c.reserved, key)
	}
	c.reservedMu.Unlock()
	if !ok {
		owner = newOwner()
	}
	return owner
}

// keepReserved leaves owner, not granted, for the next fair request of key.
func (c *Client) keepReserved(key, owner string) {
	c.reservedMu.Lock()
	if c.reserved == nil {
		c.reserved = map[string]string{}
	}
	if len(c.reserved) < maxReserved {
		c.reserved[key] = owner
	}
	c.reservedMu.Unlock()
}

// Option configures a Client.
type Option func(*Client)

// WithLease sets the default lease of a hold (30 s by default); the
// watchdog renews it while the Lock is held.
func WithLease(d time.Duration) Option { return func(c *Client) { c.lease = d } }

// WithRenewEvery sets the watchdog's period for every lock (default: a
// third of the lock's lease).
func WithRenewEvery(d time.Duration) Option { return func(c *Client) { c.renewEvery = d } }

// WithOnLost sets a function called (on a goroutine of its own) for each
// lock found lost. The lock's Context is cancelled either way.
func WithOnLost(f func(*Lock)) Option { return func(c *Client) { c.onLost = f } }

// WithSafetyMargin sets the margin by which a lock counts as lost before
// its lease could end on the server: fixed + drift*lease (5 ms and 0.01 by
// default).
func WithSafetyMargin(fixed time.Duration, drift float64) Option {
	return func(c *Client) { c.safety, c.drift = fixed, drift }
}

// WithWaitMargin sets how much longer than the server-side wait a blocking
// wait's connection waits for the reply (2 s by default).
func WithWaitMargin(d time.Duration) Option { return func(c *Client) { c.waitMargin = d } }

// New returns a Client on rdb: a *redis.Client (also from
// redis.NewFailoverClient) or a *redis.ClusterClient. Blocking waits need
// one of those two; other UniversalClients can only TryAcquire.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{
		rdb:          rdb,
		lease:        30 * time.Second,
		renewDivisor: 3,
		safety:       5 * time.Millisecond,
		drift:        0.01,
		waitMargin:   2 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	c.wd = newWatchdog(c)
	return c
}

// Close stops the watchdog (locks still held then are left to their
// leases and their contexts are cancelled with ErrLockLost) and closes the
// dedicated connections. It does not close the go-redis client.
func (c *Client) Close() error {
	c.wd.stop()
	c.waiters.closeAll()
	return nil
}

func (c *Client) margin(lease time.Duration) time.Duration {
	return c.safety + time.Duration(float64(lease)*c.drift)
}

func (c *Client) period(lease time.Duration) time.Duration {
	if c.renewEvery > 0 {
		return c.renewEvery
	}
	return lease / time.Duration(c.renewDivisor)
}

// newOwner returns a random UUID v4, unique to one hold. Its 122 random
// bits come from math/rand/v2's ChaCha8 generator (seeded by the OS for
// each thread, a few ns), not from a getrandom call per acquire: an owner
// must be unique, and is no secret (any client of the server can read it
// with DLOCK.INFO).
func newOwner() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:16], rand.Uint64())
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// noRetryCmd is a command that go-redis never sends twice: ACQUIRE, FAIR,
// MACQUIRE, RELEASE and COUNTDOWN change state, so a retry after a dropped
// connection could take a second hold or give back one too many.
type noRetryCmd struct{ *redis.Cmd }

func (noRetryCmd) NoRetry() bool { return true }

func newNoRetry(ctx context.Context, args ...any) noRetryCmd {
	return noRetryCmd{redis.NewCmd(ctx, args...)}
}

// run sends a command on the shared client and maps error replies.
func (c *Client) run(ctx context.Context, retry bool, args ...any) (any, error) {
	var cmd redis.Cmder
	var inner *redis.Cmd
	if retry {
		inner = redis.NewCmd(ctx, args...)
		cmd = inner
	} else {
		nr := newNoRetry(ctx, args...)
		inner, cmd = nr.Cmd, nr
	}
	_ = c.rdb.Process(ctx, cmd)
	v, err := inner.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, serverError(err)
}

// ---------------------------------------------------------------- options

type acquireConfig struct {
	shared      bool
	limit       int64
	weight      int64
	limitSet    bool // Limit was given (a limit below 1 is refused)
	weightSet   bool // Weight was given (a weight below 1 is refused)
	session     bool
	fair        bool
	ttl         time.Duration
	owner       string
	replicas    int
	replicaWait time.Duration
}

// AcquireOption configures one acquire.
type AcquireOption func(*acquireConfig)

// Shared asks for a shared hold (a read lock, or a semaphore permit with Limit).
func Shared() AcquireOption { return func(a *acquireConfig) { a.shared = true } }

// Limit bounds the shared holders (SHARED LIMIT n, n >= 1); implies
// Shared. A limit below 1 fails with ErrInvalidArgument.
func Limit(n int64) AcquireOption {
	return func(a *acquireConfig) { a.shared, a.limit, a.limitSet = true, n, true }
}

// Weight takes w permits of a Limit semaphore (WEIGHT w, 1 <= w <= limit);
// a weight out of that range fails with ErrInvalidArgument.
func Weight(w int64) AcquireOption {
	return func(a *acquireConfig) { a.weight, a.weightSet = w, true }
}

// Session ties the hold to the connection that got it (SESSION). The
// connection is the shared pool's, or the wait's dedicated one, so the
// hold ends when go-redis closes that connection.
func Session() AcquireOption { return func(a *acquireConfig) { a.session = true } }

// Fair uses DLOCK.FAIR: a TryAcquire that fails keeps a reservation for
// its owner. Without Owner, the Client keeps the owner of a fair request
// the server refused and asks under it at the next fair request for the
// key, so a poller keeps its place; a granted owner is never reused.
func Fair() AcquireOption { return func(a *acquireConfig) { a.fair = true } }

// TTL sets this hold's lease (default: the client's, 30 s).
func TTL(d time.Duration) AcquireOption { return func(a *acquireConfig) { a.ttl = d } }

// Owner sets the owner instead of a new UUID. Holds of one owner re-enter
// the lock; keep it unique to one holder. An owner is 1 to 512 bytes and
// never "*" (the server would generate one the client does not know):
// others fail with ErrInvalidArgument.
func Owner(s string) AcquireOption { return func(a *acquireConfig) { a.owner = s } }

// Replicas sends WAIT n timeout after the grant, on the grant's
// connection; when fewer replicas confirm, the lock is released and the
// error matches ErrNotReplicated.
func Replicas(n int, timeout time.Duration) AcquireOption {
	return func(a *acquireConfig) { a.replicas, a.replicaWait = n, timeout }
}

// boxedMs is a lease in ms already boxed as a command argument.
type boxedMs struct {
	ms  int64
	arg any
}

// msArg returns ms(d) as an argument, boxed once for the lease last used
// (an allocation less per command on the hot path).
func (c *Client) msArg(d time.Duration) any {
	m := ms(d)
	if b := c.lastMs.Load(); b != nil && b.ms == m {
		return b.arg
	}
	c.lastMs.Store(&boxedMs{ms: m, arg: m})
	return m
}

func ms(d time.Duration) int64 {
	m := d.Milliseconds()
	if m < 1 {
		m = 1
	}
	return m
}

// acquireArgs builds ACQUIRE/FAIR/MACQUIRE for l (in l's own array for
// one key); block < 0 means no BLOCK.
func (c *Client) acquireArgs(l *Lock, multi bool, block int64) []any {
	cfg := &l.cfg
	var args []any
	switch {
	case multi:
		args = make([]any, 0, 12+len(l.keys))
		args = append(args, "DLOCK.MACQUIRE", len(l.keys))
		for _, k := range l.keys {
			args = append(args, k)
		}
	case cfg.fair:
		args = append(l.args[:0], "DLOCK.FAIR", l.keyArg)
	default:
		args = append(l.args[:0], "DLOCK.ACQUIRE", l.keyArg)
	}
	args = append(args, l.ownerArg, c.msArg(cfg.ttl))
	if cfg.shared {
		args = append(args, "SHARED")
	}
	if cfg.limit > 0 {
		args = append(args, "LIMIT", cfg.limit)
	}
	if cfg.weight > 1 {
		args = append(args, "WEIGHT", cfg.weight)
	}
	if block >= 0 {
		args = append(args, "BLOCK", block)
	}
	if cfg.session {
		args = append(args, "SESSION")
	}
	return args
}

// ---------------------------------------------------------------- acquire

// Acquire waits in the server's queue for the lock until it is granted or
// ctx is done: BLOCK for the time left on ctx's deadline, BLOCK 0 without
// one. The wait runs on a dedicated connection; cancelling ctx ends it with
// CLIENT UNBLOCK and the error matches ctx.Err() (a grant that raced the
// cancel is released). The call returns when the wait's connection
// answers, or at most a second after ctx is done when the server answers
// nothing (a stalled server): the clean-up (the unblock, a release) goes on
// in the background. A ctx that is already done fails even when the lock
// is free.
func (c *Client) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, key, nil, true, opts)
}

// TryAcquire makes one attempt and never waits: ErrNotAcquired when the
// lock is not free (or others wait for it).
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, key, nil, false, opts)
}

// AcquireMulti takes every key in one atomic step (DLOCK.MACQUIRE), waiting
// in every key's queue at once as Acquire does. In a Cluster the keys must
// share a slot (use a hash tag), checked before sending.
func (c *Client) AcquireMulti(ctx context.Context, keys []string, opts ...AcquireOption) (*Lock, error) {
	if len(keys) == 0 {
		return nil, errNoKeys
	}
	return c.acquire(ctx, "", keys, true, opts)
}

// TryAcquireMulti is AcquireMulti without a wait.
func (c *Client) TryAcquireMulti(ctx context.Context, keys []string, opts ...AcquireOption) (*Lock, error) {
	if len(keys) == 0 {
		return nil, errNoKeys
	}
	return c.acquire(ctx, "", keys, false, opts)
}

// Do acquires key (waiting as Acquire), runs fn with a context that is
// cancelled when the lock is lost (cause ErrLockLost) or ctx is done, and
// releases the lock after fn returns.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...AcquireOption) error {
	lock, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(lock.Context(), func() { cancel(context.Cause(lock.Context())) })
	ferr := fn(fctx)
	stop()
	cancel(nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	rerr := lock.Release(rctx)
	if ferr != nil {
		return ferr
	}
	return rerr
}

var errNoKeys = fmt.Errorf("%w: no keys", ErrInvalidArgument)

// maxOwnerLen is the server's bound on an owner (R1.3).
const maxOwnerLen = 512

// check refuses a bad argument before anything is sent (R9.2): it is
// never quietly changed into another value.
func (cfg *acquireConfig) check() error {
	switch {
	case cfg.ttl <= 0:
		return fmt.Errorf("%w: the lease must be positive, not %v", ErrInvalidArgument, cfg.ttl)
	case cfg.limitSet && cfg.limit < 1:
		return fmt.Errorf("%w: the limit must be at least 1, not %d", ErrInvalidArgument, cfg.limit)
	case cfg.weightSet && cfg.weight < 1:
		return fmt.Errorf("%w: the weight must be at least 1, not %d", ErrInvalidArgument, cfg.weight)
	case cfg.weightSet && !cfg.limitSet:
		return fmt.Errorf("%w: a weight needs a Limit (a semaphore)", ErrInvalidArgument)
	case cfg.weightSet && cfg.weight > cfg.limit:
		return fmt.Errorf("%w: the weight %d is above the limit %d", ErrInvalidArgument, cfg.weight, cfg.limit)
	case cfg.owner == "*":
		return fmt.Errorf("%w: the owner must not be \"*\"", ErrInvalidArgument)
	case len(cfg.owner) > maxOwnerLen:
		return fmt.Errorf("%w: an owner is at most %d bytes", ErrInvalidArgument, maxOwnerLen)
	}
	return nil
}

// acquire takes key, or keys (a multi-lock) when keys is not nil. The Lock
// is made first and holds the request's configuration and arguments, so
// that an uncontended acquire allocates little.
func (c *Client) acquire(ctx context.Context, key string, keys []string, wait bool, opts []AcquireOption) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &Lock{c: c}
	multi := keys != nil
	if multi {
		keys = append([]string(nil), keys...)
	} else {
		l.key1[0] = key
		keys = l.key1[:]
	}
	cfg := &l.cfg
	cfg.ttl = c.lease
	for _, o := range opts {
		o(cfg)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if multi {
		if err := c.checkSlots(keys); err != nil {
			return nil, err
		}
	}
	owner, generated := cfg.owner, cfg.owner == ""
	poller := generated && cfg.fair && !multi
	switch {
	case poller:
		owner = c.reservedOwner(keys[0])
	case generated:
		owner = newOwner()
	}
	l.keys, l.owner, l.shared, l.lease = keys, owner, cfg.shared, cfg.ttl
	l.keyArg, l.ownerArg = keys[0], owner
	var err error
	if !wait && cfg.replicas == 0 && !cfg.session {
		err = c.acquireInline(ctx, l, multi, generated)
	} else {
		err = c.acquireDedicated(ctx, l, multi, wait, generated)
	}
	if err != nil {
		if poller && errors.Is(err, ErrNotAcquired) && !waitWasCancelled(err) {
			// The server said no: the owner holds nothing and no clean-up
			// will release it, so the next try may ask under it.
			c.keepReserved(keys[0], owner)
		}
		return nil, err
	}
	return l, nil
}

// acquireInline sends one attempt on the shared client, never retried.
func (c *Client) acquireInline(ctx context.Context, l *Lock, multi bool, generated bool) error {
	cmd := newNoRetry(ctx, c.acquireArgs(l, multi, -1)...)
	if multi {
		cmd.SetFirstKeyPos(2)
	}
	sent := time.Now()
	_ = c.rdb.Process(ctx, cmd)
	v, err := cmd.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		err = serverError(err)
		if !isServerError(err) && generated {
			// The command may have run and its reply been lost: a hold of
			// this request's own owner is released, so none is left behind
			// (R5.3), in the background (R4.7).
			go c.releaseQuietly(l.keys, l.owner, l.shared)
		}
		return err
	}
	if errors.Is(err, redis.Nil) {
		v = nil
	}
	return c.granted(v, l, multi, sent, false)
}

// releaseQuietly is the release of a clean-up, bounded by a context of
// its own.
func (c *Client) releaseQuietly(keys []string, owner string, shared bool) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = c.release(ctx, keys, owner, shared)
}

// release gives back one hold of every key (pipelined), never retried.
func (c *Client) release(ctx context.Context, keys []string, owner string, shared bool) error {
	if len(keys) == 1 {
		args := []any{"DLOCK.RELEASE", keys[0], owner}
		if shared {
			args = append(args, "SHARED")
		}
		_, err := c.run(ctx, false, args...)
		return err
	}
	cmds := make([]noRetryCmd, len(keys))
	pipe := c.rdb.Pipeline()
	for i, k := range keys {
		args := []any{"DLOCK.RELEASE", k, owner}
		if shared {
			args = append(args, "SHARED")
		}
		cmds[i] = newNoRetry(ctx, args...)
		_ = pipe.Process(ctx, cmds[i])
	}
	_, _ = pipe.Exec(ctx)
	var first error
	for _, cmd := range cmds {
		if err := serverError(cmd.Err()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// granted turns a reply into l's tokens and watches l, or returns
// ErrNotAcquired for null.
func (c *Client) granted(v any, l *Lock, multi bool, anchor time.Time, renewNow bool) error {
	if v == nil {
		return ErrNotAcquired
	}
	if multi {
		arr, ok := v.([]any)
		if !ok || len(arr) != len(l.keys) {
			return fmt.Errorf("dlock: unexpected reply %v", v)
		}
		l.tokens = make([]int64, len(l.keys))
		for i, g := range arr {
			tok, holds, _, err := parseGrant(g)
			if err != nil {
				return err
			}
			l.tokens[i] = tok
			if i == 0 {
				l.holds = holds
			}
		}
	} else {
		tok, holds, _, err := parseGrant(v)
		if err != nil {
			return err
		}
		l.token1[0], l.holds = tok, holds
		l.tokens = l.token1[:]
	}
	c.wd.watch(l, anchor, renewNow)
	return nil
}

func parseGrant(g any) (token, holds int64, owner string, err error) {
	arr, ok := g.([]any)
	if !ok || len(arr) != 3 {
		return 0, 0, "", fmt.Errorf("dlock: unexpected grant %v", g)
	}
	token, ok1 := arr[0].(int64)
	holds, ok2 := arr[1].(int64)
	owner, ok3 := arr[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, "", fmt.Errorf("dlock: unexpected grant %v", g)
	}
	return token, holds, owner, nil
}

// waitTimes returns the BLOCK argument and the read deadline of a wait
// bounded by ctx.
func (c *Client) waitTimes(ctx context.Context) (block int64, readCtx context.Context, cancel context.CancelFunc, err error) {
	base := context.WithoutCancel(ctx)
	deadline, ok := ctx.Deadline()
	if !ok {
		rctx, cancel := context.WithCancel(base)
		return 0, rctx, cancel, nil
	}
	left := time.Until(deadline)
	if left <= 0 {
		return 0, nil, nil, context.DeadlineExceeded
	}
	rctx, cancel := context.WithTimeout(base, left+c.waitMargin)
	return ms(left), rctx, cancel, nil
}

// acquireDedicated acquires on a connection of its own: a wait, WAIT for
// replicas after the grant, or a SESSION hold.
func (c *Client) acquireDedicated(ctx context.Context, l *Lock, multi, wait bool, generated bool) error {
	keys, owner, cfg := l.keys, l.owner, &l.cfg
	block, rctx, cancelRead := int64(-1), context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if wait {
		var err error
		block, rctx, cancelRead, err = c.waitTimes(ctx)
		if err != nil {
			return err
		}
	}
	defer cancelRead()
	node, pool, err := c.nodeFor(ctx, keys[0])
	if err != nil {
		return err
	}
	w, err := pool.get(ctx)
	if err != nil {
		return err
	}
	args := c.acquireArgs(l, multi, block)
	// The clean-up of a cancelled wait, in the background once its CLIENT
	// UNBLOCK is answered (R4.4, R4.7): the server can no longer grant the
	// wait then, so releasing the request's own owner settles a grant that
	// raced the cancel even if its reply never arrives; an owner of the
	// caller's is released only for a grant read.
	afterCancel := func(v any, err error) {
		if generated || (err == nil && v != nil) {
			c.releaseQuietly(keys, owner, cfg.shared)
		}
	}
	sent := time.Now()
	v, err, cancelled := w.blocking(ctx, rctx, node, pool, args, afterCancel)
	if cancelled {
		return &waitCancelled{waitEnded(keys[0], ctx)}
	}
	if err != nil {
		pool.put(w, err)
		if isServerError(err) {
			return err
		}
		if generated {
			// No reply (a read timeout, a closed connection): the request
			// may have been granted; its own owner is released in the
			// background (R5.3, R4.7).
			go c.releaseQuietly(keys, owner, cfg.shared)
		}
		// An I/O error (io.EOF from a stopped server, a timeout) names the
		// key; errors.Is and errors.As still reach it.
		return fmt.Errorf("dlock: acquire %q: %w", keys[0], err)
	}
	if v == nil {
		pool.put(w, nil)
		if wait && block > 0 {
			return fmt.Errorf("%w: %q: %w", ErrNotAcquired, keys[0], context.DeadlineExceeded)
		}
		return ErrNotAcquired
	}
	anchor, renewNow := sent, false
	if wait {
		// A waiter's lease starts when it is granted, after the send: count
		// from the reply and renew at once to anchor on a send again.
		anchor, renewNow = time.Now(), true
	}
	if err := c.granted(v, l, multi, anchor, renewNow); err != nil {
		pool.put(w, nil)
		return err
	}
	if cfg.replicas > 0 {
		acked, werr := w.rdb.Wait(rctx, cfg.replicas, cfg.replicaWait).Result()
		if werr == nil && acked < int64(cfg.replicas) {
			werr = fmt.Errorf("%w: %d of %d replicas", ErrNotReplicated, acked, cfg.replicas)
		}
		if werr != nil {
			pool.put(w, werr)
			rc, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = l.Release(rc)
			rcancel()
			return werr
		}
	}
	if cfg.session {
		// The hold lives as long as this connection: keep it until Release.
		l.session = func() { pool.put(w, nil) }
	} else {
		pool.put(w, nil)
	}
	return nil
}

// waitCancelled is the error of a wait ended by ctx whose clean-up (a
// release of its owner) may still run in the background.
type waitCancelled struct{ error }

func (e *waitCancelled) Unwrap() error { return e.error }

func waitWasCancelled(err error) bool {
	var wc *waitCancelled
	return errors.As(err, &wc)
}

// waitEnded is the error of a wait ended by ctx: it matches ctx.Err(), and
// also ErrNotAcquired when the deadline passed.
func waitEnded(key string, ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %q: %w", ErrNotAcquired, key, ctx.Err())
	}
	return fmt.Errorf("dlock: wait for %q: %w", key, ctx.Err())
}
