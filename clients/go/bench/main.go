// Command bench compares the dlock Go client with redsync v4 and
// bsm/redislock on one redis-server with the dlock module, in one run, and
// writes docs/benchmarks-go.md (issue 30's goals):
//
//   - contention: 16 goroutines on 4 go-redis clients take one key in
//     turn; hand-offs per second and the p99 wait for the lock;
//   - uncontended: 16 goroutines on 4 clients, each on a key of its own,
//     acquire + release pairs per second;
//   - overhead: the same pairs through the client against the two raw
//     commands (DLOCK.ACQUIRE, DLOCK.RELEASE) through go-redis.
//
// Usage: go run . [-quick] [-out FILE]. The server is redis-server
// (DLOCK_REDIS_SERVER) with DLOCK_MODULE (default
// ../../../target/release/libdlock.so), started on a free port.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

const (
	goroutines = 16
	clients    = 4
	lease      = 8 * time.Second  // redsync's default expiry, used by all
	thinkTime  = time.Millisecond // work outside the lock between two turns
)

// locker is one library's way to take and give back a lock.
type locker interface {
	lock(ctx context.Context, key string) (func() error, error) // waits
	try(ctx context.Context, key string) (func() error, error)  // one attempt
}

type dlockLocker struct{ c *dlock.Client }

func (d dlockLocker) lock(ctx context.Context, key string) (func() error, error) {
	l, err := d.c.Acquire(ctx, key, dlock.TTL(lease))
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (d dlockLocker) try(ctx context.Context, key string) (func() error, error) {
	l, err := d.c.TryAcquire(ctx, key, dlock.TTL(lease))
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

// redsyncLocker uses redsync's defaults: 32 tries, 50-250 ms between them.
type redsyncLocker struct{ rs *redsync.Redsync }

func (r redsyncLocker) lock(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(lease))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error { _, err := m.UnlockContext(context.Background()); return err }, nil
}

func (r redsyncLocker) try(ctx context.Context, key string) (func() error, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(lease))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return func() error { _, err := m.UnlockContext(context.Background()); return err }, nil
}

// redislockLocker retries with the linear back-off of redislock's README
// (100 ms) until ctx is done.
type redislockLocker struct{ c *redislock.Client }

