package robustness

import (
	"strings"
	"testing"
	"time"
)

// The checker must report faults planted in a recorded history: two
// overlapping holders, a token that goes backwards, a lost acknowledged
// release. The history is a real run (no faults, so it passes untouched);
// each plant edits a copy, and each must be reported by the check named.

func cloneHistory(h *History) *History {
	c := *h
	c.Ops = append([]Op(nil), h.Ops...)
	return &c
}

func isExclusiveKey(k string) bool { return strings.HasPrefix(k, "x:") }

// nextOf returns the index of owner's next operation on key after op i
// (by call time), or -1.
func nextOf(ops []Op, i int) int {
	best := -1
	for j, op := range ops {
		if j == i || op.In.Kind == Write || op.In.Key != ops[i].In.Key || op.In.Owner != ops[i].In.Owner || op.In.Call <= ops[i].In.Call {
			continue
		}
		if best < 0 || op.In.Call < ops[best].In.Call {
			best = j
		}
	}
	return best
}

// plantOverlap grants the lock to a planted owner while an acknowledged
// holder certainly still holds it, with a token that fits the order.
func plantOverlap(t *testing.T, h *History) *History {
	c := cloneHistory(h)
	for i, g := range c.Ops {
		if !isNewHold(g) || !isExclusiveKey(g.In.Key) {
			continue
		}
		n := nextOf(c.Ops, i)
		if n < 0 || c.Ops[n].In.Kind != Release || c.Ops[n].Out.Status != Count {
			continue
		}
		end := c.Ops[n].In.Call
		if d := g.In.Call + g.In.TTL*1e6 - Slack; d < end {
			end = d
		}
		if end-g.In.Ret < 4e6 {
			continue
		}
		// The next token granted on this key must leave room.
		next := int64(0)
		for _, o := range c.Ops {
			if isNewHold(o) && o.In.Key == g.In.Key && o.Out.Token > g.Out.Token && (next == 0 || o.Out.Token < next) {
				next = o.Out.Token
			}
		}
		if next != 0 && next <= g.Out.Token+1 {
			continue
		}
		call := g.In.Ret + 1e6
		c.Ops = append(c.Ops, Op{
			In:  Input{Kind: Acquire, Key: g.In.Key, Owner: "planted-intruder", Client: 999, TTL: g.In.TTL, Call: call, Ret: call + 1e6},
			Out: Output{Status: Grant, Token: g.Out.Token + 1, Holds: 1},
		})
		MarkLast(c.Ops)
		return c
	}
	t.Fatal("no grant followed by an acknowledged release to plant an overlap in")
	return nil
}

// plantBackwardToken gives a later hold a token below an earlier one's
// (and the same token to its renewals, re-entries and writes).
func plantBackwardToken(t *testing.T, h *History) *History {
	c := cloneHistory(h)
	for i, a := range c.Ops {
		if !isNewHold(a) {
			continue
		}
		for j, b := range c.Ops {
			if !isNewHold(b) || b.In.Key != a.In.Key || b.In.Call <= a.In.Ret+1e6 || b.In.Owner == a.In.Owner {
				continue
			}
			old, bad := b.Out.Token, a.Out.Token-1
			for k := range c.Ops {
				o := &c.Ops[k]
				if o.In.Key == b.In.Key && o.In.Owner == b.In.Owner {
					if o.Out.Token == old {
						o.Out.Token = bad
					}
					if o.In.Token == old {
						o.In.Token = bad
					}
				}
			}
			_ = i
			_ = j
			return c
		}
	}
	t.Fatal("no two successive grants on one key")
	return nil
}

// plantLostRelease: after an acknowledged last release, the server still
// renews the hold, as if the release had been lost.
func plantLostRelease(t *testing.T, h *History) *History {
	c := cloneHistory(h)
	for _, r := range c.Ops {
		if r.In.Kind != Release || r.Out.Status != Count || r.Out.Holds != 0 {
			continue
		}
		var tok int64
		for _, g := range c.Ops {
			if g.In.Owner == r.In.Owner && g.In.Key == r.In.Key && g.Out.Status == Grant {
				tok = g.Out.Token
			}
		}
		call := r.In.Ret + 1e6
		c.Ops = append(c.Ops, Op{
			In:  Input{Kind: Renew, Key: r.In.Key, Owner: r.In.Owner, Client: r.In.Client, Shared: r.In.Shared, TTL: r.In.TTL, Call: call, Ret: call + 1e6},
			Out: Output{Status: TokenReply, Token: tok},
		})
		MarkLast(c.Ops)
		return c
	}
	t.Fatal("no acknowledged release")
	return nil
}

