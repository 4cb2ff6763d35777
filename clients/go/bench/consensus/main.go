// Command consensus measures dlock's Go client beside etcd's concurrency
// package on the same machine, in one run (issue 41): dlock on
// redis-server with AOF everysec and with AOF always, etcd as a
// single-member server with its data in a temporary folder and fsync as
// shipped. The five scenarios run interleaved (each round runs every
// system in turn):
//
//  1. uncontended acquire + release, one client: pairs/s, p50/p99;
//  2. 16 contenders on one lock, 1 ms of work: hand-offs/s, p99 wait,
//     fairness (least and most served contender);
//  3. a read-write lock 90/10 (16 contenders) and a semaphore (32
//     contenders, 8 permits), 1 ms of work: acquisitions/s, p99 wait;
//  4. leader change: the leader is a child process (this program re-run
//     with -candidate) killed with SIGKILL; the time until the follower
//     leads and until an observer sees it, with a 2 s ttl everywhere;
//  5. 10,000 locks held at once: the server's memory per lock.
//
// It writes the etcd section of docs/benchmarks-consensus.md (between
// its markers; the Java bench writes the ZooKeeper section).
//
// Usage: go run ./consensus [-quick] [-out FILE], or -probe (probe.go).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const work = time.Millisecond

// The dlock rows.
const (
	everysecRow = "dlock, AOF everysec"
	alwaysRow   = "dlock, AOF always"
)

// timing is one scenario's figures for one system over all its rounds.
type timing struct {
	ops     int64
	handoff int64
	elapsed time.Duration
	lat     []time.Duration
	perG    []int64       // acquisitions per contender
	held    time.Duration // the holds' total time (the work, as slept)
	errs    int64
	// violations: grants seen while the lock could not grant them (more
	// holders than the limit, a writer beside anyone)
	violations int64
}

func (t *timing) rate() float64        { return float64(t.ops) / t.elapsed.Seconds() }
func (t *timing) handoffRate() float64 { return float64(t.handoff) / t.elapsed.Seconds() }

func (t *timing) pct(p float64) time.Duration {
	if len(t.lat) == 0 {
		return 0
	}
	w := append([]time.Duration(nil), t.lat...)
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return w[int(p*float64(len(w)-1))]
}

func (t *timing) merge(o timing) {
	t.ops += o.ops
	t.handoff += o.handoff
	t.elapsed += o.elapsed
	t.lat = append(t.lat, o.lat...)
	t.errs += o.errs
	t.held += o.held
	t.violations += o.violations
	if t.perG == nil {
		t.perG = make([]int64, len(o.perG))
	}
	for i, n := range o.perG {
		t.perG[i] += n
	}
}

// gap is the mean time per hand-off beyond the hold itself: what the lock
// adds between one holder's release and the next one's grant (the 1 ms of
// work, as slept on this machine, is taken out).
func (t *timing) gap() time.Duration {
	if t.ops == 0 {
		return 0
	}
	return t.elapsed/time.Duration(t.ops) - t.held/time.Duration(t.ops)
}

func (t *timing) fairness() (int64, int64) {
	if len(t.perG) == 0 {
		return 0, 0
	}
	lo, hi := t.perG[0], t.perG[0]
	for _, n := range t.perG {
		lo, hi = min(lo, n), max(hi, n)
	}
	return lo, hi
}

// uncontended: one connection, one party, acquire + release pairs for d.
func uncontended(s system, key string, d time.Duration) (timing, error) {
	c, err := s.conn()
	if err != nil {
		return timing{}, err
	}
	defer c.close()
	m, err := c.mutex(key)
	if err != nil {
		return timing{}, err
	}
	defer m.close()
	var t timing
	for i := 0; i < 20; i++ { // warm-up
		r, err := m.acquire(context.Background())
		if err != nil {
			return t, err
		}
		_ = r()
	}
	start := time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		r, err := m.acquire(context.Background())
		if err != nil {
			t.errs++
			continue
		}
		if r() != nil {
			t.errs++
		}
		t.lat = append(t.lat, time.Since(t0))
		t.ops++
	}
	t.elapsed = time.Since(start)
	return t, nil
}

