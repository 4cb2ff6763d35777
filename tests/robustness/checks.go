package robustness

import (
	"fmt"
	"sort"
)

// The checks that are not linearizability. Each returns its violations
// (empty: the rule held) and how many cases it checked.

// isNewHold: a grant that created a hold (holds 1 and a token; a re-entry
// keeps its token and counts above 1).
func isNewHold(op Op) bool {
	return op.In.Kind == Acquire && op.Out.Status == Grant && op.Out.Holds == 1
}

// CheckTokens: per key, a new hold granted after another was acknowledged
// (its call after the other's return) has a larger token, across restarts
// and failovers. Re-entries are excluded by holds == 1, a renewal or a
// re-entry must repeat the hold's token.
func CheckTokens(h *History) (violations []string, checked int) {
	byKey := map[string][]Op{}
	for _, op := range h.Ops {
		if isNewHold(op) {
			byKey[op.In.Key] = append(byKey[op.In.Key], op)
		}
	}
	for key, grants := range byKey {
		byRet := append([]Op(nil), grants...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].In.Ret < byRet[j].In.Ret })
		byCall := append([]Op(nil), grants...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].In.Call < byCall[j].In.Call })
		// Sweep: for each grant in call order, the largest token among the
		// grants that returned before it was called.
		j := 0
		var maxTok int64
		var maxOwner string
		for _, g := range byCall {
			for j < len(byRet) && byRet[j].In.Ret < g.In.Call {
				if byRet[j].Out.Token > maxTok {
					maxTok, maxOwner = byRet[j].Out.Token, byRet[j].In.Owner
				}
				j++
			}
			if maxTok == 0 {
				continue
			}
			checked++
			if g.Out.Token <= maxTok {
				violations = append(violations, fmt.Sprintf("token went backwards on %s: %s got %d at %.3fs, after %s had got %d",
					key, g.In.Owner, g.Out.Token, sec(g.In.Call), maxOwner, maxTok))
			}
		}
	}
	// Every hold keeps one token: re-entries and renewals repeat it.
	tok := map[string]int64{}
	for _, op := range sortedByCall(h.Ops) {
		k := op.In.Key + "\x00" + op.In.Owner
		var t int64
		switch {
		case op.In.Kind == Acquire && op.Out.Status == Grant:
			if op.Out.Holds == 1 && !op.In.Shared {
				tok[k] = op.Out.Token
				continue
			}
			t = op.Out.Token
		case op.In.Kind == Renew && op.Out.Status == TokenReply:
			t = op.Out.Token
		default:
			continue
		}
		if prev, ok := tok[k]; ok && prev != t && !op.In.Shared {
			checked++
			violations = append(violations, fmt.Sprintf("token of %s on %s changed from %d to %d at %.3fs without a new hold", op.In.Owner, op.In.Key, prev, t, sec(op.In.Call)))
		}
	}
	return violations, checked
}

func sortedByCall(ops []Op) []Op {
	s := append([]Op(nil), ops...)
	SortOps(s)
	return s
}

func sec(ns int64) float64 { return float64(ns) / 1e9 }

// CheckFIFO: a blocked waiter A seen in a key's queue (a DLOCK.INFO
// snapshot taken while A's blocking acquire was in flight) is granted
// before any request B made after that snapshot, unless A left the queue
// without the lock: if both are granted new holds, A's token is smaller
// (tokens increase in grant order).
func CheckFIFO(h *History) (violations []string, checked int) {
	byKeyOwner := map[string][]Op{}
	grantsByKey := map[string][]Op{}
	// An owner's first request on a key: a FAIR reservation made then
	// keeps its place, so only an owner that first asked after the
	// snapshot is certainly behind A.
	first := map[string]int64{}
	for _, op := range h.Ops {
		if op.In.Kind != Acquire {
			continue
		}
		k := op.In.Key + "\x00" + op.In.Owner
		if f, ok := first[k]; !ok || op.In.Call < f {
			first[k] = op.In.Call
		}
	}
	for _, op := range h.Ops {
		if op.In.Kind != Acquire {
			continue
		}
		if op.In.Block {
			byKeyOwner[op.In.Key+"\x00"+op.In.Owner] = append(byKeyOwner[op.In.Key+"\x00"+op.In.Owner], op)
		}
		if isNewHold(op) {
			grantsByKey[op.In.Key] = append(grantsByKey[op.In.Key], op)
		}
	}
	for k := range grantsByKey {
		g := grantsByKey[k]
		sort.Slice(g, func(i, j int) bool { return g[i].In.Call < g[j].In.Call })
	}
	seen := map[[2]int64]bool{}
	for _, s := range h.Snapshots {
		grants := grantsByKey[s.Key]
		for _, owner := range s.Queue {
			for _, a := range byKeyOwner[s.Key+"\x00"+owner] {
				if !(a.In.Call < s.Ret && a.In.Ret > s.Call) || !isNewHold(a) {
					continue
				}
				// Requests made after the snapshot, before A's return.
				i := sort.Search(len(grants), func(i int) bool { return grants[i].In.Call > s.Ret })
				for ; i < len(grants) && grants[i].In.Call < a.In.Ret; i++ {
					b := grants[i]
					pair := [2]int64{a.Out.Token, b.Out.Token}
					if b.In.Owner == a.In.Owner || seen[pair] || first[b.In.Key+"\x00"+b.In.Owner] <= s.Ret {
						continue
					}
					seen[pair] = true
					checked++
					if b.Out.Token < a.Out.Token {
						violations = append(violations, fmt.Sprintf("FIFO on %s: %s was queued at %.3fs (snapshot) but %s, who asked at %.3fs, was granted first (token %d < %d)",
							s.Key, a.In.Owner, sec(s.Call), b.In.Owner, sec(b.In.Call), b.Out.Token, a.Out.Token))
					}
				}
			}
		}
	}
	return violations, checked
}

// CheckLeftovers: after a cancelled wait, its owner is neither queued nor
// holding (unless the grant won the race, which the workload records as a
// grant and does not check here).
//
// Only waits cancelled while the server was up and reachable count: a
// wait cancelled while the server is paused or down cannot be unblocked,
// and a grant made when the server comes back, to a connection the client
// has given up, stays until its lease ends (the client cannot release a
// hold it was never told of when it chose the owner itself).
func CheckLeftovers(h *History) (violations []string, checked int) {
	windows := faultWindows(h)
	for _, l := range h.Leftovers {
		disturbed := false
		for _, w := range windows {
			disturbed = disturbed || (w[0] <= l.At && w[1] >= l.Call)
		}
		if disturbed {
			continue
		}
		checked++
		if l.Queued || l.Holds {
			violations = append(violations, fmt.Sprintf("cancelled wait of %s on %s left %s behind (checked at %.3fs)",
				l.Owner, l.Key, map[bool]string{true: "a waiter", false: "a hold"}[l.Queued], sec(l.At)))
		}
	}
	return violations, checked
}

// faultWindows pairs the fault events into [from, to] windows (a CLIENT
// KILL is an instant).
func faultWindows(h *History) [][2]int64 {
	var out [][2]int64
	open := int64(-1)
	for _, e := range h.Events {
		switch e.What {
		case "kill -9", "SIGSTOP", "partition":
			open = e.At
		case "restarted", "SIGCONT", "healed":
			if open >= 0 {
				out = append(out, [2]int64{open, e.At})
			}
			open = -1
		case "CLIENT KILL TYPE normal":
			out = append(out, [2]int64{e.At, e.At})
		}
	}
	if open >= 0 {
		out = append(out, [2]int64{open, Infinite})
	}
	return out
}
