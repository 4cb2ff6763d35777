package robustness

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Fault kinds.
const (
	FaultKill       = "kill"       // kill -9 and restart
	FaultPause      = "pause"      // SIGSTOP longer than the leases, SIGCONT
	FaultClientKill = "clientkill" // CLIENT KILL TYPE normal
	FaultStall      = "stall"      // a holder stops past its lease, then writes
)

// Config is one server configuration with what it promises.
type Config struct {
	Name string
	Args []string
	// StrictMustPass: the full model (nothing acknowledged lost) must
	// accept every history. LossyMustPass: the model in which a crash may
	// forget holds, which still exclude others until their leases end (the
	// grace window's promise), must accept every history.
	StrictMustPass, LossyMustPass bool
	Promise                       string
	// Sentinel: a master, a replica and three Sentinels; a kill fails the
	// master over. Replicas: every acquire waits for a replica (WAIT 1).
	Sentinel, Replicas bool
	// Partition: server and clients in network namespaces; the SIGSTOP
	// fault becomes a network partition (needs root, skipped otherwise).
	Partition bool
	// QueueLost: the queue does not survive the faults (waiters are
	// connection state on one master; a paused old master keeps serving
	// its own): FIFO violations are reported, not failures.
	QueueLost bool
}

var graceArgs = []string{"--dlock.max-lease-ms", "1000", "--dlock.grace-ms", "1000"}

