package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
	"go.uber.org/zap"
)

func quietLogger() *zap.Logger { return zap.NewNop() }

// holdTTL is the lease of the holds of scenarios 1 to 3 and 5 on every
// system (dlock's watchdog and etcd's session keep-alive renew it).
const holdTTL = 10 * time.Second

// electionTTL is the lease of scenario 4 on every system.
const electionTTL = 2 * time.Second

// release gives back what an acquire got.
type release func() error

// contender is one party of a contended scenario: it acquires and
// returns how to release; close ends its session.
type contender struct {
	acquire func(ctx context.Context) (release, error)
	close   func()
	reader  bool // a read-write lock's reader (the harness checks exclusion)
}

// system is one row of the report: a server and a client library.
type system interface {
	name() string
	// conn opens one client connection (a go-redis client, an etcd client).
	conn() (conn, error)
	// memory returns the server's memory figure in bytes and what it is.
	memory(ctx context.Context) (int64, error)
	// candidateArgs are the arguments of a child candidate process.
	candidateArgs(key string) []string
}

type conn interface {
	mutex(key string) (contender, error)
	// heldMutex is a mutex for scenario 5: etcd's share one session (one
	// lease) per connection, as an application holding many locks would.
	heldMutex(key string) (contender, error)
	// rw: a reader when read, else a writer.
	rw(key string, read bool) (contender, error)
	semaphore(key string, permits int) (contender, error)
	// campaign waits until value leads key's election; the returned
	// function resigns.
	campaign(ctx context.Context, key, value string) (release, error)
	// observe sends each leader's value as it changes.
	observe(ctx context.Context, key string) (<-chan string, error)
	close()
}

// ---------------------------------------------------------------- dlock

type dlockSystem struct {
	label   string
	fsync   string
	proc    *process
	session bool // scenario 4 only: the hold ends with the leader's connection
}

func (d *dlockSystem) name() string { return d.label }

func (d *dlockSystem) conn() (conn, error) {
	rdb := redis.NewClient(&redis.Options{Addr: d.proc.addr, PoolSize: 64})
	return &dlockConn{rdb: rdb, c: dlock.New(rdb), session: d.session}, nil
}

