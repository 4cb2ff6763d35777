package dlock

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// R2.4: renewals of many locks that fall due together go out in shared
// rounds (one pipeline each), not one round trip per lock.
func TestRenewalsShareRounds(t *testing.T) {
	addr := os.Getenv("DLOCK_EXAMPLE_ADDR") // set by TestMain
	if addr == "" {
		t.Skip("no server (TestMain sets DLOCK_EXAMPLE_ADDR)")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c := New(rdb)
	defer c.Close()
	ctx := context.Background()
	var locks []*Lock
	for i := 0; i < 100; i++ {
		l, err := c.TryAcquire(ctx, fmt.Sprintf("%s:%d", t.Name(), i), TTL(600*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	time.Sleep(1200 * time.Millisecond) // six periods: the scenario, not a synchronisation
	c.wd.mu.Lock()
	rounds := c.wd.rounds
	c.wd.mu.Unlock()
	for _, l := range locks {
		if l.Err() != nil {
			t.Fatalf("lost: %v", l.Err())
		}
		l.Release(ctx)
	}
	// 100 locks renewed every 200 ms for 1.2 s: about 6 rounds when they
	// share them, 600 when each goes alone.
	if rounds < 3 || rounds > 40 {
		t.Fatalf("%d renewal rounds for 100 locks over six periods", rounds)
	}
}
