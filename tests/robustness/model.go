package robustness

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The lock model, one partition per key: the lock's holders (exclusive and
// shared counts, weight, token, lease) plus the fenced store's highest
// token, for Porcupine.
//
// Lease time. The model keeps no clock of its own: every input carries its
// call and return times. A hold's deadline is a lower bound of the
// server's: now + ttl - Slack, where now is the largest call time of the
// operations linearized so far (the grant is linearized after all of them,
// so it happened at or after now). Expiry is a step the model may take
// before an operation, for a hold whose deadline is below that
// operation's return time (the latest moment it can be linearized). The
// step is taken lazily, only when the operation's reply needs it (a grant
// to another owner, NOTOWNER to the holder, a fresh token for the holder):
// a hold whose deadline has passed may still be there, so a reply that
// needs it alive is legal too.
//
// Unknown outcomes. An operation with no reply has an infinite return time
// (Porcupine may place it anywhere after its call) and forks the model: it
// ran, or it did not. A branch that only adds a hold for an owner that
// sends nothing afterwards (Input.Last) is dropped: such a hold can only
// refuse grants to others, so the branch without it accepts every history
// the branch with it accepts, and the verdict is the same.
//
// What the model does not judge: a null reply to a request that is not a
// re-entry is always legal (a waiter or a FAIR reservation the model does
// not track may head the queue); FIFO is checked separately (checks.go).

// Slack absorbs the server's millisecond clock (ms truncation, a time
// read once per event-loop turn).
const Slack = int64(20e6)

type holder struct {
	owner    string // "" for a hold forgotten by a crash (lossy model)
	ex, sh   int64
	weight   int64
	token    int64 // 0: unknown
	deadline int64 // lower bound of the lease's end
	created  int64 // call time of the grant
	session  bool
	// retired: its owner sends nothing more (after its Last operation),
	// or a crash made the server forget it.
	retired bool
}

type lockState struct {
	now       int64
	lastToken int64
	storeMax  int64
	holders   []holder // sorted by owner, then deadline
}

func (s *lockState) clone() *lockState {
	c := *s
	c.holders = append([]holder(nil), s.holders...)
	return &c
}

func (s *lockState) sort() {
	sort.Slice(s.holders, func(i, j int) bool {
		a, b := s.holders[i], s.holders[j]
		if a.owner != b.owner {
			return a.owner < b.owner
		}
		return a.deadline < b.deadline
	})
}

func (s *lockState) find(owner string) int {
	for i, h := range s.holders {
		if h.owner == owner && owner != "" {
			return i
		}
	}
	return -1
}

func (s *lockState) remove(i int) {
	s.holders = append(s.holders[:i], s.holders[i+1:]...)
}

func statesEqual(a, b interface{}) bool {
	x, y := a.(*lockState), b.(*lockState)
	if x.now != y.now || x.lastToken != y.lastToken || x.storeMax != y.storeMax || len(x.holders) != len(y.holders) {
		return false
	}
	for i := range x.holders {
		if x.holders[i] != y.holders[i] {
			return false
		}
	}
	return true
}

// Model is the lock model with its fault allowances.
type Model struct {
	// Lossy: a crash may forget holds (persistence off or everysec). A
	// forgotten hold is lost to its owner but, in the model, still excludes
	// others until its lease ends: the promise of the grace window.
	Lossy       bool
	Crashes     []int64
	ClientKills []int64
}

func between(times []int64, after, before int64) bool {
	for _, t := range times {
		if t > after && t < before {
			return true
		}
	}
	return false
}

// removable: the hold may be gone before an operation returning at ret:
// its lease ended, or it is a SESSION hold whose connection a CLIENT KILL
// closed.
func (m *Model) removable(h holder, ret int64) bool {
	if h.deadline < ret {
		return true
	}
	return h.session && between(m.ClientKills, h.created, ret)
}

// forgettable: a crash after the grant may have lost it (lossy model).
func (m *Model) forgettable(h holder, ret int64) bool {
	return m.Lossy && between(m.Crashes, h.created, ret)
}

// lose makes owner's hold i gone for its owner; false when it cannot be.
func (m *Model) lose(s *lockState, i int, ret int64) bool {
	h := s.holders[i]
	if m.removable(h, ret) {
		s.remove(i)
		return true
	}
	if m.forgettable(h, ret) {
		s.holders[i].owner = ""
		s.holders[i].retired = true
		s.sort()
		return true
	}
	return false
}