func (d *dlockSystem) memory(ctx context.Context) (int64, error) {
	rdb := redis.NewClient(&redis.Options{Addr: d.proc.addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return infoField(info, "used_memory")
}

func (d *dlockSystem) candidateArgs(key string) []string {
	args := []string{"-candidate", "dlock", "-endpoint", d.proc.addr, "-key", key}
	if d.session {
		args = append(args, "-session")
	}
	return args
}

type dlockConn struct {
	rdb     *redis.Client
	c       *dlock.Client
	session bool
}

func (d *dlockConn) hold(ctx context.Context, key string, opts ...dlock.AcquireOption) (release, error) {
	l, err := d.c.Acquire(ctx, key, append(opts, dlock.TTL(holdTTL))...)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (d *dlockConn) mutex(key string) (contender, error) {
	return contender{acquire: func(ctx context.Context) (release, error) { return d.hold(ctx, key) }, close: func() {}}, nil
}

func (d *dlockConn) heldMutex(key string) (contender, error) { return d.mutex(key) }

func (d *dlockConn) rw(key string, read bool) (contender, error) {
	m := d.c.RWMutex(key, dlock.TTL(holdTTL))
	take := m.Lock
	if read {
		take = m.RLock
	}
	return contender{acquire: func(ctx context.Context) (release, error) {
		l, err := take(ctx)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(context.Background()) }, nil
	}, close: func() {}, reader: read}, nil
}

func (d *dlockConn) semaphore(key string, permits int) (contender, error) {
	return contender{acquire: func(ctx context.Context) (release, error) {
		return d.hold(ctx, key, dlock.Limit(int64(permits)))
	}, close: func() {}}, nil
}

func (d *dlockConn) campaign(ctx context.Context, key, value string) (release, error) {
	opts := []dlock.AcquireOption{dlock.TTL(electionTTL)}
	if d.session {
		opts = append(opts, dlock.Session())
	}
	e := d.c.Election(key, opts...)
	if _, err := e.Campaign(ctx, value); err != nil {
		return nil, err
	}
	return func() error { return e.Resign(context.Background()) }, nil
}

func (d *dlockConn) observe(ctx context.Context, key string) (<-chan string, error) {
	out := make(chan string, 16)
	in := d.c.Election(key).Observe(ctx)
	go func() {
		defer close(out)
		for l := range in {
			select {
			case out <- l.Value:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (d *dlockConn) close() {
	d.c.Close()
	d.rdb.Close()
}

// ---------------------------------------------------------------- etcd

type etcdSystem struct{ proc *process }

func (e *etcdSystem) name() string { return "etcd" }

func (e *etcdSystem) conn() (conn, error) {
	cli, err := etcdClient(e.proc.addr)
	if err != nil {
		return nil, err
	}
	return &etcdConn{cli: cli}, nil
}

// memory is the etcd process's resident memory (the keys, their leases,
// the MVCC history and the Raft log all live in it).
func (e *etcdSystem) memory(ctx context.Context) (int64, error) { return rss(e.proc.pid()), nil }

func (e *etcdSystem) candidateArgs(key string) []string {
	return []string{"-candidate", "etcd", "-endpoint", e.proc.addr, "-key", key}
}

type etcdConn struct {
	cli *clientv3.Client

	mu     sync.Mutex
	shared *concurrency.Session // heldMutex's
}

func (e *etcdConn) heldMutex(key string) (contender, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shared == nil {
		s, err := e.session(holdTTL)
		if err != nil {
			return contender{}, err
		}
		e.shared = s
	}
	m := concurrency.NewMutex(e.shared, "/"+key)
	return contender{acquire: func(ctx context.Context) (release, error) {
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return func() error { return m.Unlock(context.Background()) }, nil
	}, close: func() {}}, nil
}

// session is one contender's lease, kept alive by the client.
func (e *etcdConn) session(ttl time.Duration) (*concurrency.Session, error) {
	return concurrency.NewSession(e.cli, concurrency.WithTTL(int(ttl/time.Second)))
}

func (e *etcdConn) mutex(key string) (contender, error) {
	s, err := e.session(holdTTL)
	if err != nil {
		return contender{}, err
	}
	m := concurrency.NewMutex(s, "/"+key)
	return contender{acquire: func(ctx context.Context) (release, error) {
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return func() error { return m.Unlock(context.Background()) }, nil
	}, close: func() { s.Close() }}, nil
}

// rw is etcd's experimental recipe (client/v3/experimental/recipes): its
// waits take no context; they end when the key they wait on is deleted.
func (e *etcdConn) rw(key string, read bool) (contender, error) {
	s, err := e.session(holdTTL)
	if err != nil {
		return contender{}, err
	}
	m := recipe.NewRWMutex(s, "/"+key)
	return contender{acquire: func(ctx context.Context) (release, error) {
		if read {
			if err := m.RLock(); err != nil {
				return nil, err
			}
			return m.RUnlock, nil
		}
		if err := m.Lock(); err != nil {
			return nil, err
		}
		return m.Unlock, nil
	}, close: func() { s.Close() }, reader: read}, nil
}

// semaphore generalises etcd's Mutex: each party puts a key under the
// prefix with its session's lease; the first `permits` keys by create
// revision hold a permit; a waiter counts the keys created before its own
// and watches the prefix's deletions (with their previous create
// revision) until fewer than `permits` are left before it. Admission is
// in create-revision order, like the Mutex's queue.
func (e *etcdConn) semaphore(key string, permits int) (contender, error) {
	s, err := e.session(holdTTL)
	if err != nil {
		return contender{}, err
	}
	pfx := "/" + key + "/"
	mine := pfx + strconv.FormatInt(int64(s.Lease()), 16)
	return contender{acquire: func(ctx context.Context) (release, error) {
		put, err := e.cli.Put(ctx, mine, "", clientv3.WithLease(s.Lease()))
		if err != nil {
			return nil, err
		}
		rev := put.Header.Revision
		rel := func() error { _, err := e.cli.Delete(context.Background(), mine); return err }
		// Keys only, counted here: the server applies the create-revision
		// filter after the range, so a count-only reply would count every
		// key under the prefix.
		before, err := e.cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(rev-1), clientv3.WithKeysOnly())
		if err != nil {
			_ = rel()
			return nil, err
		}
		n := int64(len(before.Kvs))
		if n < int64(permits) {
			return rel, nil
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := e.cli.Watch(clientv3.WithRequireLeader(wctx), pfx, clientv3.WithPrefix(),
			clientv3.WithRev(before.Header.Revision+1), clientv3.WithFilterPut(), clientv3.WithPrevKV())
		for w := range wch {
			if err := w.Err(); err != nil {
				_ = rel()
				return nil, err
			}
			for _, ev := range w.Events {
				if ev.Type == mvccpb.DELETE && ev.PrevKv != nil && ev.PrevKv.CreateRevision < rev {
					n--
				}
			}
			if n < int64(permits) {
				return rel, nil
			}
		}
		_ = rel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errors.New("etcd semaphore: watch closed")
	}, close: func() { s.Close() }}, nil
}

func (e *etcdConn) campaign(ctx context.Context, key, value string) (release, error) {
	s, err := e.session(electionTTL)
	if err != nil {
		return nil, err
	}
	el := concurrency.NewElection(s, "/"+key)
	if err := el.Campaign(ctx, value); err != nil {
		s.Close()
		return nil, err
	}
	return func() error {
		err := el.Resign(context.Background())
		s.Close()
		return err
	}, nil
}

func (e *etcdConn) observe(ctx context.Context, key string) (<-chan string, error) {
	s, err := e.session(holdTTL)
	if err != nil {
		return nil, err
	}
	in := concurrency.NewElection(s, "/"+key).Observe(ctx)
	out := make(chan string, 16)
	go func() {
		defer close(out)
		defer s.Close()
		for r := range in {
			if len(r.Kvs) == 0 {
				continue
			}
			select {
			case out <- string(r.Kvs[0].Value):
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (e *etcdConn) close() {
	if e.shared != nil {
		e.shared.Close()
	}
	e.cli.Close()
}

// etcdDBInUse is the logical size of etcd's database in use (bytes).
func etcdDBInUse(ctx context.Context, addr string) int64 {
	cli, err := etcdClient(addr)
	if err != nil {
		return 0
	}
	defer cli.Close()
	st, err := cli.Status(ctx, addr)
	if err != nil {
		return 0
	}
	return st.DbSizeInUse
}

func infoField(info, field string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in INFO", field)
}