// Configs lists every configuration, strongest first.
var Configs = []Config{
	{Name: "aof-always", Args: []string{"--appendonly", "yes", "--appendfsync", "always"},
		StrictMustPass: true, LossyMustPass: true,
		Promise: "linearizable: nothing acknowledged is lost"},
	{Name: "aof-everysec-grace", Args: append([]string{"--appendonly", "yes", "--appendfsync", "everysec"}, graceArgs...),
		LossyMustPass: true,
		Promise:       "a crash may lose the last second, but no lock is granted while a hold it forgot may still be live"},
	{Name: "none-grace", Args: append([]string{"--appendonly", "no"}, graceArgs...),
		LossyMustPass: true,
		Promise:       "a crash forgets every hold, but no lock is granted while one may still be live"},
	{Name: "aof-everysec", Args: []string{"--appendonly", "yes", "--appendfsync", "everysec"},
		Promise: "none after a crash: acknowledged holds may be lost and granted again (expected violation)"},
	{Name: "none", Args: []string{"--appendonly", "no"},
		Promise: "none after a crash: every hold is lost and granted again at once (expected violation)"},
	{Name: "aof-always-partition", Args: []string{"--appendonly", "yes", "--appendfsync", "always"},
		Partition: true, StrictMustPass: true, LossyMustPass: true,
		Promise: "linearizable across a partition between the clients and the server"},
	{Name: "sentinel-wait-grace", Args: append([]string{"--appendonly", "yes", "--appendfsync", "everysec",
		// A master that lost its replica (a paused old master, resumed
		// after the failover) refuses writes, renewals included.
		"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}, graceArgs...),
		Sentinel: true, Replicas: true, LossyMustPass: true,
		Promise: "a failover may lose unconfirmed grants, but the promoted replica grants nothing while a hold it never saw may still be live"},
	{Name: "sentinel", Args: []string{"--appendonly", "yes", "--appendfsync", "everysec"},
		Sentinel: true, QueueLost: true,
		Promise: "none across a failover: a grant the replica never saw, or one from a paused old master, may be granted again (expected violation)"},
}

// ConfigByName finds a configuration.
func ConfigByName(name string) (Config, bool) {
	for _, c := range Configs {
		if c.Name == name {
			return c, true
		}
	}
	return Config{}, false
}

// Fault is one scheduled fault.
type Fault struct {
	At   time.Duration
	Kind string
	Dur  time.Duration // pause length, restart delay, stall length
}

func (f Fault) String() string {
	return fmt.Sprintf("%s@%.1fs(%dms)", f.Kind, f.At.Seconds(), f.Dur.Milliseconds())
}

// Schedule derives a run's faults from its seed: after a quiet first
// second or so, one every 0.8-1.6 s (plus the pause or the downtime of the
// one before), kinds drawn so that each comes once in every four.
func Schedule(seed int64, d time.Duration) []Fault {
	rng := rand.New(rand.NewSource(seed))
	var out []Fault
	at := time.Duration(700+rng.Intn(500)) * time.Millisecond
	kinds := []string{FaultKill, FaultPause, FaultClientKill, FaultStall}
	var bag []string
	for at < d-1500*time.Millisecond {
		if len(bag) == 0 {
			for _, i := range rng.Perm(len(kinds)) {
				bag = append(bag, kinds[i])
			}
		}
		f := Fault{At: at, Kind: bag[0]}
		bag = bag[1:]
		busy := time.Duration(0)
		switch f.Kind {
		case FaultKill:
			f.Dur = time.Duration(100+rng.Intn(400)) * time.Millisecond
			busy = f.Dur
		case FaultPause:
			f.Dur = time.Duration(1200+rng.Intn(800)) * time.Millisecond // leases are 300-800 ms
			busy = f.Dur
		case FaultStall:
			f.Dur = time.Duration(900+rng.Intn(600)) * time.Millisecond
		}
		out = append(out, f)
		at += busy + time.Duration(800+rng.Intn(800))*time.Millisecond
	}
	return out
}

// Result is one run's outcome.
type Result struct {
	Config         Config
	Seed           int64
	Duration       time.Duration
	Faults         []Fault
	Ops, Unknown   int
	Checked        int // operations given to Porcupine
	Strict, Lossy  porcupine.CheckResult
	Violations     []string // of the rules that must hold
	Expected       []string // violations this configuration is expected to show
	TokenChecks    int
	FIFOChecks     int
	LeftoverChecks int
	StaleWrites    int
	StaleRefused   int
	Files          []string
	History        *History
}

// Failed: a rule this configuration promises was broken (or could not be
// decided).
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Summary is the one-line summary of a run.
func (r *Result) Summary() string {
	kinds := map[string]int{}
	for _, f := range r.Faults {
		kinds[f.Kind]++
	}
	var fk []string
	for _, k := range []string{FaultKill, FaultPause, FaultClientKill, FaultStall} {
		if kinds[k] > 0 {
			fk = append(fk, fmt.Sprintf("%s×%d", k, kinds[k]))
		}
	}
	res := "PASS"
	if r.Failed() {
		res = "FAIL: " + strings.Join(r.Violations, "; ")
	} else if len(r.Expected) > 0 {
		res = "PASS (expected: " + strings.Join(r.Expected, "; ") + ")"
	}
	return fmt.Sprintf("seed=%d config=%s secs=%.0f faults=[%s] ops=%d unknown=%d strict=%s lossy=%s tokens=%d fifo=%d cancelled-waits=%d stale-writes=%d/%d-refused result=%s",
		r.Seed, r.Config.Name, r.Duration.Seconds(), strings.Join(fk, " "), r.Ops, r.Unknown, r.Strict, r.Lossy,
		r.TokenChecks, r.FIFOChecks, r.LeftoverChecks, r.StaleWrites, r.StaleRefused, res)
}

// OutDir is target/robustness.
func OutDir() string { return filepath.Join(repoRoot(), "target", "robustness") }

// Run runs one configuration for d with the faults of seed and checks it.
func Run(cfg Config, seed int64, d time.Duration, clients int, checkTimeout time.Duration) (*Result, error) {
	dir, err := os.MkdirTemp("", "dlock-robustness-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var t target
	if cfg.Partition {
		p, err := startPartitioned(dir, cfg.Args)
		if err != nil {
			return nil, err
		}
		t = p
	} else if cfg.Sentinel {
		g, err := startSentinelGroup(dir, cfg.Args)
		if err != nil {
			return nil, err
		}
		t = g
	} else {
		srv, err := StartServer(dir, cfg.Args...)
		if err != nil {
			return nil, err
		}
		t = &single{srv: srv}
	}
	defer t.stop()
	// Token counters start from the wall clock: persistence, not the clock
	// floor, is what keeps them above the tokens of before a crash.
	faults := Schedule(seed, d)
	rec := NewRecorder()
	store := NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var workers []*worker
	for i := 0; i < clients; i++ {
		w := newWorker(i, t, seed*1000+int64(i), rec, store, cfg.Replicas)
		workers = append(workers, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); sampler(ctx, t, rec) }()
	injectErr := inject(ctx, t, rec, faults, clients, seed, store, cfg.Replicas, &wg)
	wg.Wait()
	for _, w := range workers {
		w.close()
	}
	if err := <-injectErr; err != nil {
		return nil, err
	}
	h := rec.Finish()
	return Check(cfg, seed, d, faults, h, checkTimeout), nil
}

// inject runs the fault schedule; a stalled holder runs on a worker of its
// own.
func inject(ctx context.Context, t target, rec *Recorder, faults []Fault, clients int, seed int64, store *Store, replicas bool, wg *sync.WaitGroup) <-chan error {
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		var err error
		for n, f := range faults {
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(start.Add(f.At))):
			}
			if ctx.Err() != nil {
				break
			}
			switch f.Kind {
			case FaultKill:
				if e := t.kill(rec, f.Dur); e != nil && err == nil {
					err = fmt.Errorf("restart after kill: %w", e)
				}
			case FaultPause:
				t.pause(rec, f.Dur)
			case FaultClientKill:
				t.clientKill(rec)
			case FaultStall:
				w := newWorker(clients+n, t, seed*1000+500+int64(n), rec, store, replicas)
				rec.Event("stalled holder starts")
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer w.close()
					w.stall(context.Background(), f.Dur)
				}()
			}
		}
		errc <- err
	}()
	return errc
}