// contend runs n parties over 4 connections for d: each acquires (timed),
// works 1 ms while holding, releases. Only grants within d count; a party
// waiting at the end finishes its turn (every wait ends: holders release).
//
// limit is how many may hold at once (1: a mutex; 0: a read-write lock,
// whose writers are alone): the harness counts grants beyond it.
func contend(s system, n, limit int, d time.Duration, mk func(c conn, g int) (contender, error)) (timing, error) {
	const conns = 4
	var cs []conn
	var parties []contender
	defer func() {
		for _, p := range parties {
			p.close()
		}
		for _, c := range cs {
			c.close()
		}
	}()
	for i := 0; i < conns; i++ {
		c, err := s.conn()
		if err != nil {
			return timing{}, err
		}
		cs = append(cs, c)
	}
	for g := 0; g < n; g++ {
		p, err := mk(cs[g%conns], g)
		if err != nil {
			return timing{}, err
		}
		parties = append(parties, p)
	}
	var mu sync.Mutex
	t := timing{perG: make([]int64, n)}
	last := -1
	var holders, readers, writers atomic.Int64
	var violations atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
				t0 := time.Now()
				r, err := parties[g].acquire(ctx)
				granted := time.Now()
				cancel()
				if err != nil {
					mu.Lock()
					if t.errs == 0 {
						fmt.Fprintf(os.Stderr, "%s: first failed acquisition: %v\n", s.name(), err)
					}
					t.errs++
					mu.Unlock()
					continue
				}
				reader := parties[g].reader
				switch {
				case limit > 0:
					if holders.Add(1) > int64(limit) {
						violations.Add(1)
					}
				case reader:
					readers.Add(1)
					if writers.Load() > 0 {
						violations.Add(1)
					}
				default:
					if writers.Add(1) > 1 || readers.Load() > 0 {
						violations.Add(1)
					}
				}
				if granted.Before(deadline) {
					mu.Lock()
					t.ops++
					t.perG[g]++
					if last != g {
						t.handoff++
						last = g
					}
					t.lat = append(t.lat, granted.Sub(t0))
					mu.Unlock()
				}
				counted := granted.Before(deadline)
				time.Sleep(work)
				heldFor := time.Since(granted)
				switch {
				case limit > 0:
					holders.Add(-1)
				case reader:
					readers.Add(-1)
				default:
					writers.Add(-1)
				}
				if counted {
					mu.Lock()
					t.held += heldFor
					mu.Unlock()
				}
				_ = r()
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	t.elapsed = d
	t.violations = violations.Load()
	return t, nil
}