// plantBarging: a DLOCK.INFO snapshot shows a blocked waiter queued, and a
// request made after it is granted before the waiter (a smaller token).
func plantBarging(t *testing.T, h *History) *History {
	c := cloneHistory(h)
	for _, a := range c.Ops {
		if !isNewHold(a) || !a.In.Block || a.In.Ret-a.In.Call < 10e6 {
			continue
		}
		c.Snapshots = append(append([]Snapshot(nil), c.Snapshots...), Snapshot{Key: a.In.Key, Call: a.In.Call + 1e6, Ret: a.In.Call + 2e6, Queue: []string{a.In.Owner}})
		call := a.In.Call + 3e6
		c.Ops = append(c.Ops, Op{
			In:  Input{Kind: Acquire, Key: a.In.Key, Owner: "planted-barger", Client: 998, Shared: a.In.Shared, Limit: a.In.Limit, Weight: a.In.Weight, TTL: 10, Call: call, Ret: call + 1e6},
			Out: Output{Status: Grant, Token: a.Out.Token - 1, Holds: 1},
		})
		MarkLast(c.Ops)
		return c
	}
	t.Fatal("no granted blocking wait")
	return nil
}

// plantLeftover: the check after a cancelled wait found its owner holding.
func plantLeftover(t *testing.T, h *History) *History {
	c := cloneHistory(h)
	c.Leftovers = append(append([]Leftover(nil), c.Leftovers...), Leftover{Key: "x:0", Owner: "planted-leftover", Call: 1, At: 2, Holds: true})
	return c
}

func TestSelfTestPlantedFaults(t *testing.T) {
	cfg, _ := ConfigByName("aof-always")
	r, err := Run(cfg, 1, 3*time.Second, 16, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("recorded:", r.Summary())
	if r.Failed() || r.Strict != "Ok" || r.Lossy != "Ok" {
		t.Fatalf("the untouched history must pass: %s", r.Summary())
	}
	h := r.History
	cases := []struct {
		name   string
		plant  func(*testing.T, *History) *History
		report func(*Result) bool
		want   string
	}{
		{"two overlapping holders", plantOverlap, func(r *Result) bool { return r.Strict == "Illegal" && r.Lossy == "Illegal" && r.TokenChecks > 0 }, "both models not linearizable"},
		{"a token that goes backwards", plantBackwardToken, func(r *Result) bool {
			return r.Strict == "Illegal" && strings.Contains(strings.Join(r.Violations, ";"), "token went backwards")
		}, "token check and strict model"},
		{"a lost acknowledged release", plantLostRelease, func(r *Result) bool { return r.Strict == "Illegal" }, "strict model not linearizable"},
		{"a request granted past a queued waiter", plantBarging, func(r *Result) bool {
			return strings.Contains(strings.Join(r.Violations, ";"), "FIFO on")
		}, "FIFO check"},
		{"a hold left by a cancelled wait", plantLeftover, func(r *Result) bool {
			return strings.Contains(strings.Join(r.Violations, ";"), "left a hold behind")
		}, "cancelled-wait check"},
	}
	for _, c := range cases {
		planted := c.plant(t, h)
		pr := Check(Config{Name: "selftest-" + strings.ReplaceAll(c.name, " ", "-"), StrictMustPass: true, LossyMustPass: true}, 1, r.Duration, nil, planted, time.Minute)
		t.Logf("%s: %s", c.name, pr.Summary())
		if !pr.Failed() || !c.report(pr) {
			t.Errorf("planted fault %q not reported (want %s): %s", c.name, c.want, pr.Summary())
		}
		html := false
		for _, f := range pr.Files {
			html = html || strings.HasSuffix(f, ".html")
		}
		if !html && pr.Strict == "Illegal" {
			t.Errorf("planted fault %q: no HTML visualization written (%v)", c.name, pr.Files)
		}
	}
}