func (r redislockLocker) lock(ctx context.Context, key string) (func() error, error) {
	l, err := r.c.Obtain(ctx, key, lease, &redislock.Options{RetryStrategy: redislock.LinearBackoff(100 * time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

func (r redislockLocker) try(ctx context.Context, key string) (func() error, error) {
	l, err := r.c.Obtain(ctx, key, lease, nil)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(context.Background()) }, nil
}

// rawLocker sends the two commands through go-redis, nothing else.
type rawLocker struct {
	rdb *redis.Client
	n   *atomic.Int64
}

func (r rawLocker) lock(ctx context.Context, key string) (func() error, error) {
	return nil, errors.New("raw: no wait")
}

func (r rawLocker) try(ctx context.Context, key string) (func() error, error) {
	owner := "raw-" + strconv.FormatInt(r.n.Add(1), 10)
	v, err := r.rdb.Do(ctx, "DLOCK.ACQUIRE", key, owner, lease.Milliseconds()).Result()
	if err != nil || v == nil {
		return nil, fmt.Errorf("raw acquire: %v", err)
	}
	return func() error { return r.rdb.Do(context.Background(), "DLOCK.RELEASE", key, owner).Err() }, nil
}

type library struct {
	name string
	make func(rdb *redis.Client) locker
}

var libraries = []library{
	{"dlock", func(rdb *redis.Client) locker { return dlockLocker{dlock.New(rdb)} }},
	{"redsync v4", func(rdb *redis.Client) locker { return redsyncLocker{redsync.New(goredis.NewPool(rdb))} }},
	{"bsm/redislock", func(rdb *redis.Client) locker { return redislockLocker{redislock.New(rdb)} }},
}

type result struct {
	ops      int64
	handoffs int64 // acquisitions by another goroutine than the last holder
	last     int
	failures int64
	waits    []time.Duration
	elapsed  time.Duration
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r result) handoffsPerSec() float64 { return float64(r.handoffs) / r.elapsed.Seconds() }

func (r result) pct(p float64) time.Duration {
	if len(r.waits) == 0 {
		return 0
	}
	w := append([]time.Duration(nil), r.waits...)
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return w[int(p*float64(len(w)-1))]
}

// run drives 16 goroutines on 4 clients for d.
func run(addr string, mk func(*redis.Client) locker, d time.Duration, body func(l locker, g int, stop <-chan struct{}, res *result, mu *sync.Mutex)) result {
	var rdbs []*redis.Client
	var lockers []locker
	for i := 0; i < clients; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: goroutines})
		rdbs = append(rdbs, rdb)
		lockers = append(lockers, mk(rdb))
	}
	defer func() {
		for _, l := range lockers {
			if d, ok := l.(dlockLocker); ok {
				d.c.Close()
			}
		}
		for _, r := range rdbs {
			r.Close()
		}
	}()
	var res result
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lockers[g%clients], g, stop, &res, &mu)
		}()
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// contention: each goroutine takes the lock, gives it back, and works
// outside it for thinkTime before it asks again. A wait still pending when
// the run stops counts with its time so far (a lower bound).
func contention(key string) func(l locker, g int, stop <-chan struct{}, res *result, mu *sync.Mutex) {
	return func(l locker, g int, stop <-chan struct{}, res *result, mu *sync.Mutex) {
		for !stopped(stop) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			go func() {
				select {
				case <-stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			t0 := time.Now()
			unlock, err := l.lock(ctx, key)
			wait := time.Since(t0)
			cancel()
			mu.Lock()
			if err != nil {
				if stopped(stop) {
					res.waits = append(res.waits, wait)
				} else {
					res.failures++
				}
				mu.Unlock()
				continue
			}
			res.ops++
			if res.last != g+1 {
				res.handoffs++
				res.last = g + 1
			}
			res.waits = append(res.waits, wait)
			mu.Unlock()
			_ = unlock()
			time.Sleep(thinkTime)
		}
	}
}

func uncontended(prefix string) func(l locker, g int, stop <-chan struct{}, res *result, mu *sync.Mutex) {
	return func(l locker, g int, stop <-chan struct{}, res *result, mu *sync.Mutex) {
		key := prefix + strconv.Itoa(g)
		var ops, failures int64
		for !stopped(stop) {
			unlock, err := l.try(context.Background(), key)
			if err != nil {
				failures++
				continue
			}
			if unlock() != nil {
				failures++
				continue
			}
			ops++
		}
		mu.Lock()
		res.ops += ops
		res.failures += failures
		mu.Unlock()
	}
}

func main() {
	quick := flag.Bool("quick", false, "short runs, report to a temporary file")
	out := flag.String("out", "", "report file (default docs/benchmarks-go.md, or a temporary file with -quick)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the uncontended dlock run")
	flag.Parse()
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	if *out == "" {
		if *quick {
			*out = filepath.Join(os.TempDir(), "dlock-benchmarks-go.md")
		} else {
			*out = filepath.Join(root, "docs", "benchmarks-go.md")
		}
	}
	contD, pairD := 6*time.Second, 3*time.Second
	if *quick {
		contD, pairD = 700*time.Millisecond, 300*time.Millisecond
	}
	srv, err := startServer(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer srv.stop()
	addr := srv.addr

	var b strings.Builder
	fmt.Fprintf(&b, "# Go client benchmarks\n\nWritten by `make go-bench` (clients/go/bench): the dlock Go client against\n")
	fmt.Fprintf(&b, "redsync v4 (defaults: 32 tries, 50-250 ms apart) and bsm/redislock (the\n")
	fmt.Fprintf(&b, "README's linear back-off of 100 ms), all on go-redis v9, on one redis-server\n")
	fmt.Fprintf(&b, "with the module, in one run. %d goroutines on %d go-redis clients; leases of %v.\n\n", goroutines, clients, lease)
	fmt.Fprintf(&b, "Machine: %d CPUs, %s, %s, load average at the start %s. Server: %s.\n", runtime.NumCPU(), runtime.Version(), runtime.GOARCH, loadAverage(), serverVersion(addr))
	fmt.Fprintf(&b, "The machine is shared with other work: throughput figures move by a\nfactor of two from run to run, so compare libraries within one run.\n\n")

	// contention
	fmt.Fprintf(&b, "## Contention: one key, %v per library\n\n", contD)
	fmt.Fprintf(&b, "Each goroutine takes the lock, releases it and works %v outside it before\nasking again. A hand-off is an acquisition by another goroutine than the\nlast holder; the wait is from the call to the grant, over all acquisitions\n(a wait still pending at the end counts with its time so far).\n\n", thinkTime)
	fmt.Fprintf(&b, "| Library | hand-offs/s | acquisitions/s | p50 wait | p99 wait | failed acquires |\n|---|---|---|---|---|---|\n")
	cont := map[string]result{}
	for _, lib := range libraries {
		r := run(addr, lib.make, contD, contention("bench:contended:"+lib.name))
		cont[lib.name] = r
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %v | %v | %d |\n", lib.name, r.handoffsPerSec(), r.perSec(), r.pct(0.5).Round(time.Microsecond), r.pct(0.99).Round(time.Microsecond), r.failures)
		fmt.Fprintf(os.Stderr, "contention %s: %.0f hand-offs/s, %.0f/s p99 %v failures %d\n", lib.name, r.handoffsPerSec(), r.perSec(), r.pct(0.99), r.failures)
	}
	// uncontended
	fmt.Fprintf(&b, "\n## Uncontended: a key per goroutine, %v per library\n\n", pairD)
	fmt.Fprintf(&b, "| Library | acquire + release pairs/s | failures |\n|---|---|---|\n")
	pairs := map[string]result{}
	for _, lib := range libraries {
		if *profile != "" && lib.name == "dlock" {
			f, _ := os.Create(*profile)
			_ = pprof.StartCPUProfile(f)
		}
		r := run(addr, lib.make, pairD, uncontended("bench:free:"+lib.name+":"))
		if *profile != "" && lib.name == "dlock" {
			pprof.StopCPUProfile()
		}
		pairs[lib.name] = r
		fmt.Fprintf(&b, "| %s | %.0f | %d |\n", lib.name, r.perSec(), r.failures)
		fmt.Fprintf(os.Stderr, "uncontended %s: %.0f/s\n", lib.name, r.perSec())
	}
	// overhead: pairs of runs (raw path, then the client), five of them;
	// the median of the pairs' ratios (the machine is shared, so runs far
	// apart are not comparable)
	var n atomic.Int64
	var ratios []float64
	var raw, client result
	for i := 0; i < 5; i++ {
		r := run(addr, func(rdb *redis.Client) locker { return rawLocker{rdb, &n} }, pairD/3, uncontended("bench:raw:"))
		c := run(addr, libraries[0].make, pairD/3, uncontended("bench:client:"))
		ratios = append(ratios, c.perSec()/r.perSec())
		if raw.elapsed == 0 || r.perSec() > raw.perSec() {
			raw = r
		}
		if client.elapsed == 0 || c.perSec() > client.perSec() {
			client = c
		}
		fmt.Fprintf(os.Stderr, "overhead pair %d: raw %.0f/s client %.0f/s\n", i, r.perSec(), c.perSec())
	}
	sort.Float64s(ratios)
	fmt.Fprintf(&b, "\n## Client overhead\n\nFive pairs of runs of %v each, alternating the raw commands and the client.\n\n", pairD/3)
	fmt.Fprintf(&b, "| Path | best pairs/s |\n|---|---|\n| raw DLOCK.ACQUIRE + DLOCK.RELEASE through go-redis | %.0f |\n| dlock client (TryAcquire + Release) | %.0f |\n\n", raw.perSec(), client.perSec())
	fmt.Fprintf(&b, "Ratio of each pair (client / raw), sorted: ")
	for i, r := range ratios {
		if i > 0 {
			fmt.Fprintf(&b, ", ")
		}
		fmt.Fprintf(&b, "%.2f", r)
	}
	fmt.Fprintf(&b, ".\n")

	// goals
	d := cont["dlock"]
	fmt.Fprintf(&b, "\n## Goals\n\n| Goal | Measured | Met |\n|---|---|---|\n")
	for _, other := range []string{"redsync v4", "bsm/redislock"} {
		o := cont[other]
		ratio := d.handoffsPerSec() / o.handoffsPerSec()
		fmt.Fprintf(&b, "| contended hand-offs/s >= 5x %s | %.1fx | %s |\n", other, ratio, yes(ratio >= 5))
		pr := float64(d.pct(0.99)) / float64(o.pct(0.99))
		fmt.Fprintf(&b, "| contended p99 wait <= 1/10 of %s's | %.3fx (%v vs %v) | %s |\n", other, pr, d.pct(0.99).Round(time.Microsecond), o.pct(0.99).Round(time.Millisecond), yes(pr <= 0.1))
		ur := pairs["dlock"].perSec() / pairs[other].perSec()
		fmt.Fprintf(&b, "| uncontended pairs/s >= 1.0x %s | %.2fx | %s |\n", other, ur, yes(ur >= 1.0))
	}
	or := ratios[len(ratios)/2]
	fmt.Fprintf(&b, "| client pairs/s >= 0.9x the raw commands (median pair) | %.2fx | %s |\n", or, yes(or >= 0.9))
	if *quick {
		fmt.Fprintf(&b, "\n(-quick: short runs, figures only indicative.)\n")
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

func startServer(root string) (*server, error) {
	module := os.Getenv("DLOCK_MODULE")
	if module == "" {
		module = filepath.Join(root, "target", "release", "libdlock.so")
	}
	bin := os.Getenv("DLOCK_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "dlock-go-bench-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "no", "--logfile", "server.log", "--loadmodule", module)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rdb.Ping(context.Background()).Err() == nil {
			return s, nil
		}
	}
	s.stop()
	return nil, fmt.Errorf("%s did not start", bin)
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}

func serverVersion(addr string) string {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, _ := rdb.Info(context.Background(), "server").Result()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return "redis " + v
		}
	}
	return "unknown"
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return "unknown"
	}
	return f[0]
}
