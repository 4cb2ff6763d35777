package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ownerSeparator separates a campaign's value from its unique id in the
// owner string `<value>#<32 hex>`, the same in every dlock client.
const ownerSeparator = "#"

// electionOwner is the owner string of a campaign announcing value.
func electionOwner(value string) string {
	return value + ownerSeparator + strings.ReplaceAll(newOwner(), "-", "")
}

// ElectionValue returns the value a leader announced: its owner up to the
// last '#', or the whole owner when it has none (a hold taken outside an
// election).
func ElectionValue(owner string) string {
	if i := strings.LastIndex(owner, ownerSeparator); i >= 0 {
		return owner[:i]
	}
	return owner
}

// Leader is who leads an election: the value it announced, its owner
// string and its term (the fencing token of its hold). The zero Leader
// (Term 0) means nobody leads.
type Leader struct {
	Value string
	Owner string
	Term  int64
}

// Election is leader election on an exclusive lock, as etcd's concurrency
// package does it: the leader is whoever holds the key; a campaign waits in
// the lock's FIFO queue; the watchdog renews the leader's lease; followers
// learn each change from DLOCK.WATCH, which the server answers the moment
// the key's newest hold changes, without polling.
//
// A leader must stop acting as leader as soon as its Lock's Context is
// done, and pass its term (Lock.Token) to whatever it writes, so that a
// resource refuses the writes of a deposed leader that has not noticed.
type Election struct {
	c    *Client
	key  string
	opts []AcquireOption

	mu   sync.Mutex
	lead *Lock
}

// Election returns the election at key; opts apply to campaigns (TTL, Session).
func (c *Client) Election(key string, opts ...AcquireOption) *Election {
	return &Election{c: c, key: key, opts: opts}
}

// Key returns the election's key.
func (e *Election) Key() string { return e.key }

// Campaign waits until this candidate leads, announcing value (1 to 479
// bytes), or ctx is done. The Lock it returns is the leadership: its Token
// is the term, its Context is cancelled when leadership is lost.
func (e *Election) Campaign(ctx context.Context, value string) (*Lock, error) {
	return e.campaign(ctx, value, true)
}

// TryCampaign leads only if nobody leads or waits now (ErrNotAcquired
// otherwise).
func (e *Election) TryCampaign(ctx context.Context, value string) (*Lock, error) {
	return e.campaign(ctx, value, false)
}

func (e *Election) campaign(ctx context.Context, value string, wait bool) (*Lock, error) {
	if value == "" || len(value) > 479 {
		return nil, fmt.Errorf("%w: an election value is 1 to 479 bytes", ErrInvalidArgument)
	}
	opts := append(append([]AcquireOption(nil), e.opts...), Owner(electionOwner(value)))
	l, err := e.c.acquire(ctx, e.key, nil, wait, opts)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lead = l
	e.mu.Unlock()
	return l, nil
}

// Resign gives up leadership won by this Election's last Campaign
// (ErrNotLeader when it has none).
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lead
	e.lead = nil
	e.mu.Unlock()
	if l == nil {
		return ErrNotLeader
	}
	return l.Release(ctx)
}

// Leader returns who leads now; the zero Leader when nobody does.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	v, err := e.c.run(ctx, true, "DLOCK.INFO", e.key)
	if err != nil || v == nil {
		return Leader{}, err
	}
	fields := map[string]any{}
	switch m := v.(type) {
	case map[any]any:
		for k, x := range m {
			fields[fmt.Sprint(k)] = x
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			fields[fmt.Sprint(m[i])] = m[i+1]
		}
	}
	owner, _ := fields["owner"].(string)
	token, _ := fields["token"].(int64)
	if owner == "" || token == 0 {
		return Leader{}, nil
	}
	return Leader{Value: ElectionValue(owner), Owner: owner, Term: token}, nil
}

// watchTimeout bounds each DLOCK.WATCH of an observer, so that a
// connection that died silently is noticed.
const watchTimeout = 30 * time.Second

// Observe posts who leads now, then every change, until ctx is done (the
// channel is then closed). A change the reader has not taken yet is
// replaced by a newer one: the channel always gives the latest leader,
// never a stale one (as etcd's Observe). The zero Leader means nobody
// leads. Each wait is a DLOCK.WATCH on a dedicated connection, ended with
// CLIENT UNBLOCK when ctx is done. It needs a server with DLOCK.WATCH.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader, 1)
	go func() {
		defer close(ch)
		last := int64(-1)
		failures := 0
		for ctx.Err() == nil {
			var ld Leader
			var changed bool
			var err error
			if last < 0 {
				// First who leads now; WATCH then answers at once if that
				// changed in between.
				ld, err = e.Leader(ctx)
				changed = err == nil
			} else {
				ld, changed, err = e.watchOnce(ctx, last)
			}
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrWrongType) {
					return
				}
				failures++
				d := time.Duration(failures) * 50 * time.Millisecond
				if d > time.Second {
					d = time.Second
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
				continue
			}
			failures = 0
			if !changed {
				continue
			}
			last = ld.Term
			post(ch, ld)
		}
	}()
	return ch
}

// post puts v in a one-slot channel, replacing a value not yet taken.
func post(ch chan Leader, v Leader) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// watchOnce runs DLOCK.WATCH key known timeout; changed is false when the
// timeout passed.
func (e *Election) watchOnce(ctx context.Context, known int64) (Leader, bool, error) {
	wait := watchTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		wait = time.Until(dl)
		if wait <= 0 {
			return Leader{}, false, context.DeadlineExceeded
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+e.c.waitMargin)
	defer cancel()
	node, pool, err := e.c.nodeFor(ctx, e.key)
	if err != nil {
		return Leader{}, false, err
	}
	w, err := pool.get(ctx)
	if err != nil {
		return Leader{}, false, err
	}
	v, err, cancelled := w.blocking(ctx, rctx, node, pool, []any{"DLOCK.WATCH", e.key, known, ms(wait)}, nil)
	if cancelled {
		return Leader{}, false, ctx.Err()
	}
	pool.put(w, err)
	if err != nil {
		return Leader{}, false, err
	}
	if v == nil {
		return Leader{}, false, nil
	}
	arr, ok := v.([]any)
	if !ok || len(arr) != 3 {
		return Leader{}, false, fmt.Errorf("dlock: unexpected WATCH reply %v", v)
	}
	term, _ := arr[0].(int64)
	owner, _ := arr[1].(string)
	if term == 0 {
		return Leader{}, true, nil
	}
	return Leader{Value: ElectionValue(owner), Owner: owner, Term: term}, true, nil
}