// failover: a child process leads the election at key, the follower
// campaigns and an observer watches; the child is killed with SIGKILL;
// returns the times from the kill until the follower leads and until the
// observer sees the follower's value.
func failover(s system, key string) (time.Duration, time.Duration, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.Command(exe, s.candidateArgs(key)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	}()
	led := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "leader" {
				led <- true
				return
			}
		}
		led <- false
	}()
	select {
	case ok := <-led:
		if !ok {
			return 0, 0, fmt.Errorf("%s: the child candidate ended before it led", s.name())
		}
	case <-time.After(20 * time.Second):
		return 0, 0, fmt.Errorf("%s: the child candidate did not lead within 20 s", s.name())
	}
	c, err := s.conn()
	if err != nil {
		return 0, 0, err
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := s.conn()
	if err != nil {
		return 0, 0, err
	}
	defer obs.close()
	seen, err := obs.observe(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	// The observer first sees the child lead.
	for v := range seen {
		if v == "child" {
			break
		}
	}
	type won struct {
		at  time.Time
		rel release
		err error
	}
	follower := make(chan won, 1)
	go func() {
		r, err := c.campaign(ctx, key, "follower")
		follower <- won{time.Now(), r, err}
	}()
	// Let the follower's campaign reach the server's queue (a bench, not a
	// test: a fixed pause before the kill, the same for every system).
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	killed = true
	_ = cmd.Process.Signal(syscall.SIGKILL)
	var observed time.Duration
	for v := range seen {
		if v == "follower" {
			observed = time.Since(t0)
			break
		}
	}
	w := <-follower
	if w.err != nil {
		return 0, 0, fmt.Errorf("%s: follower: %w", s.name(), w.err)
	}
	_ = w.rel()
	if observed == 0 {
		return 0, 0, fmt.Errorf("%s: the observer never saw the follower lead", s.name())
	}
	return w.at.Sub(t0), observed, nil
}

// candidate is the child of scenario 4: it leads, says so and waits to be
// killed.
func candidate(sysName, endpoint, key string, session bool) {
	var c conn
	switch sysName {
	case "dlock":
		d := &dlockSystem{proc: &process{addr: endpoint}, session: session}
		c, _ = d.conn()
	case "etcd":
		e := &etcdSystem{proc: &process{addr: endpoint}}
		var err error
		if c, err = e.conn(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if _, err := c.campaign(context.Background(), key, "child"); err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		os.Exit(1)
	}
	fmt.Println("leader")
	select {}
}

// holdMany takes n locks at once (32 parties) and returns the server's
// memory before and after, then releases them.
func holdMany(s system, n int, extra func() int64) (perLock float64, extraPer float64, err error) {
	c, err := s.conn()
	if err != nil {
		return 0, 0, err
	}
	defer c.close()
	ctx := context.Background()
	// Warm-up: the 32 parties each take and give back a lock first, so the
	// connections (and their buffers on the server) and etcd's session exist
	// before the first measure.
	var warm sync.WaitGroup
	for p := 0; p < 32; p++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			if m, err := c.heldMutex(fmt.Sprintf("many/warm/%d", p)); err == nil {
				if r, err := m.acquire(ctx); err == nil {
					_ = r()
				}
			}
		}()
	}
	warm.Wait()
	runtime.GC()
	before, err := s.memory(ctx)
	if err != nil {
		return 0, 0, err
	}
	var extraBefore int64
	if extra != nil {
		extraBefore = extra()
	}
	var mu sync.Mutex
	var rels []release
	var parties []contender
	var firstErr error
	var next atomic.Int64
	var wg sync.WaitGroup
	for p := 0; p < 32; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				m, err := c.heldMutex(fmt.Sprintf("many/%d", i))
				if err == nil {
					var r release
					if r, err = m.acquire(ctx); err == nil {
						mu.Lock()
						rels = append(rels, r)
						parties = append(parties, m)
						mu.Unlock()
						continue
					}
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	after, _ := s.memory(ctx)
	var extraAfter int64
	if extra != nil {
		extraAfter = extra()
	}
	for i, r := range rels {
		_ = r()
		parties[i].close()
	}
	if firstErr != nil {
		return 0, 0, firstErr
	}
	return float64(after-before) / float64(n), float64(extraAfter-extraBefore) / float64(n), nil
}

func main() {
	quick := flag.Bool("quick", false, "short runs, report to a temporary file")
	out := flag.String("out", "", "report (default docs/benchmarks-consensus.md, or a temporary file with -quick)")
	cand := flag.String("candidate", "", "internal: run as the child candidate of scenario 4 for this system")
	endpoint := flag.String("endpoint", "", "internal: the candidate's server")
	key := flag.String("key", "", "internal: the candidate's election")
	session := flag.Bool("session", false, "internal: the dlock candidate's hold is a SESSION hold")
	probeParties := flag.String("probe", "", "scenario 1 alone with these party counts (e.g. 1,4,16), each party on its own connection and lock; prints a table, writes no report")
	probeSystems := flag.String("probe-systems", "everysec,always,etcd", "the probe's systems")
	probeRounds := flag.Int("probe-rounds", 3, "the probe's rounds per party count")
	probeD := flag.Duration("probe-duration", 2*time.Second, "the probe's time per round and system")
	probeSettle := flag.Bool("probe-settle", false, "before each of the probe's windows, wait 1.5 s and sync(2): no system's fsyncs queue behind the previous window's background writes")
	fsyncBlocks := flag.Int("fsync-test", 0, "measure fdatasync after small writes to an appended, a preallocated and an overwritten file in the temporary folder, in this many blocks of 200 each; prints a table, writes no report")
	probeTrace := flag.String("probe-trace", "", "a tracer run around each of the probe's measured windows with -p PID appended (e.g. 'perf trace -s')")
	flag.Parse()
	if *cand != "" {
		candidate(*cand, *endpoint, *key, *session)
		return
	}
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	if *fsyncBlocks > 0 {
		if err := fsyncTest(os.TempDir(), *fsyncBlocks, 200); err != nil {
			fmt.Fprintln(os.Stderr, "fsync test:", err)
			os.Exit(1)
		}
		return
	}
	if *probeParties != "" {
		parties, err := parseInts(*probeParties)
		if err == nil {
			err = probe(root, probeOptions{parties: parties, systems: strings.Split(*probeSystems, ","),
				rounds: *probeRounds, d: *probeD, trace: *probeTrace, settle: *probeSettle})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "consensus probe:", err)
			os.Exit(1)
		}
		return
	}
	if *out == "" {
		if *quick {
			*out = filepath.Join(os.TempDir(), "dlock-benchmarks-consensus.md")
		} else {
			*out = filepath.Join(root, "docs", "benchmarks-consensus.md")
		}
	}
	if err := run(root, *quick, *out); err != nil {
		fmt.Fprintln(os.Stderr, "consensus bench:", err)
		os.Exit(1)
	}
}

