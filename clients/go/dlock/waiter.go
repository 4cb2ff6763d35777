package dlock

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// unblockGrace is how long a cancelled wait waits for its reply after the
// cancel before it drops its connection, when its CLIENT UNBLOCK goes
// unanswered (a stalled server). Redis 7.0 can also drop the reply of a
// waiter granted in the same event-loop turn as the unblock (see
// unblockedGrace).
const unblockGrace = time.Second

// unblockedGrace is how long a cancelled wait waits for the reply once
// its CLIENT UNBLOCK is answered: the server wrote the waiter's reply in
// the same turn, unless it dropped it.
const unblockedGrace = 250 * time.Millisecond

// maxIdleWaiters bounds the idle dedicated connections kept per node.
const maxIdleWaiters = 16

// waiter is one dedicated connection for blocking commands: a go-redis
// client with a pool of one, no retries, no read timeout of its own (the
// read deadline comes from the command's context), whose connection id and
// net.Conn are known, so a wait can be ended with CLIENT UNBLOCK, or by
// closing the socket when the server never answers.
type waiter struct {
	rdb  *redis.Client
	id   atomic.Int64
	conn atomic.Pointer[net.Conn]
}

func newWaiter(base *redis.Options) *waiter {
	w := &waiter{}
	opt := *base
	opt.PoolSize = 1
	opt.MinIdleConns = 0
	opt.MaxIdleConns = 1
	opt.MaxActiveConns = 1
	opt.MaxRetries = -1
	opt.ReadTimeout = -1
	opt.WriteTimeout = -1
	opt.ContextTimeoutEnabled = true
	opt.PushNotificationProcessor = nil
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	dial := opt.Dialer
	if dial == nil {
		nd := &net.Dialer{Timeout: opt.DialTimeout, KeepAlive: 5 * time.Minute}
		if opt.TLSConfig != nil {
			td := &tls.Dialer{NetDialer: nd, Config: opt.TLSConfig}
			dial = td.DialContext
		} else {
			dial = nd.DialContext
		}
	}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err == nil {
			w.conn.Store(&cn)
		}
		return cn, err
	}
	onConnect := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		if onConnect != nil {
			if err := onConnect(ctx, cn); err != nil {
				return err
			}
		}
		id, err := cn.ClientID(ctx).Result()
		if err != nil {
			return err
		}
		w.id.Store(id)
		return nil
	}
	w.rdb = redis.NewClient(&opt)
	return w
}

// abort closes the socket under a read that will not end by itself.
func (w *waiter) abort() {
	if cn := w.conn.Load(); cn != nil {
		_ = (*cn).SetDeadline(time.Now())
	}
}

// cleanupTimeout bounds each step of a clean-up after a cancelled or
// timed-out wait (CLIENT UNBLOCK, the release of R4.4 and R5.3): it runs
// in the background, never on the caller's time (R4.7).
const cleanupTimeout = 10 * time.Second

// errAborted: the waiter's socket was closed under its read.
var errAborted = errors.New("dlock: wait aborted after CLIENT UNBLOCK went unanswered")

// Read states of one blocking call.
const (
	readPending int32 = iota
	readDone
	readAborted
)

