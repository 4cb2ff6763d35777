package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// exampleClient connects to the server the test run started (a real one
// in your code: redis.NewClient(&redis.Options{Addr: "localhost:6379"})).
func exampleClient() (*dlock.Client, *redis.Client) {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("DLOCK_EXAMPLE_ADDR")})
	return dlock.New(rdb), rdb
}

func Example() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lock, err := locks.Acquire(ctx, "example:orders:42") // waits up to 10 s
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lock.Release(context.Background())
	fmt.Println("token > 0:", lock.Token() > 0) // pass the token to the resource
	select {
	case <-lock.Done(): // lost: stop the work
	default:
		fmt.Println("held")
	}
	// Output:
	// token > 0: true
	// held
}

func ExampleClient_Do() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	err := locks.Do(context.Background(), "example:report", func(ctx context.Context) error {
		// ctx is cancelled with cause dlock.ErrLockLost if the lock is lost
		fmt.Println("writing the report")
		return nil
	}, dlock.TTL(10*time.Second))
	fmt.Println(err)
	// Output:
	// writing the report
	// <nil>
}

func ExampleClient_TryAcquire() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx := context.Background()
	first, _ := locks.TryAcquire(ctx, "example:try")
	_, err := locks.TryAcquire(ctx, "example:try")
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	first.Release(ctx)
	// Output: true
}

func ExampleClient_RWMutex() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx := context.Background()
	catalog := locks.RWMutex("example:catalog")
	r1, _ := catalog.RLock(ctx)
	r2, _ := catalog.RLock(ctx) // readers share
	_, err := catalog.TryLock(ctx)
	fmt.Println("writer while reading:", err)
	catalog.RUnlock(ctx)
	catalog.RUnlock(ctx)
	w, _ := catalog.Lock(ctx)
	fmt.Println("writer token above readers':", w.Token() > r1.Token() && w.Token() > r2.Token())
	catalog.Unlock(ctx)
	// Output:
	// writer while reading: dlock: not acquired
	// writer token above readers': true
}

func ExampleClient_Semaphore() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx := context.Background()
	api := locks.Semaphore("example:payments-api", 2) // at most 2 callers
	if err := api.Acquire(ctx, 1); err != nil {
		return
	}
	fmt.Println(api.TryAcquire(1), api.TryAcquire(1))
	api.Release(1)
	api.Release(1)
	// Output: true false
}

func ExampleClient_Latch() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx := context.Background()
	batch := locks.Latch("example:batch:7")
	created, _ := batch.Init(ctx, 2, time.Minute)
	done := make(chan error)
	go func() { done <- batch.Await(ctx) }() // woken by the server at 0
	batch.CountDown(ctx, 1)
	left, _ := batch.CountDown(ctx, 1)
	fmt.Println(created, left, <-done)
	// Output: true 0 <nil>
}

func ExampleClient_AcquireMulti() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx := context.Background()
	// one atomic step; in a Cluster the keys must share a slot: a hash tag
	both, err := locks.AcquireMulti(ctx, []string{"{example:bank}:1", "{example:bank}:2"})
	if err != nil {
		return
	}
	fmt.Println(len(both.Tokens()))
	both.Release(ctx)
	// Output: 2
}

func ExampleElection() {
	locks, rdb := exampleClient()
	defer rdb.Close()
	defer locks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := locks.Election("example:billing-leader")
	leadership, err := e.Campaign(ctx, "host-1:8080") // waits to lead
	if err != nil {
		fmt.Println(err) // a server without DLOCK.WATCH still elects
		return
	}
	leader, _ := e.Leader(ctx)
	fmt.Println(leader.Value, leader.Term == leadership.Token())
	// Lead under leadership.Context(); pass leadership.Token() (the term)
	// to what you write. Followers: for l := range e.Observe(ctx) { ... }
	e.Resign(ctx)
	// Output: host-1:8080 true
}
