package robustness

import (
	"encoding/json"
	"math"
	"os"
	"sort"
	"sync"
	"time"
)

// Kind is what an operation did.
type Kind uint8

const (
	// Acquire is DLOCK.ACQUIRE or DLOCK.FAIR, immediate or blocking.
	Acquire Kind = iota + 1
	// Release is DLOCK.RELEASE (raw, or Lock.Release for a SESSION hold).
	Release
	// Renew is DLOCK.RENEW.
	Renew
	// Write is a write to the fenced store, carrying the writer's token.
	Write
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	case Renew:
		return "renew"
	case Write:
		return "write"
	}
	return "?"
}

// Status is the outcome of an operation as the client saw it.
type Status uint8

const (
	// Grant: ACQUIRE replied [token, holds, owner].
	Grant Status = iota + 1
	// Null: ACQUIRE replied null (not granted).
	Null
	// NotOwner: RELEASE or RENEW replied NOTOWNER.
	NotOwner
	// Count: RELEASE replied the holds left (Holds; -1 when the client
	// library did not pass the number on).
	Count
	// TokenReply: RENEW replied the hold's token.
	TokenReply
	// ErrReply: another error reply (LOADING, READONLY, ...): the command
	// did not run.
	ErrReply
	// Unknown: no reply (timeout, lost connection): the command may or may
	// not have run, at any time after its call. Its return time is
	// "infinite" (after everything else in the history).
	Unknown
	// MaybeGranted: a wait that ended by the caller's context (deadline or
	// cancel). The client then unblocked it and released a grant that
	// raced the cancel, but a grant whose reply never came stays: treated
	// as an unknown outcome.
	MaybeGranted
	// MaybeReleased: Lock.Release of a lock the client had already marked
	// lost: the command ran but its answer (count or NOTOWNER) was dropped.
	MaybeReleased
	// Accepted / Refused: the fenced store's answer to a write.
	Accepted
	Refused
)

func (s Status) String() string {
	return [...]string{"?", "grant", "null", "NOTOWNER", "count", "token", "error", "unknown", "maybe-granted", "maybe-released", "accepted", "refused"}[s]
}

// Input is an operation's request, with the times the model needs.
type Input struct {
	Kind    Kind   `json:"kind"`
	Key     string `json:"key"`
	Owner   string `json:"owner"`
	Client  int    `json:"client"`
	Shared  bool   `json:"shared,omitempty"`
	Limit   int64  `json:"limit,omitempty"`
	Weight  int64  `json:"weight,omitempty"`
	TTL     int64  `json:"ttl_ms,omitempty"`
	Block   bool   `json:"block,omitempty"`
	Fair    bool   `json:"fair,omitempty"`
	Session bool   `json:"session,omitempty"`
	Token   int64  `json:"token,omitempty"` // a write's token
	// Last: the owner sends nothing after this operation (filled in after
	// the run); the model may then drop what only this owner could observe.
	Last bool `json:"last,omitempty"`
	// Call and Ret repeat the operation's times (ns from the run's start)
	// for the model's lease arithmetic; Ret is infinite for unknown outcomes.
	Call int64 `json:"call"`
	Ret  int64 `json:"ret"`
}

// Output is an operation's reply.
type Output struct {
	Status Status `json:"status"`
	Token  int64  `json:"token,omitempty"`
	Holds  int64  `json:"holds,omitempty"`
	Err    string `json:"err,omitempty"`
}

// Op is one recorded operation.
type Op struct {
	In  Input  `json:"in"`
	Out Output `json:"out"`
}

// Infinite is the return time of an operation whose outcome is unknown.
const Infinite = math.MaxInt64 / 4

// Snapshot is a DLOCK.INFO reading of one key's queue (for the FIFO check).
type Snapshot struct {
	Key   string   `json:"key"`
	Call  int64    `json:"call"`
	Ret   int64    `json:"ret"`
	Queue []string `json:"queue"`
}

// Event is an injected fault, with its time.
type Event struct {
	At   int64  `json:"at"`
	What string `json:"what"`
}

// Leftover is a check made right after a cancelled wait: the owner must be
// neither queued nor holding.
type Leftover struct {
	Key    string `json:"key"`
	Owner  string `json:"owner"`
	Call   int64  `json:"call"` // the wait's call
	At     int64  `json:"at"`
	Queued bool   `json:"queued"`
	Holds  bool   `json:"holds"`
}

