package dlock

import (
	"context"
	"math"
	"testing"

	"github.com/redis/go-redis/v9"
)

// R6.1: a token of 2^63-1 parses exactly from a grant reply.
func TestParseGrantTokenExact(t *testing.T) {
	tok, holds, owner, err := parseGrant([]any{int64(math.MaxInt64), int64(1), "o"})
	if err != nil || tok != 9223372036854775807 || holds != 1 || owner != "o" {
		t.Fatalf("got %d %d %q %v", tok, holds, owner, err)
	}
	if _, _, _, err := parseGrant([]any{"1", int64(1), "o"}); err == nil {
		t.Fatal("a string token was accepted")
	}
}

// R3.1: a renewal that answers another token, or null, is a loss.
func TestRenewVerdict(t *testing.T) {
	l := &Lock{tokens: []int64{7}}
	if got := renewVerdictOf(l, int64(7)); got != nil {
		t.Fatalf("own token: %v", got)
	}
	if got := renewVerdictOf(l, int64(8)); got != ErrLockLost {
		t.Fatalf("another token: %v", got)
	}
	cmd := redis.NewCmd(context.Background(), "DLOCK.RENEW")
	cmd.SetErr(redis.Nil)
	if got := renewVerdict(l, []*redis.Cmd{cmd}); got != ErrLockLost {
		t.Fatalf("null: %v", got)
	}
}

func renewVerdictOf(l *Lock, reply any) error {
	cmd := redis.NewCmd(context.Background(), "DLOCK.RENEW")
	cmd.SetVal(reply)
	return renewVerdict(l, []*redis.Cmd{cmd})
}