// blocking sends args on the waiter's connection and waits for the reply
// (read deadline: rctx). When ctx is done first, the rest runs in the
// background (R4.7): CLIENT UNBLOCK through node, and, when no reply comes
// within unblockGrace of the cancel, the socket is closed so that the
// caller returns even from a stalled server. A cancelled call (cancelled
// true) leaves the waiter to that clean-up, which gives it back to pool
// only once its UNBLOCK is answered (a late UNBLOCK never ends another
// wait), and then calls after with the reply read, if any (the caller gets
// it too). An uncancelled call leaves the waiter to the caller.
func (w *waiter) blocking(ctx, rctx context.Context, node redis.Cmdable, pool *waiterPool, args []any, after func(v any, err error)) (v any, err error, cancelled bool) {
	var state atomic.Int32
	var replyV any // the reply, written before replied is closed
	var replyErr error
	replied := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		grace := time.AfterFunc(unblockGrace, func() {
			if state.CompareAndSwap(readPending, readAborted) {
				w.abort()
			}
		})
		uctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		if node.ClientUnblock(uctx, w.id.Load()).Err() == nil {
			// Answered: the waiter's reply is on its way, or was dropped.
			grace.Reset(unblockedGrace)
		}
		cancel()
		<-replied // within unblockGrace of the cancel at the latest
		grace.Stop()
		rv, rerr := replyV, serverError(replyErr)
		if errors.Is(replyErr, redis.Nil) {
			rv, rerr = nil, nil
		}
		if state.Load() == readAborted {
			pool.put(w, errAborted)
		} else {
			pool.put(w, rerr)
		}
		if after != nil {
			after(rv, rerr)
		}
	})
	cmd := newNoRetry(rctx, args...)
	_ = w.rdb.Process(rctx, cmd)
	state.CompareAndSwap(readPending, readDone)
	replyV, replyErr = cmd.Result()
	close(replied)
	cancelled = !stop() // if so, the clean-up owns the waiter now
	if errors.Is(replyErr, redis.Nil) {
		return nil, nil, cancelled
	}
	return replyV, serverError(replyErr), cancelled
}

// waiterPool keeps idle waiters of one node.
type waiterPool struct {
	opt    *redis.Options
	mu     sync.Mutex
	idle   []*waiter
	closed bool // Client.Close ran: a waiter given back late is closed
}

func (p *waiterPool) get(ctx context.Context) (*waiter, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	w := newWaiter(p.opt)
	// Connect now, so the connection id is known before any wait; a
	// stalled server's handshake ends with ctx.
	stop := context.AfterFunc(ctx, w.abort)
	err := w.rdb.Ping(ctx).Err()
	if !stop() || ctx.Err() != nil {
		// ctx ended the handshake: the call's error is ctx's (Canceled,
		// DeadlineExceeded), not the i/o timeout that abort caused.
		err = ctx.Err()
	}
	if err != nil {
		_ = w.rdb.Close()
		return nil, err
	}
	return w, nil
}

// put keeps a waiter whose connection is in a known state (err nil or an
// error reply other than READONLY/UNBLOCKED); others are closed.
func (p *waiterPool) put(w *waiter, err error) {
	var se *ServerError
	if errors.As(err, &se) && (se.Code == "READONLY" || se.Code == "UNBLOCKED") {
		// A failover made this node a replica: reconnect next time (a
		// Sentinel dialer then reaches the new master).
		_ = w.rdb.Close()
		return
	}
	if err != nil && !isServerError(err) {
		_ = w.rdb.Close()
		return
	}
	p.mu.Lock()
	if !p.closed && len(p.idle) < maxIdleWaiters {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = w.rdb.Close()
}

type waiterPools struct {
	mu    sync.Mutex
	pools map[string]*waiterPool
}

func (ps *waiterPools) pool(node *redis.Client) *waiterPool {
	opt := node.Options()
	key := opt.Network + "|" + opt.Addr
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.pools == nil {
		ps.pools = map[string]*waiterPool{}
	}
	p := ps.pools[key]
	if p == nil {
		p = &waiterPool{opt: opt}
		ps.pools[key] = p
	}
	return p
}

func (ps *waiterPools) closeAll() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.pools {
		p.mu.Lock()
		for _, w := range p.idle {
			_ = w.rdb.Close()
		}
		p.idle = nil
		p.closed = true
		p.mu.Unlock()
	}
}

// errNoBlocking: the UniversalClient is neither a Client nor a ClusterClient.
var errNoBlocking = errors.New("dlock: blocking waits need a *redis.Client or *redis.ClusterClient")

// nodeFor returns the node client that serves key and its waiter pool.
func (c *Client) nodeFor(ctx context.Context, key string) (*redis.Client, *waiterPool, error) {
	switch r := c.rdb.(type) {
	case *redis.Client:
		return r, c.waiters.pool(r), nil
	case *redis.ClusterClient:
		node, err := r.MasterForKey(ctx, key)
		if err != nil {
			return nil, nil, err
		}
		return node, c.waiters.pool(node), nil
	}
	return nil, nil, errNoBlocking
}
