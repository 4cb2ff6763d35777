package main

// The probe (-probe) is scenario 1 alone, for finding out why its figures
// are what they are (docs/benchmarks-consensus.md, "Why the goals were
// missed"): it writes no report, and can run several uncontended parties at
// once (each with its own connection and its own lock: nothing is shared
// but the server, whose fsyncs may then serve several writes) and trace
// each server's system calls while it is measured.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type probeOptions struct {
	parties []int         // the party counts to measure, each in turn
	systems []string      // everysec, always, etcd
	rounds  int           // rounds per party count; the order of systems turns
	d       time.Duration // per round and system
	trace   string        // a tracer run around each measured window, with -p PID appended
	// settle: before each window, wait until the servers' background
	// writes of the previous window are on disk (1.5 s, the time an AOF
	// everysec server takes to fsync its last second, then sync(2)), so
	// that no system's fsyncs queue behind another's.
	settle bool
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// uncontendedParties runs n parties, each on its own connection and its own
// lock, acquiring and releasing for d. With trace set, the tracer attaches
// to pid before the window starts and is stopped (SIGINT) when it ends.
func uncontendedParties(s system, key string, n int, d time.Duration, trace string, pid int) (timing, error) {
	type party struct {
		c conn
		m contender
	}
	var ps []party
	defer func() {
		for _, p := range ps {
			p.m.close()
			p.c.close()
		}
	}()
	for g := 0; g < n; g++ {
		c, err := s.conn()
		if err != nil {
			return timing{}, err
		}
		m, err := c.mutex(fmt.Sprintf("%s/%d", key, g))
		if err != nil {
			c.close()
			return timing{}, err
		}
		ps = append(ps, party{c, m})
		for i := 0; i < 20; i++ { // warm-up
			r, err := m.acquire(context.Background())
			if err != nil {
				return timing{}, err
			}
			_ = r()
		}
	}
	var tracer *exec.Cmd
	if trace != "" {
		f := strings.Fields(trace)
		tracer = exec.Command(f[0], append(f[1:], "-p", strconv.Itoa(pid))...)
		tracer.Stdout, tracer.Stderr = os.Stderr, os.Stderr
		if err := tracer.Start(); err != nil {
			return timing{}, err
		}
		time.Sleep(time.Second) // let it attach
	}
	var mu sync.Mutex
	var t timing
	var wg sync.WaitGroup
	start := time.Now()
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine timing
			for time.Since(start) < d {
				t0 := time.Now()
				r, err := p.m.acquire(context.Background())
				if err != nil {
					mine.errs++
					continue
				}
				if r() != nil {
					mine.errs++
				}
				mine.lat = append(mine.lat, time.Since(t0))
				mine.ops++
			}
			mu.Lock()
			t.merge(mine)
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.elapsed = time.Since(start)
	if tracer != nil {
		_ = tracer.Process.Signal(syscall.SIGINT)
		_ = tracer.Wait()
		fmt.Fprintf(os.Stderr, "traced %s (pid %d): %d pairs in %v\n", s.name(), pid, t.ops, t.elapsed.Round(time.Millisecond))
	}
	return t, nil
}