// clearFor makes room for a new hold of in.Owner: every other hold that
// conflicts must be removable. For a LIMIT request each minimal set of
// removals that makes the weights fit is a branch.
func (m *Model) clearFor(s *lockState, in Input) []*lockState {
	var must, may []int // conflicting holds: not removable / removable
	var fixedWeight int64
	for i, h := range s.holders {
		if h.owner == in.Owner && h.owner != "" {
			continue
		}
		conflict := !in.Shared || h.ex > 0
		if conflict {
			if m.removable(h, in.Ret) {
				may = append(may, i)
			} else {
				must = append(must, i)
			}
		}
	}
	if len(must) > 0 {
		return nil
	}
	if !in.Shared || in.Limit == 0 {
		c := s.clone()
		for j := len(may) - 1; j >= 0; j-- {
			c.remove(may[j])
		}
		return []*lockState{c}
	}
	// LIMIT: exclusive holds of others were in may (removed in every
	// branch); the shared holds of others weigh.
	var sharedIdx []int
	for i, h := range s.holders {
		if h.owner == in.Owner && h.owner != "" || h.ex > 0 {
			continue
		}
		if h.sh > 0 {
			if m.removable(h, in.Ret) {
				sharedIdx = append(sharedIdx, i)
			} else {
				fixedWeight += h.weight
			}
		}
	}
	w := in.Weight
	if w == 0 {
		w = 1
	}
	var movable int64
	for _, i := range sharedIdx {
		movable += s.holders[i].weight
	}
	var out []*lockState
	var fits []uint
	for mask := uint(0); mask < 1<<len(sharedIdx); mask++ {
		left := fixedWeight + movable
		for b, i := range sharedIdx {
			if mask&(1<<b) != 0 {
				left -= s.holders[i].weight
			}
		}
		if left+w > in.Limit {
			continue
		}
		minimal := true
		for _, f := range fits {
			if f&mask == f {
				minimal = false
				break
			}
		}
		if !minimal {
			continue
		}
		fits = append(fits, mask)
		rm := map[int]bool{}
		for _, i := range may {
			rm[i] = true
		}
		for b, i := range sharedIdx {
			if mask&(1<<b) != 0 {
				rm[i] = true
			}
		}
		c := &lockState{now: s.now, lastToken: s.lastToken, storeMax: s.storeMax}
		for i, h := range s.holders {
			if !rm[i] {
				c.holders = append(c.holders, h)
			}
		}
		out = append(out, c)
	}
	return out
}

// newHold grants in.Owner a new hold with token t (0: unknown) in each
// branch where the others allow it.
func (m *Model) newHold(s *lockState, in Input, t int64) []*lockState {
	if t != 0 && t <= s.lastToken {
		return nil // tokens strictly increase
	}
	var out []*lockState
	for _, c := range m.clearFor(s, in) {
		if t != 0 {
			c.lastToken = t
		}
		h := holder{owner: in.Owner, token: t, deadline: c.now + in.TTL*1e6 - Slack, created: in.Call, session: in.Session, weight: 1}
		if in.Shared {
			h.sh = 1
			if in.Weight > 0 {
				h.weight = in.Weight
			}
		} else {
			h.ex = 1
		}
		c.holders = append(c.holders, h)
		c.sort()
		out = append(out, c)
	}
	return out
}

// reentry: in.Owner holds (hold i) and re-enters; holds is the reply's
// count (0: unknown), t its token (0: unknown).
func (m *Model) reentry(s *lockState, i int, in Input, t, holds int64) *lockState {
	h := s.holders[i]
	if !in.Shared && h.ex == 0 {
		return nil // an upgrade takes a new token: not a re-entry
	}
	if h.token != 0 && t != 0 && t != h.token {
		return nil
	}
	n := h.sh + 1
	if !in.Shared {
		n = h.ex + 1
	}
	if holds != 0 && holds != n {
		return nil
	}
	c := s.clone()
	hh := &c.holders[i]
	if in.Shared {
		hh.sh++
	} else {
		hh.ex++
	}
	if hh.token == 0 {
		hh.token = t
	}
	d := c.now + in.TTL*1e6 - Slack
	if in.Last && d > hh.deadline {
		d = hh.deadline // nothing observes it: keep the weaker bound
	}
	hh.deadline = d
	c.sort()
	return c
}