func run(root string, quick bool, out string) error {
	rounds, pairD, contD, failovers, many := 3, 2*time.Second, 3*time.Second, 3, 10000
	if quick {
		rounds, pairD, contD, failovers, many = 1, 200*time.Millisecond, 300*time.Millisecond, 1, 100
	}
	load := loadAverage()
	everysec, err := startRedis(root, "everysec")
	if err != nil {
		return err
	}
	defer everysec.stop()
	// -quick is the harness's test in `make test`: dlock with AOF everysec
	// beside etcd (the AOF always server adds nothing to test).
	var always *process
	if !quick {
		if always, err = startRedis(root, "always"); err != nil {
			return err
		}
		defer always.stop()
	}
	etcd, err := startEtcd()
	if err != nil {
		return err
	}
	defer etcd.stop()
	systems := []system{&dlockSystem{label: everysecRow, fsync: "everysec", proc: everysec}}
	if always != nil {
		systems = append(systems, &dlockSystem{label: alwaysRow, fsync: "always", proc: always})
	}
	systems = append(systems, &etcdSystem{proc: etcd})
	redisV, etcdV := serverVersions(everysec.addr, etcd.addr)
	start := time.Now()

	type scenario struct {
		name string
		run  func(s system, r int) (timing, error)
	}
	scenarios := []scenario{
		{"uncontended", func(s system, r int) (timing, error) {
			return uncontended(s, fmt.Sprintf("u/%d", r), pairD)
		}},
		{"mutex", func(s system, r int) (timing, error) {
			return contend(s, 16, 1, contD, func(c conn, g int) (contender, error) { return c.mutex(fmt.Sprintf("m/%d", r)) })
		}},
		{"rw", func(s system, r int) (timing, error) {
			return contend(s, 16, 0, contD, func(c conn, g int) (contender, error) {
				return c.rw(fmt.Sprintf("rw/%d", r), g%10 != 0)
			})
		}},
		{"semaphore", func(s system, r int) (timing, error) {
			return contend(s, 32, 8, contD, func(c conn, g int) (contender, error) { return c.semaphore(fmt.Sprintf("s/%d", r), 8) })
		}},
	}
	res := map[string]map[string]*timing{}
	for _, sc := range scenarios {
		res[sc.name] = map[string]*timing{}
		for _, s := range systems {
			res[sc.name][s.name()] = &timing{}
		}
		for r := 0; r < rounds; r++ {
			for i := range systems {
				// The order turns each round: no system always runs first.
				s := systems[(i+r)%len(systems)]
				if !quick {
					// Let the previous slot's background writes reach
					// the disk first: the everysec server's last-second
					// fsync (up to 500 ms) would otherwise stall the
					// next system's fsyncs (docs/benchmarks-consensus.md,
					// "Why the goals were missed").
					time.Sleep(1500 * time.Millisecond)
					syscall.Sync()
				}
				t, err := sc.run(s, r)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", sc.name, s.name(), err)
				}
				res[sc.name][s.name()].merge(t)
			}
		}
		for _, s := range systems {
			t := res[sc.name][s.name()]
			fmt.Fprintf(os.Stderr, "%s %s: %.0f/s (hand-offs %.0f/s) p50 %v p99 %v errors %d\n", sc.name, s.name(), t.rate(), t.handoffRate(), t.pct(0.5), t.pct(0.99), t.errs)
		}
	}

	// Scenario 4: dlock with a lease only (as etcd), and with SESSION.
	foSystems := append(append([]system(nil), systems...),
		&dlockSystem{label: everysecRow + ", SESSION hold", fsync: "everysec", proc: everysec, session: true})
	if quick { // a test of the harness: one dlock row beside etcd
		foSystems = systems
	}
	type fo struct{ lead, seen []time.Duration }
	fos := map[string]*fo{}
	for r := 0; r < failovers; r++ {
		for i := range foSystems {
			s := foSystems[(i+r)%len(foSystems)]
			lead, seen, err := failover(s, fmt.Sprintf("election/%d/%d", r, i))
			if err != nil {
				return err
			}
			if fos[s.name()] == nil {
				fos[s.name()] = &fo{}
			}
			fos[s.name()].lead = append(fos[s.name()].lead, lead)
			fos[s.name()].seen = append(fos[s.name()].seen, seen)
			fmt.Fprintf(os.Stderr, "failover %s: leads after %v, observed after %v\n", s.name(), lead, seen)
		}
	}

	// Scenario 5.
	type mem struct{ perLock, extra float64 }
	mems := map[string]mem{}
	for _, s := range systems {
		var extra func() int64
		if e, ok := s.(*etcdSystem); ok {
			extra = func() int64 { return etcdDBInUse(context.Background(), e.proc.addr) }
		}
		if d, ok := s.(*dlockSystem); ok {
			extra = func() int64 { return rss(d.proc.pid()) }
		}
		p, x, err := holdMany(s, many, extra)
		if err != nil {
			return fmt.Errorf("%d locks on %s: %w", many, s.name(), err)
		}
		mems[s.name()] = mem{p, x}
		fmt.Fprintf(os.Stderr, "memory %s: %.0f B/lock (%.0f)\n", s.name(), p, x)
	}
	total := time.Since(start)

	// Report.
	var b strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	w("## dlock beside etcd (Go)\n\n")
	w("Written by `make go-bench` (`clients/go/bench/consensus`%s) in %.0f s: dlock's Go client on redis-server %s with the module,\n", map[bool]string{true: ", -quick: short runs, figures only indicative", false: ""}[quick], total.Seconds(), redisV)
	w("AOF on with `appendfsync everysec` and, as a second server, `appendfsync always`, beside etcd %s (Debian's etcd-server,\n", etcdV)
	w("one member, its data in a temporary folder, fsync as shipped) through go.etcd.io/etcd/client/v3 %s (its `concurrency`\n", etcdClientVersion())
	w("package; the read-write lock is its `experimental/recipes` RWMutex). All three servers run at once on loopback; each\n")
	w("scenario runs %d round(s), every system in turn in each round, the order turning. %d CPUs, %s; load average %s at the\n", rounds, runtime.NumCPU(), runtime.Version(), load)
	w("start, %s at the end (the machine is shared: compare the rows of one run, not runs).\n\n", loadAverage())
	row := func(sc string, s system, extra string) {
		t := res[sc][s.name()]
		w("| %s | %.0f | %s | %s |%s\n", s.name(), t.rate(), ms(t.pct(0.5)), ms(t.pct(0.99)), extra)
	}
	w("### 1. Uncontended acquire + release, one client\n\n%v per round. Latency of one acquire + release pair.\n\n", pairD)
	w("| System | pairs/s | p50 (ms) | p99 (ms) |\n|---|---|---|---|\n")
	for _, s := range systems {
		row("uncontended", s, "")
	}
	w("\n### 2. 16 contenders on one lock, 1 ms of work\n\n16 parties on 4 connections, %v per round; each holds the lock for 1 ms (a sleep). A hand-off is\n", contD)
	w("a grant to another party than the last holder; the wait is from the call to the grant; fairness is the least and\n")
	w("the most acquisitions of one party over the run. etcd: each party has its own session (a `concurrency.Mutex` per session).\n\n")
	w("The 1 ms of work bounds every lock below 1000 hand-offs/s (a 1 ms sleep takes longer on a loaded machine); the\n")
	w("last column takes the holds (as slept) out of the time per hand-off: what the lock itself adds between a release and\n")
	w("the next grant.\n\n")
	w("| System | acquisitions/s | p50 wait (ms) | p99 wait (ms) | hand-offs/s | least / most served | per hand-off beyond the hold (ms) |\n|---|---|---|---|---|---|---|\n")
	for _, s := range systems {
		t := res["mutex"][s.name()]
		lo, hi := t.fairness()
		row("mutex", s, fmt.Sprintf(" %.0f | %d / %d | %s |", t.handoffRate(), lo, hi, ms(t.gap())))
	}
	w("\n### 3. Read-write lock 90/10 and semaphore 32 parties / 8 permits, 1 ms of work\n\n")
	w("Read-write: 16 parties (party g writes when g %% 10 == 0, i.e. 2 writers and 14 readers). Semaphore: 32 parties,\n")
	w("8 permits; dlock `Limit(8)`; etcd: a key per party under a prefix with its session's lease, the first 8 by create\n")
	w("revision hold a permit, a waiter watches the prefix's deletions until fewer than 8 keys older than its own remain\n")
	w("(etcd's Mutex recipe generalised to n holders; the concurrency package has no semaphore).\n\n")
	w("| System | read-write acquisitions/s | p50 wait (ms) | p99 wait (ms) |\n|---|---|---|---|\n")
	for _, s := range systems {
		row("rw", s, "")
	}
	w("\n| System | semaphore acquisitions/s | p50 wait (ms) | p99 wait (ms) |\n|---|---|---|---|\n")
	for _, s := range systems {
		row("semaphore", s, "")
	}
	w("\n### 4. Leader change: the leader's process killed with SIGKILL\n\n")
	w("The leader is a child process (this bench re-run as a candidate) that campaigns first; the follower campaigns in the\n")
	w("bench process, an observer watches (dlock `Election.Observe`, etcd `Election.Observe`); 300 ms later the child gets\n")
	w("SIGKILL. Times from the kill until the follower's campaign returns (it leads) and until the observer reports the\n")
	w("follower's value. ttl %v on every system: dlock `TTL(2s)` renewed by the watchdog, etcd a session with TTL 2. %d kill(s)\n", electionTTL, failovers)
	w("per system; the median and the worst. The SESSION row ties dlock's hold to the leader's connection too (`Session()`):\n")
	w("the kill closes the connection and the server ends the hold at once; it is reported, not judged (etcd's lease has no\n")
	w("such tie).\n\n")
	w("| System | follower leads after (median / max, ms) | observer sees it after (median / max, ms) |\n|---|---|---|\n")
	for _, s := range foSystems {
		f := fos[s.name()]
		w("| %s | %s / %s | %s / %s |\n", s.name(), ms(median(f.lead)), ms(maxOf(f.lead)), ms(median(f.seen)), ms(maxOf(f.seen)))
	}
	w("\n### 5. %d locks held at once\n\n", many)
	w("32 parties take %d distinct locks and hold them; the server's memory before and after, divided by the locks. dlock:\n", many)
	w("`used_memory` from INFO (and the server's resident memory). etcd: the server's resident memory (keys, leases, MVCC\n")
	w("history and Raft log are all in memory) and its database in use (`DbSizeInUse`, bytes on disk that bbolt uses). One\n")
	w("etcd session (one lease) for all the locks.\n\n")
	w("| System | memory per lock (bytes) | other measure per lock (bytes) |\n|---|---|---|\n")
	for _, s := range systems {
		m := mems[s.name()]
		other := fmt.Sprintf("%.0f (resident memory)", m.extra)
		if _, ok := s.(*etcdSystem); ok {
			other = fmt.Sprintf("%.0f (database in use)", m.extra)
		}
		label := "used_memory"
		if _, ok := s.(*etcdSystem); ok {
			label = "resident memory"
		}
		w("| %s | %.0f (%s) | %s |\n", s.name(), m.perLock, label, other)
	}

	// Goals.
	w("\n### Goals (issue 41) against etcd\n\n")
	w("| Goal | dlock, AOF everysec | met | dlock, AOF always | met |\n|---|---|---|---|---|\n")
	et := "etcd"
	rows := []string{everysecRow, alwaysRow}
	judge := func(label, sc string, rate func(*timing) float64, factorEvery, factorAlways float64) {
		o := res[sc][et]
		var cells []string
		for i, f := range []float64{factorEvery, factorAlways} {
			d := res[sc][rows[i]]
			if d == nil {
				cells = append(cells, "not run (-quick) |")
				continue
			}
			rr := rate(d) / rate(o)
			cells = append(cells, fmt.Sprintf("%.1fx | %s", rr, yes(rr >= f)))
		}
		w("| %s >= %gx / %gx etcd's | %s | %s |\n", label, factorEvery, factorAlways, cells[0], cells[1])
		var pc []string
		for i, f := range []float64{factorEvery, factorAlways} {
			d := res[sc][rows[i]]
			if d == nil {
				pc = append(pc, "not run (-quick) |")
				continue
			}
			pr := float64(d.pct(0.99)) / float64(o.pct(0.99))
			pc = append(pc, fmt.Sprintf("%.2fx (%s vs %s ms) | %s", pr, ms(d.pct(0.99)), ms(o.pct(0.99)), yes(pr <= 1/f)))
		}
		w("| %s p99 <= 1/%g / 1/%g of etcd's | %s | %s |\n", label, factorEvery, factorAlways, pc[0], pc[1])
	}
	judge("1. uncontended pairs/s", "uncontended", (*timing).rate, 5, 2)
	judge("2. hand-offs/s", "mutex", (*timing).handoffRate, 5, 2)
	{
		o := res["mutex"][et].gap()
		var gc []string
		for i := 0; i < 2; i++ {
			t := res["mutex"][rows[i]]
			if t == nil {
				gc = append(gc, "not run (-quick) |")
				continue
			}
			d := t.gap()
			gc = append(gc, fmt.Sprintf("%.2fx (%s vs %s ms) | reported", float64(d)/float64(o), ms(d), ms(o)))
		}
		w("| 2. time per hand-off beyond the hold, vs etcd's | %s | %s |\n", gc[0], gc[1])
	}
	var fc []string
	for i := 0; i < 2; i++ {
		if fos[rows[i]] == nil {
			fc = append(fc, "not run (-quick) |")
			continue
		}
		d := median(fos[rows[i]].lead)
		o := median(fos[et].lead)
		rr := float64(d) / float64(o)
		fc = append(fc, fmt.Sprintf("%.2fx (%s vs %s ms) | %s", rr, ms(d), ms(o), yes(rr <= 1)))
	}
	w("| 4. failover time (median) <= 1x etcd's at ttl 2 s | %s | %s |\n", fc[0], fc[1])
	w("| 5. memory per lock | reported | | reported | |\n")
	var errs []string
	for _, sc := range scenarios {
		for _, s := range systems {
			if n := res[sc.name][s.name()].errs; n > 0 {
				errs = append(errs, fmt.Sprintf("%s on %s: %d", sc.name, s.name(), n))
			}
		}
	}
	var violations int64
	for _, sc := range scenarios {
		for _, s := range systems {
			violations += res[sc.name][s.name()].violations
		}
	}
	if len(errs) > 0 {
		w("\nFailed acquisitions: %s.", strings.Join(errs, "; "))
	} else {
		w("\nNo acquisition failed.")
	}
	w(" Exclusion checked by the harness in scenarios 2 and 3 (one holder of the mutex, at most 8 of the semaphore, a\n")
	w("writer alone): %d violations.\n", violations)
	if err := writeSection(out, "etcd", b.String()); err != nil {
		return err
	}
	// -quick is the harness's test in `make test`: a failed acquisition or
	// a broken exclusion fails it (a full run reports them).
	if bad := int64(len(errs)) + violations; quick && bad > 0 {
		return fmt.Errorf("failed acquisitions (%s) or %d exclusion violations", strings.Join(errs, "; "), violations)
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	w := append([]time.Duration(nil), ds...)
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return w[len(w)/2]
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
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

// etcdClientVersion is the version of go.etcd.io/etcd/client/v3 built in.
func etcdClientVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/etcd/client/v3" {
				return d.Version
			}
		}
	}
	return "unknown"
}