// probe runs scenario 1 with each party count on the chosen systems and
// prints a table; it writes no report.
func probe(root string, o probeOptions) error {
	var systems []system
	pids := map[string]int{}
	for _, name := range o.systems {
		switch name {
		case "everysec", "always":
			p, err := startRedis(root, name)
			if err != nil {
				return err
			}
			defer p.stop()
			label := map[string]string{"everysec": everysecRow, "always": alwaysRow}[name]
			systems = append(systems, &dlockSystem{label: label, fsync: name, proc: p})
			pids[label] = p.pid()
		case "etcd":
			p, err := startEtcd()
			if err != nil {
				return err
			}
			defer p.stop()
			systems = append(systems, &etcdSystem{proc: p})
			pids["etcd"] = p.pid()
		default:
			return fmt.Errorf("unknown system %q (everysec, always, etcd)", name)
		}
	}
	settled := ""
	if o.settle {
		settled = ", settled before each window (1.5 s, then sync(2))"
	}
	fmt.Printf("Scenario 1 probe: %d round(s) of %v per system and party count%s; load average %s at the start.\n\n", o.rounds, o.d, settled, loadAverage())
	fmt.Printf("| parties | System | pairs/s | p50 (ms) | p99 (ms) | errors |\n|---|---|---|---|---|---|\n")
	for _, n := range o.parties {
		res := map[string]*timing{}
		for r := 0; r < o.rounds; r++ {
			for i := range systems {
				s := systems[(i+r)%len(systems)]
				if o.settle {
					time.Sleep(1500 * time.Millisecond)
					syscall.Sync()
				}
				t, err := uncontendedParties(s, fmt.Sprintf("p%d/%d", n, r), n, o.d, o.trace, pids[s.name()])
				if err != nil {
					return fmt.Errorf("%d parties on %s: %w", n, s.name(), err)
				}
				if res[s.name()] == nil {
					res[s.name()] = &timing{}
				}
				res[s.name()].merge(t)
			}
		}
		for _, s := range systems {
			t := res[s.name()]
			fmt.Printf("| %d | %s | %.0f | %s | %s | %d |\n", n, s.name(), t.rate(), ms(t.pct(0.5)), ms(t.pct(0.99)), t.errs)
		}
	}
	fmt.Printf("\nload average %s at the end.\n", loadAverage())
	return nil
}

// fsyncTest measures fdatasync after small writes (150 bytes, about one
// AOF entry or WAL record) three ways, in blocks that take turns so that
// the shared disk's load falls on each alike: "append" grows the file with
// each write (Redis's AOF: every fdatasync must also write the inode with
// the new size), "prealloc" writes in order into a file fallocate'd to
// 64 MB first (etcd's WAL segments), "overwrite" writes into blocks
// already written (data only). It prints a table.
func fsyncTest(dir string, blocks, per int) error {
	const size = 150
	modes := []string{"append", "prealloc", "overwrite"}
	files := map[string]*os.File{}
	offsets := map[string]int64{}
	lat := map[string][]time.Duration{}
	for _, m := range modes {
		f, err := os.CreateTemp(dir, "dlock-fsync-"+m+"-")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		switch m {
		case "prealloc":
			if err := syscall.Fallocate(int(f.Fd()), 0, 0, 64<<20); err != nil {
				return err
			}
		case "overwrite":
			if _, err := f.Write(make([]byte, blocks*per*size+4096)); err != nil {
				return err
			}
		}
		if err := f.Sync(); err != nil {
			return err
		}
		files[m] = f
	}
	buf := make([]byte, size)
	for b := 0; b < blocks; b++ {
		for i := range modes {
			m := modes[(i+b)%len(modes)]
			f := files[m]
			for j := 0; j < per; j++ {
				t0 := time.Now()
				var err error
				if m == "append" {
					_, err = f.Write(buf)
				} else {
					_, err = f.WriteAt(buf, offsets[m])
				}
				if err == nil {
					err = syscall.Fdatasync(int(f.Fd()))
				}
				if err != nil {
					return err
				}
				offsets[m] += size
				lat[m] = append(lat[m], time.Since(t0))
			}
		}
	}
	fmt.Printf("fdatasync after a %d-byte write in %s, %d blocks of %d per way, taking turns; load average %s at the end.\n\n", size, dir, blocks, per, loadAverage())
	fmt.Printf("| file | calls | mean (ms) | p50 (ms) | p90 (ms) | p99 (ms) | calls >= 2 ms | their share of the time |\n|---|---|---|---|---|---|---|---|\n")
	for _, m := range modes {
		t := timing{lat: lat[m]}
		var sum, big time.Duration
		n := 0
		for _, d := range lat[m] {
			sum += d
			if d >= 2*time.Millisecond {
				big += d
				n++
			}
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s | %.2f %% | %.0f %% |\n", m, len(lat[m]), ms(sum/time.Duration(len(lat[m]))),
			ms(t.pct(0.5)), ms(t.pct(0.9)), ms(t.pct(0.99)), 100*float64(n)/float64(len(lat[m])), 100*float64(big)/float64(sum))
	}
	return nil
}