func (m *Model) stepAcquire(s *lockState, in Input, out Output) []*lockState {
	i := s.find(in.Owner)
	var res []*lockState
	switch out.Status {
	case Grant:
		if i >= 0 {
			if c := m.reentry(s, i, in, out.Token, out.Holds); c != nil {
				res = append(res, c)
			}
			// Or the hold ended first and this is a new one.
			if out.Holds == 1 {
				c := s.clone()
				if m.lose(c, i, in.Ret) {
					res = append(res, m.newHold(c, in, out.Token)...)
				}
			}
			// An upgrade (shared to exclusive) takes a new token.
			if !in.Shared && s.holders[i].ex == 0 && out.Holds == 1 && out.Token > s.lastToken {
				c := s.clone()
				c.remove(i)
				for _, n := range m.newHold(c, in, out.Token) {
					j := n.find(in.Owner)
					n.holders[j].sh = s.holders[i].sh
					n.holders[j].weight = s.holders[i].weight
					res = append(res, n)
				}
			}
			return res
		}
		if out.Holds != 1 {
			return nil
		}
		return m.newHold(s, in, out.Token)
	case Null:
		if i >= 0 && (in.Shared || s.holders[i].ex > 0) {
			// A re-entry is never refused: the hold must have ended.
			c := s.clone()
			if m.lose(c, i, in.Ret) {
				return []*lockState{c}
			}
			return nil
		}
		return []*lockState{s}
	case ErrReply:
		return []*lockState{s}
	case Unknown, MaybeGranted:
		res = append(res, s)
		if i >= 0 {
			if c := m.reentry(s, i, in, 0, 0); c != nil && !in.Last {
				res = append(res, c)
			} else if c != nil {
				res[0] = c // only the (possibly shorter) lease matters now
			}
			return res
		}
		if !in.Last {
			res = append(res, m.newHold(s, in, 0)...)
		}
		return res
	}
	return nil
}

// holdsMode: the hold has a live count in the request's mode.
func holdsMode(h holder, shared bool) bool {
	if shared {
		return h.sh > 0
	}
	return h.ex > 0
}

func (m *Model) stepRelease(s *lockState, in Input, out Output) []*lockState {
	i := s.find(in.Owner)
	released := func() *lockState {
		if i < 0 || !holdsMode(s.holders[i], in.Shared) {
			return nil
		}
		c := s.clone()
		h := &c.holders[i]
		if in.Shared {
			h.sh--
		} else {
			h.ex--
		}
		left := h.ex + h.sh
		if out.Status == Count && out.Holds >= 0 && out.Holds != left {
			return nil
		}
		if left == 0 {
			c.remove(i)
		}
		return c
	}
	notOwner := func() *lockState {
		if i < 0 || !holdsMode(s.holders[i], in.Shared) {
			return s
		}
		c := s.clone()
		if m.lose(c, i, in.Ret) {
			return c
		}
		return nil
	}
	var res []*lockState
	add := func(c *lockState) {
		if c != nil {
			res = append(res, c)
		}
	}
	switch out.Status {
	case Count:
		add(released())
	case NotOwner:
		add(notOwner())
	case MaybeReleased:
		add(released())
		add(notOwner())
	case ErrReply:
		add(s)
	case Unknown:
		// Ran or not. Without the hold others may take the lock, so that
		// branch accepts whatever the other does once the owner is silent.
		if c := released(); c != nil {
			add(c)
			if !in.Last {
				add(s)
			}
		} else {
			add(s)
		}
	}
	return res
}

func (m *Model) stepRenew(s *lockState, in Input, out Output) []*lockState {
	i := s.find(in.Owner)
	switch out.Status {
	case TokenReply:
		if i < 0 {
			return nil
		}
		h := s.holders[i]
		if h.token != 0 && h.token != out.Token {
			return nil
		}
		c := s.clone()
		c.holders[i].token = out.Token
		c.holders[i].deadline = c.now + in.TTL*1e6 - Slack
		return []*lockState{c}
	case NotOwner:
		if i < 0 {
			return []*lockState{s}
		}
		c := s.clone()
		if m.lose(c, i, in.Ret) {
			return []*lockState{c}
		}
		return nil
	case ErrReply, Unknown:
		// A renewal that may have run only pushes the deadline later: the
		// branch where it did not run allows everything that one does.
		return []*lockState{s}
	}
	return nil
}

