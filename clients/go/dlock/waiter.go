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

// unblockGrace is how long a cancelled wait waits for the reply after
// CLIENT UNBLOCK before it drops its connection. Redis 7.0 can drop the
// reply of a waiter granted in the same event-loop turn as the unblock.
const unblockGrace = time.Second

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

// blocking sends args on the waiter's connection and waits for the reply
// (read deadline: rctx). Cancelling ctx sends CLIENT UNBLOCK through node
// and then runs afterUnblock; cancelled reports that it did.
func (w *waiter) blocking(ctx, rctx context.Context, node redis.Cmdable, args []any, afterUnblock func()) (v any, err error, cancelled bool) {
	replied := make(chan struct{})
	callbackDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(callbackDone)
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = node.ClientUnblock(uctx, w.id.Load()).Err()
		cancel()
		if afterUnblock != nil {
			afterUnblock()
		}
		select {
		case <-replied:
		case <-time.After(unblockGrace):
			w.abort()
		}
	})
	cmd := newNoRetry(rctx, args...)
	_ = w.rdb.Process(rctx, cmd)
	close(replied)
	if !stop() {
		// The cancel ran: wait for its unblock and release to finish, so
		// they precede whatever the caller does next.
		<-callbackDone
		cancelled = true
	}
	v, err = cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil, cancelled
	}
	return v, serverError(err), cancelled
}

// waiterPool keeps idle waiters of one node.
type waiterPool struct {
	opt  *redis.Options
	mu   sync.Mutex
	idle []*waiter
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
	// Connect now, so the connection id is known before any wait.
	if err := w.rdb.Ping(ctx).Err(); err != nil {
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
	if len(p.idle) < maxIdleWaiters {
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
