package robustness

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestRobustness runs configurations × seeds (environment:
// DLOCK_ROBUSTNESS_CONFIGS, a comma list or "all", default
// aof-always,none-grace; DLOCK_ROBUSTNESS_SEEDS, how many random seeds,
// default 3, or DLOCK_ROBUSTNESS_SEED=s1,s2 to replay; DLOCK_ROBUSTNESS_SECS
// per run, default 8; DLOCK_ROBUSTNESS_CLIENTS, default 16). It prints a
// summary line per run and a table, and fails when a configuration broke a
// rule it promises.
func TestRobustness(t *testing.T) {
	names := os.Getenv("DLOCK_ROBUSTNESS_CONFIGS")
	if names == "" {
		names = "aof-always,none-grace"
	}
	var cfgs []Config
	if names == "all" {
		cfgs = Configs
	} else {
		for _, n := range strings.Split(names, ",") {
			c, ok := ConfigByName(strings.TrimSpace(n))
			if !ok {
				t.Fatalf("unknown configuration %q", n)
			}
			cfgs = append(cfgs, c)
		}
	}
	var seeds []int64
	if s := os.Getenv("DLOCK_ROBUSTNESS_SEED"); s != "" {
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("bad seed %q", f)
			}
			seeds = append(seeds, v)
		}
	} else {
		rng := rand.New(rand.NewSource(time.Now().UnixNano()))
		for i := 0; i < envInt("DLOCK_ROBUSTNESS_SEEDS", 3); i++ {
			seeds = append(seeds, rng.Int63n(1e9))
		}
	}
	secs := envInt("DLOCK_ROBUSTNESS_SECS", 8)
	clients := envInt("DLOCK_ROBUSTNESS_CLIENTS", 16)
	timeout := time.Duration(envInt("DLOCK_ROBUSTNESS_CHECK_SECS", 60)) * time.Second
	var results []*Result
	for _, cfg := range cfgs {
		if cfg.Partition {
			if why := NetUnavailable(); why != "" {
				fmt.Printf("robustness: config %s SKIPPED: %s\n", cfg.Name, why)
				continue
			}
		}
		for _, seed := range seeds {
			r, err := Run(cfg, seed, time.Duration(secs)*time.Second, clients, timeout)
			if err != nil {
				t.Fatalf("config %s seed %d: %v", cfg.Name, seed, err)
			}
			results = append(results, r)
			fmt.Println("robustness:", r.Summary())
			for _, f := range r.Files {
				fmt.Println("robustness:   wrote", f)
			}
			if r.Failed() {
				t.Errorf("config %s seed %d broke its promise (%s): %s\nreplay: DLOCK_ROBUSTNESS_CONFIGS=%s DLOCK_ROBUSTNESS_SEED=%d DLOCK_ROBUSTNESS_SECS=%d make robustness",
					cfg.Name, seed, cfg.Promise, strings.Join(r.Violations, "; "), cfg.Name, seed, secs)
			}
		}
	}
	table := Table(results)
	fmt.Print(table)
	if p := os.Getenv("DLOCK_ROBUSTNESS_RESULTS"); p != "" {
		if err := os.WriteFile(p, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// Table sums the runs per configuration as a Markdown table.
func Table(results []*Result) string {
	type row struct {
		cfg                                                   Config
		runs, secs, ops, checked, unknown, faults             int
		kills, pauses, clientKills, stalls                    int
		strictBad, lossyBad, tok, fifo, left, stale, staleRef int
		broken                                                int
	}
	var order []string
	rows := map[string]*row{}
	for _, r := range results {
		w, ok := rows[r.Config.Name]
		if !ok {
			w = &row{cfg: r.Config}
			rows[r.Config.Name] = w
			order = append(order, r.Config.Name)
		}
		w.runs++
		w.secs += int(r.Duration.Seconds())
		w.ops += r.Ops
		w.checked += r.Checked
		w.unknown += r.Unknown
		w.faults += len(r.Faults)
		for _, f := range r.Faults {
			switch f.Kind {
			case FaultKill:
				w.kills++
			case FaultPause:
				w.pauses++
			case FaultClientKill:
				w.clientKills++
			case FaultStall:
				w.stalls++
			}
		}
		if r.Strict != "Ok" {
			w.strictBad++
		}
		if r.Lossy != "Ok" {
			w.lossyBad++
		}
		w.tok += r.TokenChecks
		w.fifo += r.FIFOChecks
		w.left += r.LeftoverChecks
		w.stale += r.StaleWrites
		w.staleRef += r.StaleRefused
		if r.Failed() {
			w.broken++
		}
	}
	var b strings.Builder
	b.WriteString("| configuration | promise | runs | seconds | operations (checked by Porcupine) | unknown outcomes | faults: kill -9 / SIGSTOP or partition / CLIENT KILL / stalled holder | strict model: runs not linearizable | lossy model: runs not linearizable | token / FIFO / cancelled-wait checks | stale writes refused | result |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, n := range order {
		w := rows[n]
		res := "pass"
		if w.broken > 0 {
			res = fmt.Sprintf("**FAIL** (%d runs)", w.broken)
		} else if (!w.cfg.StrictMustPass && w.strictBad > 0) || (!w.cfg.LossyMustPass && w.lossyBad > 0) {
			res = "pass; violation found as expected"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d (%d) | %d | %d / %d / %d / %d | %d%s | %d%s | %d / %d / %d | %d of %d | %s |\n",
			n, w.cfg.Promise, w.runs, w.secs, w.ops, w.checked, w.unknown, w.kills, w.pauses, w.clientKills, w.stalls,
			w.strictBad, mustNote(w.cfg.StrictMustPass), w.lossyBad, mustNote(w.cfg.LossyMustPass), w.tok, w.fifo, w.left, w.staleRef, w.stale, res)
	}
	return b.String()
}

func mustNote(must bool) string {
	if must {
		return " (must be 0)"
	}
	return " (reported)"
}

// TestRecheckHistory checks a saved history again
// (DLOCK_ROBUSTNESS_HISTORY=target/robustness/<config>-seed<seed>-history.json,
// DLOCK_ROBUSTNESS_CONFIGS=<its configuration>).
func TestRecheckHistory(t *testing.T) {
	p := os.Getenv("DLOCK_ROBUSTNESS_HISTORY")
	if p == "" {
		t.Skip("DLOCK_ROBUSTNESS_HISTORY not set")
	}
	h, err := LoadHistory(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg, ok := ConfigByName(os.Getenv("DLOCK_ROBUSTNESS_CONFIGS"))
	if !ok {
		t.Fatal("set DLOCK_ROBUSTNESS_CONFIGS to the history's configuration")
	}
	r := Check(cfg, 0, 0, nil, h, time.Duration(envInt("DLOCK_ROBUSTNESS_CHECK_SECS", 60))*time.Second)
	fmt.Println("robustness:", r.Summary())
	if r.Failed() {
		t.Error(strings.Join(r.Violations, "; "))
	}
}