func (m *Model) stepWrite(s *lockState, in Input, out Output) []*lockState {
	switch out.Status {
	case Accepted:
		if in.Token < s.storeMax {
			return nil
		}
		c := s.clone()
		c.storeMax = in.Token
		return []*lockState{c}
	case Refused:
		if in.Token >= s.storeMax {
			return nil
		}
		return []*lockState{s}
	}
	return nil
}

// Step applies one operation; it returns every state the server may be in
// afterwards (none: the reply is impossible).
func (m *Model) Step(state, input, output interface{}) []interface{} {
	s := state.(*lockState)
	in, out := input.(Input), output.(Output)
	if in.Call > s.now {
		s = s.clone()
		s.now = in.Call
	}
	// A retired hold whose lease may have ended before this call is
	// dropped now: it is only seen through grants to others, and every
	// operation placed from here on returns after its deadline, where the
	// model could expire it anyway. Without this, branches that differ
	// only in such holds multiply.
	for _, h := range s.holders {
		if h.retired && h.deadline < in.Call {
			c := &lockState{now: s.now, lastToken: s.lastToken, storeMax: s.storeMax}
			for _, k := range s.holders {
				if !(k.retired && k.deadline < in.Call) {
					c.holders = append(c.holders, k)
				}
			}
			s = c
			break
		}
	}
	var next []*lockState
	switch in.Kind {
	case Acquire:
		next = m.stepAcquire(s, in, out)
	case Release:
		next = m.stepRelease(s, in, out)
	case Renew:
		next = m.stepRenew(s, in, out)
	case Write:
		next = m.stepWrite(s, in, out)
	}
	res := make([]interface{}, len(next))
	for i, n := range next {
		if in.Last && in.Kind != Write {
			if j := n.find(in.Owner); j >= 0 && !n.holders[j].retired {
				if n == s {
					n = n.clone()
				}
				n.holders[j].retired = true
			}
		}
		res[i] = n
	}
	return res
}

// Porcupine returns the model for Porcupine, partitioned by key.
func (m *Model) Porcupine() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(Input).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init:  func() []interface{} { return []interface{}{&lockState{}} },
		Step:  m.Step,
		Equal: statesEqual,
		DescribeOperation: func(input, output interface{}) string {
			return describe(input.(Input), output.(Output))
		},
		DescribeState: func(state interface{}) string {
			s := state.(*lockState)
			var b strings.Builder
			fmt.Fprintf(&b, "store max %d, last token %d; ", s.storeMax, s.lastToken)
			if len(s.holders) == 0 {
				b.WriteString("free")
			}
			for _, h := range s.holders {
				name := h.owner
				if name == "" {
					name = "(forgotten by a crash)"
				}
				fmt.Fprintf(&b, "[%s ex=%d sh=%d w=%d token=%d until>=%.3fs] ", name, h.ex, h.sh, h.weight, h.token, float64(h.deadline)/1e9)
			}
			return b.String()
		},
	}
	return nm.ToModel()
}

func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case Write:
		fmt.Fprintf(&b, "write %s token=%d -> %s", in.Owner, in.Token, out.Status)
		return b.String()
	case Acquire:
		fmt.Fprintf(&b, "acquire %s ttl=%d", in.Owner, in.TTL)
		if in.Shared {
			b.WriteString(" shared")
		}
		if in.Limit > 0 {
			fmt.Fprintf(&b, " limit=%d weight=%d", in.Limit, in.Weight)
		}
		if in.Fair {
			b.WriteString(" fair")
		}
		if in.Block {
			b.WriteString(" block")
		}
		if in.Session {
			b.WriteString(" session")
		}
	case Release:
		fmt.Fprintf(&b, "release %s", in.Owner)
		if in.Shared {
			b.WriteString(" shared")
		}
	case Renew:
		fmt.Fprintf(&b, "renew %s ttl=%d", in.Owner, in.TTL)
	}
	fmt.Fprintf(&b, " -> %s", out.Status)
	switch out.Status {
	case Grant:
		fmt.Fprintf(&b, " token=%d holds=%d", out.Token, out.Holds)
	case Count:
		fmt.Fprintf(&b, " %d", out.Holds)
	case TokenReply:
		fmt.Fprintf(&b, " %d", out.Token)
	case ErrReply:
		fmt.Fprintf(&b, " %s", out.Err)
	}
	return b.String()
}
