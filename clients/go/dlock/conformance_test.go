package dlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// The runner of clients/conformance (its README defines the format): every
// scenario of every file, on a server of its own per kind (restart_server
// restarts it), skipping only the scenarios whose skip list names go.

type scenarioFile struct {
	Area      string     `json:"area"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	Name   string            `json:"name"`
	Skip   map[string]string `json:"skip"`
	Steps  []map[string]any  `json:"steps"`
	Repeat int               `json:"repeat"`
}

// nothing is the "observed" value of an observer before its first observation.
type nothingT struct{}

var nothing = nothingT{}

func loadScenarios(t *testing.T) []scenario {
	dir := filepath.Join(repoRoot(), "clients", "conformance", "scenarios")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s", dir)
	}
	sort.Strings(files)
	var all []scenario
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var sf scenarioFile
		if err := dec.Decode(&sf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(all, sf.Scenarios...)
	}
	return all
}

func TestConformance(t *testing.T) {
	scenarios := loadScenarios(t)
	eachServer(t, func(t *testing.T, s0 *server) {
		s, err := startServer(s0.name, s0.bin)
		if err != nil {
			t.Fatal(err)
		}
		r := &runner{srv: s}
		defer func() { r.reset(); r.closeConns(); r.srv.stop() }()
		run, skipped := 0, 0
		for _, sc := range scenarios {
			if !selected(sc.Name) {
				continue
			}
			if reason, ok := sc.Skip["go"]; ok {
				t.Logf("skip %s: %s", sc.Name, reason)
				skipped++
				continue
			}
			run++
			// repeat: each run with its own FLUSHALL and fresh clients; a
			// race must go the right way every time.
			for i := 0; i < max(sc.Repeat, 1); i++ {
				if err := r.scenario(sc); err != nil {
					t.Errorf("%s (run %d of %d): %v", sc.Name, i+1, max(sc.Repeat, 1), err)
					break
				}
			}
		}
		t.Logf("conformance (%s): %d run, %d skipped", s.name, run, skipped)
		fmt.Printf("conformance (%s): %d run, %d skipped\n", s.name, run, skipped)
	})
}

// selected: whether DLOCK_CONFORMANCE_ONLY, a comma-separated list of name
// prefixes ("stall.,cancel."), takes the scenario; unset, every scenario.
// A subset while developing, and the scenarios make go-test runs on
// today's newest go-redis.
func selected(name string) bool {
	only := os.Getenv("DLOCK_CONFORMANCE_ONLY")
	if only == "" {
		return true
	}
	for _, prefix := range strings.Split(only, ",") {
		if prefix = strings.TrimSpace(prefix); prefix != "" && strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

type task struct {
	done   chan struct{}
	val    any
	err    error
	cancel context.CancelFunc
	took   time.Duration // from the task's start to its end
}

type observation struct {
	mu     sync.Mutex
	latest any
	cancel context.CancelFunc
	done   chan struct{}
}

type runner struct {
	// mu guards the maps that background tasks reach (clients,
	// connections, guards, elections).
	mu        sync.Mutex
	srv       *server
	conns     map[string]*redis.Client
	clients   map[string]*dlock.Client
	rdbs      []*redis.Client
	guards    map[string]*dlock.Lock
	elections map[*dlock.Lock]*dlock.Election
	tasks     map[string]*task
	observers map[string]*observation
	vars      map[string]any
}

func (r *runner) reset() {
	for _, tk := range r.tasks {
		tk.cancel()
		select {
		case <-tk.done:
		case <-time.After(10 * time.Second):
		}
	}
	for _, o := range r.observers {
		o.cancel()
		<-o.done
	}
	for _, c := range r.clients {
		c.Close()
	}
	for _, rdb := range r.rdbs {
		rdb.Close()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clients, r.rdbs = map[string]*dlock.Client{}, nil
	r.guards, r.elections = map[string]*dlock.Lock{}, map[*dlock.Lock]*dlock.Election{}
	r.tasks, r.observers, r.vars = map[string]*task{}, map[string]*observation{}, map[string]any{}
}

func (r *runner) closeConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = map[string]*redis.Client{}
}

func (r *runner) conn(name string) *redis.Client {
	if name == "" {
		name = "admin"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[name]; ok {
		return c
	}
	c := redis.NewClient(&redis.Options{Addr: r.srv.addr, Protocol: 2, MaxRetries: -1, PoolSize: 1, ReadTimeout: 10 * time.Second})
	r.conns[name] = c
	return c
}

func (r *runner) client(name string) *dlock.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[name]; ok {
		return c
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.srv.addr})
	r.rdbs = append(r.rdbs, rdb)
	c := dlock.New(rdb)
	r.clients[name] = c
	return c
}

func (r *runner) scenario(sc scenario) error {
	r.reset()
	if r.conns == nil {
		r.conns = map[string]*redis.Client{}
	}
	if err := r.conn("admin").FlushAll(context.Background()).Err(); err != nil {
		return fmt.Errorf("FLUSHALL: %v", err)
	}
	for i, st := range sc.Steps {
		if err := r.step(st); err != nil {
			b, _ := json.Marshal(st)
			return fmt.Errorf("step %d %s: %v", i, b, err)
		}
	}
	return nil
}

// ---------------------------------------------------------------- values

func str(st map[string]any, k string) string {
	s, _ := st[k].(string)
	return s
}

func num(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case int64:
		return x, true
	case int:
		return int64(x), true
	}
	return 0, false
}

func intField(st map[string]any, k string, def int64) int64 {
	if n, ok := num(st[k]); ok {
		return n
	}
	return def
}

// resolve replaces references ($g.token, $var) in a JSON value.
func (r *runner) resolve(v any) (any, error) {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$$") {
			return x[1:], nil
		}
		if !strings.HasPrefix(x, "$") {
			return x, nil
		}
		parts := strings.Split(x[1:], ".")
		if len(parts) == 1 {
			val, ok := r.vars[parts[0]]
			if !ok {
				return nil, fmt.Errorf("unknown variable %s", x)
			}
			return val, nil
		}
		r.mu.Lock()
		g, ok := r.guards[parts[0]]
		r.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("unknown guard in %s", x)
		}
		switch parts[1] {
		case "token":
			return g.Token(), nil
		case "owner":
			return g.Owner(), nil
		case "tokens":
			toks := g.Tokens()
			if len(parts) == 3 {
				i, err := strconv.Atoi(parts[2])
				if err != nil || i >= len(toks) {
					return nil, fmt.Errorf("bad reference %s", x)
				}
				return toks[i], nil
			}
			out := make([]any, len(toks))
			for i, t := range toks {
				out[i] = t
			}
			return out, nil
		}
		return nil, fmt.Errorf("bad reference %s", x)
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			return nil, fmt.Errorf("not an integer: %s", x)
		}
		return n, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = r.resolve(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			var err error
			if out[k], err = r.resolve(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

// normalize turns a go-redis reply into ints, strings, nil, lists, maps.
func normalize(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case map[any]any:
		out := map[string]any{}
		for k, e := range x {
			out[fmt.Sprint(k)] = normalize(e)
		}
		return out
	case int:
		return int64(x)
	}
	return v
}

func match(want, got any) error {
	switch w := want.(type) {
	case nil:
		if got != nil {
			return fmt.Errorf("got %v, want null", show(got))
		}
		return nil
	case string:
		if w == "nothing" && got == nothing {
			return nil
		}
		if s, ok := got.(string); !ok || s != w {
			return fmt.Errorf("got %v, want %q", show(got), w)
		}
		return nil
	case int64:
		if g, ok := got.(int64); !ok || g != w {
			return fmt.Errorf("got %v, want %d", show(got), w)
		}
		return nil
	case bool:
		if g, ok := got.(bool); !ok || g != w {
			return fmt.Errorf("got %v, want %v", show(got), w)
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("got %v, want a list of %d", show(got), len(w))
		}
		for i := range w {
			if err := match(w[i], g[i]); err != nil {
				return fmt.Errorf("[%d]: %v", i, err)
			}
		}
		return nil
	case map[string]any:
		for op, arg := range w {
			if strings.HasPrefix(op, "~") {
				return matchOp(op, arg, got)
			}
		}
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("got %v, want an object", show(got))
		}
		for k, e := range w {
			v, ok := g[k]
			if !ok {
				return fmt.Errorf("no field %s in %v", k, show(got))
			}
			if err := match(e, v); err != nil {
				return fmt.Errorf("%s: %v", k, err)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown matcher %v", want)
}

func matchOp(op string, arg, got any) error {
	switch op {
	case "~any":
		if got == nothing {
			return errors.New("got nothing")
		}
		return nil
	case "~ne":
		if match(arg, got) == nil {
			return fmt.Errorf("got %v, want anything else", show(got))
		}
		return nil
	case "~in":
		list, _ := arg.([]any)
		for _, a := range list {
			if match(a, got) == nil {
				return nil
			}
		}
		return fmt.Errorf("got %v, want one of %v", show(got), list)
	case "~len":
		n, _ := num(arg)
		switch g := got.(type) {
		case []any:
			if int64(len(g)) == n {
				return nil
			}
		case string:
			if int64(len(g)) == n {
				return nil
			}
		}
		return fmt.Errorf("got %v, want length %d", show(got), n)
	case "~gt", "~ge", "~lt", "~le":
		a, ok1 := num(arg)
		g, ok2 := got.(int64)
		if !ok1 || !ok2 {
			return fmt.Errorf("got %v, want an integer %s %v", show(got), op, arg)
		}
		ok := map[string]bool{"~gt": g > a, "~ge": g >= a, "~lt": g < a, "~le": g <= a}[op]
		if !ok {
			return fmt.Errorf("got %d, want %s %d", g, op, a)
		}
		return nil
	}
	return fmt.Errorf("unknown operator %s", op)
}

func show(v any) string {
	if v == nothing {
		return "nothing"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// errKind maps the client's errors onto the suite's error kinds.
func errKind(err error) string {
	var se *dlock.ServerError
	var ne net.Error
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
		return "busy"
	case errors.Is(err, dlock.ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, dlock.ErrLockLost):
		return "lost"
	case errors.Is(err, dlock.ErrDeadlock):
		return "deadlock"
	case errors.Is(err, dlock.ErrNotOwner):
		return "not_owner"
	case errors.Is(err, dlock.ErrWrongType):
		return "wrongtype"
	case errors.As(err, &se):
		return "server:" + se.Code
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case connectionError(err):
		return "connection"
	}
	return "other: " + err.Error()
}

// connectionError reports go-redis's connection errors: refused, reset or
// closed (a stopped server).
func connectionError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, redis.ErrClosed)
}

// ---------------------------------------------------------------- steps

func (r *runner) step(st0 map[string]any) error {
	// Resolve references now, except in result/error (matched later).
	st := map[string]any{}
	for k, v := range st0 {
		if k == "result" {
			st[k] = v
			continue
		}
		rv, err := r.resolve(v)
		if err != nil {
			return err
		}
		st[k] = rv
	}
	op := str(st, "op")
	if st["background"] == true {
		return r.background(op, st)
	}
	within := time.Duration(intField(st, "within_ms", 0)) * time.Millisecond
	if op == "await" && within == 0 {
		within = 5 * time.Second
	}
	deadline := time.Now().Add(within)
	bound := time.Duration(intField(st, "returns_within_ms", -1)) * time.Millisecond
	for {
		began := time.Now()
		val, err := r.do(op, st, deadline)
		verr := r.check(st0, val, err)
		if verr == nil && bound >= 0 {
			took := time.Since(began)
			if op == "await" {
				took = r.tasks[str(st, "task")].took
			}
			if took > bound {
				verr = fmt.Errorf("returned after %v, want within %v", took.Round(time.Millisecond), bound)
			}
		}
		if verr == nil {
			if name := str(st, "capture"); name != "" {
				r.vars[name] = val
			}
			return nil
		}
		if within == 0 || op == "await" || !readOp(op) || time.Now().After(deadline) {
			return verr
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readOp(op string) bool {
	switch op {
	case "info", "info_dlock", "command", "held", "lost", "leader", "observed", "latch_count":
		return true
	}
	return false
}

// errorKinds is a step's error: one kind or a list of kinds (any of them).
func errorKinds(st0 map[string]any) []string {
	switch e := st0["error"].(type) {
	case string:
		return []string{e}
	case []any:
		kinds := make([]string, 0, len(e))
		for _, k := range e {
			s, _ := k.(string)
			kinds = append(kinds, s)
		}
		return kinds
	}
	return nil
}

// check matches a step's outcome: with both result and error, the step may
// end either way (a stall, where the bound that fires first decides).
func (r *runner) check(st0 map[string]any, val any, err error) error {
	kinds := errorKinds(st0)
	want, hasResult := st0["result"]
	if kinds != nil && (err != nil || !hasResult) {
		if err == nil {
			return fmt.Errorf("succeeded with %v, want error %v", show(val), kinds)
		}
		got := errKind(err)
		for _, k := range kinds {
			if got == k {
				return nil
			}
		}
		return fmt.Errorf("error %s (%v), want %v", got, err, kinds)
	}
	if err != nil {
		return fmt.Errorf("error %s: %v", errKind(err), err)
	}
	ok := hasResult
	if !ok {
		return nil
	}
	rw, rerr := r.resolve(want)
	if rerr != nil {
		return rerr
	}
	return match(rw, val)
}

func (r *runner) background(op string, st map[string]any) error {
	name := str(st, "as")
	ctx, cancel := context.WithCancel(context.Background())
	tk := &task{done: make(chan struct{}), cancel: cancel}
	r.tasks[name] = tk
	go func() {
		defer close(tk.done)
		began := time.Now()
		tk.val, tk.err = r.run(ctx, op, st)
		tk.took = time.Since(began)
	}()
	return nil
}

func (r *runner) do(op string, st map[string]any, deadline time.Time) (any, error) {
	switch op {
	case "await":
		tk, ok := r.tasks[str(st, "task")]
		if !ok {
			return nil, fmt.Errorf("unknown task %s", str(st, "task"))
		}
		select {
		case <-tk.done:
		case <-time.After(time.Until(deadline)):
			return nil, errors.New("task did not finish in time")
		}
		if l, ok := tk.val.(*dlock.Lock); ok && tk.err == nil {
			r.mu.Lock()
			r.guards[str(st, "task")] = l
			r.mu.Unlock()
			return nil, nil
		}
		return tk.val, tk.err
	case "cancel":
		tk, ok := r.tasks[str(st, "task")]
		if !ok {
			return nil, fmt.Errorf("unknown task %s", str(st, "task"))
		}
		// Cancelling a Go task is cancelling its context; a task that got
		// its lock before the cancel took effect drops it, as a dropped
		// future would (nobody awaits it any more).
		tk.cancel()
		<-tk.done
		if l, ok := tk.val.(*dlock.Lock); ok && tk.err == nil {
			_ = l.Release(context.Background())
		}
		return nil, nil
	}
	return r.run(context.Background(), op, st)
}

// run performs one step (also in a background task, under ctx).
func (r *runner) run(ctx context.Context, op string, st map[string]any) (any, error) {
	switch op {
	case "acquire", "campaign":
		ctx, cancel := waitContext(ctx, st)
		defer cancel()
		l, err := r.acquire(ctx, op, st)
		if err != nil {
			return nil, err
		}
		if st["background"] != true {
			r.mu.Lock()
			r.guards[str(st, "as")] = l
			r.mu.Unlock()
			return nil, nil
		}
		return l, nil
	case "release", "resign":
		g, err := r.guard(st)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		e := r.elections[g]
		r.mu.Unlock()
		if e != nil && op == "resign" {
			return nil, e.Resign(context.Background())
		}
		return nil, g.Release(context.Background())
	case "renew":
		g, err := r.guard(st)
		if err != nil {
			return nil, err
		}
		return nil, g.Renew(ctx)
	case "held":
		g, err := r.guard(st)
		if err != nil {
			return nil, err
		}
		return g.Err() == nil, nil
	case "lost":
		g, err := r.guard(st)
		if err != nil {
			return nil, err
		}
		return errors.Is(g.Err(), dlock.ErrLockLost), nil
	case "token":
		g, err := r.guard(st)
		if err != nil {
			return nil, err
		}
		return g.Token(), nil
	case "latch_create":
		ok, err := r.client(str(st, "client")).Latch(str(st, "key")).Init(ctx, intField(st, "count", 1),
			time.Duration(intField(st, "ttl_ms", 0))*time.Millisecond)
		return ok, err
	case "latch_count_down":
		return r.client(str(st, "client")).Latch(str(st, "key")).CountDown(ctx, intField(st, "n", 1))
	case "latch_count":
		n, ok, err := r.client(str(st, "client")).Latch(str(st, "key")).Count(ctx)
		if err != nil || !ok {
			return nil, err
		}
		return n, nil
	case "latch_wait":
		wctx := ctx
		if ms := intField(st, "timeout_ms", 0); ms > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
			defer cancel()
		}
		err := r.client(str(st, "client")).Latch(str(st, "key")).Await(wctx)
		switch {
		case err == nil:
			return "opened", nil
		case errors.Is(err, dlock.ErrLatchBroken):
			return "vanished", nil
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return "timed_out", nil
		}
		return nil, err
	case "leader":
		ld, err := r.client(str(st, "client")).Election(str(st, "key")).Leader(ctx)
		if err != nil {
			return nil, err
		}
		return leaderValue(ld), nil
	case "observe":
		octx, cancel := context.WithCancel(context.Background())
		o := &observation{latest: nothing, cancel: cancel, done: make(chan struct{})}
		ch := r.client(str(st, "client")).Election(str(st, "key")).Observe(octx)
		go func() {
			defer close(o.done)
			for ld := range ch {
				o.mu.Lock()
				o.latest = leaderValue(ld)
				o.mu.Unlock()
			}
		}()
		r.observers[str(st, "as")] = o
		return nil, nil
	case "observed":
		o, ok := r.observers[str(st, "observer")]
		if !ok {
			return nil, fmt.Errorf("unknown observer")
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.latest, nil
	case "stop":
		if o, ok := r.observers[str(st, "observer")]; ok {
			o.cancel()
			<-o.done
		}
		return nil, nil
	case "command":
		args, _ := st["args"].([]any)
		cargs := make([]any, len(args))
		for i, a := range args {
			if n, ok := a.(int64); ok {
				cargs[i] = strconv.FormatInt(n, 10)
			} else {
				cargs[i] = a
			}
		}
		v, err := r.conn(str(st, "conn")).Do(ctx, cargs...).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			var re interface{ RedisError() }
			if errors.As(err, &re) {
				code, _, _ := strings.Cut(err.Error(), " ")
				return nil, &dlock.ServerError{Code: code, Message: err.Error()}
			}
			return nil, err
		}
		return normalize(v), nil
	case "info":
		v, err := r.conn(str(st, "conn")).Do(ctx, "DLOCK.INFO", str(st, "key")).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		list, _ := normalize(v).([]any)
		out := map[string]any{}
		for i := 0; i+1 < len(list); i += 2 {
			out[fmt.Sprint(list[i])] = list[i+1]
		}
		return out, nil
	case "info_dlock":
		s, err := r.conn(str(st, "conn")).Info(ctx, "dlock").Result()
		if err != nil {
			return nil, err
		}
		out := map[string]any{}
		for _, line := range strings.Split(s, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || strings.HasPrefix(k, "#") {
				continue
			}
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[k] = n
			} else {
				out[k] = v
			}
		}
		if f := str(st, "field"); f != "" {
			v, ok := out[f]
			if !ok {
				return nil, fmt.Errorf("INFO dlock has no field %s", f)
			}
			return v, nil
		}
		return out, nil
	case "dlock_calls":
		s, err := r.conn(str(st, "conn")).Info(ctx, "commandstats").Result()
		if err != nil {
			return nil, err
		}
		return dlockCalls(s), nil
	case "restart_server":
		port, _ := strconv.Atoi(r.srv.addr[strings.LastIndexByte(r.srv.addr, ':')+1:])
		r.srv.stop()
		s, err := startServerOn(port, r.srv.name, r.srv.bin)
		if err != nil {
			return nil, err
		}
		r.srv = s
		r.closeConns()
		return nil, nil
	case "pause_server":
		// On a connection of its own, so that no step's connection is the
		// pausing one; CLIENT PAUSE answers at once.
		pauser := redis.NewClient(&redis.Options{Addr: r.srv.addr, Protocol: 2, MaxRetries: -1, PoolSize: 1, ReadTimeout: 10 * time.Second})
		defer pauser.Close()
		return nil, pauser.Do(ctx, "CLIENT", "PAUSE", strconv.FormatInt(intField(st, "ms", 0), 10), "ALL").Err()
	case "stop_server":
		r.srv.stop()
		return nil, nil
	case "start_server":
		port, _ := strconv.Atoi(r.srv.addr[strings.LastIndexByte(r.srv.addr, ':')+1:])
		s, err := startServerOn(port, r.srv.name, r.srv.bin)
		if err != nil {
			return nil, err
		}
		r.srv = s
		r.closeConns()
		return nil, nil
	case "sleep":
		time.Sleep(time.Duration(intField(st, "ms", 0)) * time.Millisecond)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// dlockCalls sums calls and rejected_calls of every cmdstat_dlock.* line
// of INFO commandstats: the DLOCK commands the server received.
func dlockCalls(info string) int64 {
	var total int64
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_dlock.")
		if !ok {
			continue
		}
		_, stats, _ := strings.Cut(rest, ":")
		for _, field := range strings.Split(stats, ",") {
			name, value, _ := strings.Cut(field, "=")
			if name == "calls" || name == "rejected_calls" {
				n, _ := strconv.ParseInt(value, 10, 64)
				total += n
			}
		}
	}
	return total
}

func leaderValue(ld dlock.Leader) any {
	if ld.Term == 0 {
		return nil
	}
	return map[string]any{"identity": ld.Value, "term": ld.Term}
}

func (r *runner) guard(st map[string]any) (*dlock.Lock, error) {
	r.mu.Lock()
	g, ok := r.guards[str(st, "guard")]
	r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown guard %s", str(st, "guard"))
	}
	return g, nil
}

// waitContext bounds a step's wait: wait_ms, wait_forever (the task's
// ctx alone), or none (the step tries once).
func waitContext(ctx context.Context, st map[string]any) (context.Context, context.CancelFunc) {
	if ms := intField(st, "wait_ms", -1); ms >= 0 {
		return context.WithTimeout(ctx, time.Duration(ms)*time.Millisecond)
	}
	return context.WithCancel(ctx)
}

func waits(st map[string]any) bool {
	return st["wait_forever"] == true || intField(st, "wait_ms", -1) >= 0
}

func (r *runner) acquire(ctx context.Context, op string, st map[string]any) (*dlock.Lock, error) {
	c := r.client(str(st, "client"))
	var opts []dlock.AcquireOption
	if ms, ok := num(st["lease_ms"]); ok {
		opts = append(opts, dlock.TTL(time.Duration(ms)*time.Millisecond))
	}
	if st["fair"] == true {
		opts = append(opts, dlock.Fair())
	}
	if st["session"] == true {
		opts = append(opts, dlock.Session())
	}
	if o := str(st, "owner"); o != "" {
		opts = append(opts, dlock.Owner(o))
	}
	wait := waits(st)
	key := str(st, "key")
	if op == "campaign" {
		e := c.Election(key, opts...)
		var l *dlock.Lock
		var err error
		if wait {
			l, err = e.Campaign(ctx, str(st, "identity"))
		} else {
			l, err = e.TryCampaign(ctx, str(st, "identity"))
		}
		if err == nil {
			r.mu.Lock()
			r.elections[l] = e
			r.mu.Unlock()
		}
		return l, err
	}
	switch kind := str(st, "kind"); kind {
	case "", "lock":
		if wait {
			return c.Acquire(ctx, key, opts...)
		}
		return c.TryAcquire(ctx, key, opts...)
	case "read", "write":
		rw := c.RWMutex(key, opts...)
		switch {
		case kind == "read" && wait:
			return rw.RLock(ctx)
		case kind == "read":
			return rw.TryRLock(ctx)
		case wait:
			return rw.Lock(ctx)
		default:
			return rw.TryLock(ctx)
		}
	case "semaphore":
		sem := c.Semaphore(key, intField(st, "limit", 1), opts...)
		if wait {
			return sem.AcquirePermit(ctx, intField(st, "weight", 1))
		}
		return sem.TryAcquirePermit(ctx, intField(st, "weight", 1))
	case "multi":
		raw, _ := st["keys"].([]any)
		keys := make([]string, len(raw))
		for i, k := range raw {
			keys[i], _ = k.(string)
		}
		if wait {
			return c.AcquireMulti(ctx, keys, opts...)
		}
		return c.TryAcquireMulti(ctx, keys, opts...)
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
}
