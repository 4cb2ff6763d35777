package dlock_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// An uncontended TryAcquire + Release, against the two raw commands
// through go-redis (the client's overhead per call); for profiling with
// go test -bench Pair -benchmem -cpuprofile (clients/go/bench measures
// the goals).
func BenchmarkPair(b *testing.B) {
	s := servers[0]
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	ctx := context.Background()
	var g atomic.Int64
	b.Run("client", func(b *testing.B) {
		c := dlock.New(rdb)
		defer c.Close()
		b.ReportAllocs()
		b.SetParallelism(8) // as clients/go/bench: 16 goroutines on 2 cores
		b.RunParallel(func(pb *testing.PB) {
			k := "bench:pair:client:" + strconv.FormatInt(g.Add(1), 10)
			for pb.Next() {
				l, err := c.TryAcquire(ctx, k, dlock.TTL(8*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("raw", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			k := "bench:pair:raw:" + strconv.FormatInt(g.Add(1), 10)
			for pb.Next() {
				owner := "raw-" + strconv.FormatInt(n.Add(1), 10)
				if v, err := rdb.Do(ctx, "DLOCK.ACQUIRE", k, owner, int64(8000)).Result(); err != nil || v == nil {
					b.Fatal(err)
				}
				if err := rdb.Do(ctx, "DLOCK.RELEASE", k, owner).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