// prepare turns a history into Porcupine operations: infinite returns for
// unknown outcomes, and without the operations that can neither change
// the model's state nor be refused by it, as etcd's robustness tests drop
// requests that cannot have had an effect: the acquires (null, error or
// unknown) of an owner that never held the lock and could not have (no
// grant, and no unknown acquire followed by more of its requests), an
// error reply, an unknown renewal.
func prepare(h *History) (ops []porcupine.Operation, unknown int) {
	mayHold := map[string]bool{}
	for _, op := range h.Ops {
		k := op.In.Key + "\x00" + op.In.Owner
		if op.Out.Status == Grant {
			mayHold[k] = true
		}
		if op.In.Kind == Acquire && (op.Out.Status == Unknown || op.Out.Status == MaybeGranted) && !op.In.Last {
			mayHold[k] = true
		}
	}
	for _, op := range h.Ops {
		if op.Out.Status == Unknown || op.Out.Status == MaybeGranted {
			unknown++
		}
		irrelevant := op.Out.Status == ErrReply ||
			(op.In.Kind == Renew && op.Out.Status == Unknown) ||
			(op.In.Kind == Acquire && op.Out.Status != Grant && !mayHold[op.In.Key+"\x00"+op.In.Owner])
		if irrelevant {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: op.In.Client, Input: op.In, Call: op.In.Call, Output: op.Out, Return: op.In.Ret})
	}
	return ops, unknown
}

// Check runs every check on a history and writes the files of a failure.
func Check(cfg Config, seed int64, d time.Duration, faults []Fault, h *History, timeout time.Duration) *Result {
	r := &Result{Config: cfg, Seed: seed, Duration: d, Faults: faults, Ops: len(h.Ops), History: h}
	ops, unknown := prepare(h)
	r.Unknown, r.Checked = unknown, len(ops)
	base := fmt.Sprintf("%s-seed%d", cfg.Name, seed)
	_ = os.MkdirAll(OutDir(), 0o755)
	wrote := false
	save := func() {
		if !wrote {
			p := filepath.Join(OutDir(), base+"-history.json")
			if h.Save(p) == nil {
				r.Files = append(r.Files, p)
			}
			wrote = true
		}
	}
	for _, lossy := range []bool{false, true} {
		m := &Model{Lossy: lossy, Crashes: h.Crashes, ClientKills: h.ClientKills}
		pm := m.Porcupine()
		res, info := porcupine.CheckOperationsVerbose(pm, ops, timeout)
		name, must := "strict", cfg.StrictMustPass
		if lossy {
			name, must = "lossy", cfg.LossyMustPass
			r.Lossy = res
		} else {
			r.Strict = res
		}
		if res == porcupine.Ok {
			continue
		}
		var msg string
		if res == porcupine.Illegal {
			msg = fmt.Sprintf("%s model: not linearizable (%s)", name, unexplained(pm, ops, info))
		} else {
			msg = fmt.Sprintf("%s model: undecided within %s", name, timeout)
		}
		if must {
			r.Violations = append(r.Violations, msg)
		} else {
			r.Expected = append(r.Expected, msg)
		}
		if res == porcupine.Illegal {
			p := filepath.Join(OutDir(), base+"-"+name+".html")
			if porcupine.VisualizePath(pm, info, p) == nil {
				r.Files = append(r.Files, p)
			}
		}
		save()
	}
	tv, tn := CheckTokens(h)
	fv, fn := CheckFIFO(h)
	lv, ln := CheckLeftovers(h)
	r.TokenChecks, r.FIFOChecks, r.LeftoverChecks = tn, fn, ln
	r.StaleWrites, r.StaleRefused = h.StaleWrites, h.StaleRefused
	var sv []string
	if h.StaleRefused < h.StaleWrites {
		sv = append(sv, fmt.Sprintf("the fenced store accepted %d late writes of stalled holders after a newer token", h.StaleWrites-h.StaleRefused))
	}
	if cfg.QueueLost && len(fv) > 0 {
		r.Expected = append(r.Expected, fmt.Sprintf("FIFO: %d pairs out of order", len(fv)))
		fv = nil
	}
	for _, v := range [][]string{tv, fv, lv, sv} {
		if len(v) > 0 {
			save()
			sort.Strings(v)
			if len(v) > 3 {
				v = append(v[:3], fmt.Sprintf("and %d more", len(v)-3))
			}
			r.Violations = append(r.Violations, v...)
		}
	}
	return r
}

// unexplained names, per failing key, the earliest-returning operation
// that no longest partial linearization could place.
func unexplained(pm porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := pm.Partition(ops)
	var out []string
	for p, partials := range info.PartialLinearizations() {
		if p >= len(parts) {
			break
		}
		var longest []int
		for _, l := range partials {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(parts[p]) {
			continue
		}
		in := map[int]bool{}
		for _, id := range longest {
			in[id] = true
		}
		best := -1
		for id, op := range parts[p] {
			if !in[id] && (best < 0 || op.Return < parts[p][best].Return) {
				best = id
			}
		}
		if best >= 0 {
			op := parts[p][best]
			i := op.Input.(Input)
			out = append(out, fmt.Sprintf("%s: cannot place %q called at %.3fs", i.Key, describe(i, op.Output.(Output)), sec(op.Call)))
		}
	}
	return strings.Join(out, "; ")
}