// History is everything a run recorded.
type History struct {
	Start     time.Time  `json:"start"`
	Ops       []Op       `json:"ops"`
	Snapshots []Snapshot `json:"snapshots"`
	Events    []Event    `json:"events"`
	Leftovers []Leftover `json:"leftovers"`
	// Crashes and ClientKills are the times (ns) of server kills and of
	// CLIENT KILLs: the lossy model lets holds be forgotten at a crash,
	// and SESSION holds end at a CLIENT KILL.
	Crashes     []int64 `json:"crashes"`
	ClientKills []int64 `json:"client_kills"`
	// StaleWrites counts the late writes of stalled holders made after a
	// successor wrote with a newer token, and StaleRefused how many the
	// store refused (it must refuse them all).
	StaleWrites  int `json:"stale_writes"`
	StaleRefused int `json:"stale_refused"`
}

// Recorder collects a history from many goroutines.
type Recorder struct {
	mu    sync.Mutex
	start time.Time
	h     History
}

// NewRecorder starts the run's clock.
func NewRecorder() *Recorder {
	now := time.Now()
	return &Recorder{start: now, h: History{Start: now}}
}

// Now is the time since the run started, in ns (monotonic).
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// Begin records a call and returns its index.
func (r *Recorder) Begin(in Input) int {
	in.Call = r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Ops = append(r.h.Ops, Op{In: in})
	return len(r.h.Ops) - 1
}

// End records the reply of operation i.
func (r *Recorder) End(i int, out Output) {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	op := &r.h.Ops[i]
	op.Out = out
	op.In.Ret = now
	if out.Status == Unknown || out.Status == MaybeGranted {
		op.In.Ret = Infinite
	}
}

// CallOf returns operation i's call time.
func (r *Recorder) CallOf(i int) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h.Ops[i].In.Call
}

// Snapshot records a queue reading.
func (r *Recorder) Snapshot(s Snapshot) {
	r.mu.Lock()
	r.h.Snapshots = append(r.h.Snapshots, s)
	r.mu.Unlock()
}

// Event records a fault.
func (r *Recorder) Event(what string) int64 {
	at := r.Now()
	r.mu.Lock()
	r.h.Events = append(r.h.Events, Event{At: at, What: what})
	r.mu.Unlock()
	return at
}

// Crash records a server kill.
func (r *Recorder) Crash(what string) {
	at := r.Event(what)
	r.mu.Lock()
	r.h.Crashes = append(r.h.Crashes, at)
	r.mu.Unlock()
}

// ClientKill records a CLIENT KILL.
func (r *Recorder) ClientKill(what string) {
	at := r.Event(what)
	r.mu.Lock()
	r.h.ClientKills = append(r.h.ClientKills, at)
	r.mu.Unlock()
}

// Leftover records a cancelled-wait check.
func (r *Recorder) Leftover(l Leftover) {
	r.mu.Lock()
	r.h.Leftovers = append(r.h.Leftovers, l)
	r.mu.Unlock()
}

// Stale counts a stalled holder's late write.
func (r *Recorder) Stale(refused bool) {
	r.mu.Lock()
	r.h.StaleWrites++
	if refused {
		r.h.StaleRefused++
	}
	r.mu.Unlock()
}

// Finish returns the history: operations still open are unknown, and each
// owner's last operation is marked.
func (r *Recorder) Finish() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Ops = append([]Op(nil), r.h.Ops...)
	for i := range h.Ops {
		if h.Ops[i].Out.Status == 0 {
			h.Ops[i].Out.Status = Unknown
			h.Ops[i].In.Ret = Infinite
		}
	}
	MarkLast(h.Ops)
	return &h
}

// MarkLast sets Last on each owner's last operation (by call time).
func MarkLast(ops []Op) {
	last := map[string]int{}
	for i := range ops {
		ops[i].In.Last = false
		if ops[i].In.Kind == Write {
			continue
		}
		k := ops[i].In.Key + "\x00" + ops[i].In.Owner
		if j, ok := last[k]; !ok || ops[j].In.Call <= ops[i].In.Call {
			last[k] = i
		}
	}
	for _, i := range last {
		ops[i].In.Last = true
	}
}

// SortOps orders operations by call time.
func SortOps(ops []Op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].In.Call < ops[j].In.Call })
}

// Save writes the history as JSON.
func (h *History) Save(path string) error {
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadHistory reads a saved history.
func LoadHistory(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	return &h, json.Unmarshal(b, &h)
}
