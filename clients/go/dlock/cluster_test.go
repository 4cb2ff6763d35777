package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// startCluster starts three masters of bin with the module, gives each a
// third of the slots and waits until every node says cluster_state:ok.
func startCluster(t *testing.T, name, bin string) []*server {
	var nodes []*server
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop()
		}
	})
	for i := 0; i < 3; i++ {
		n, err := startServer(name, bin, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	ctx := context.Background()
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.addr})
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			host, port, _ := strings.Cut(nodes[0].addr, ":")
			if err := rdb.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				t.Fatal(err)
			}
		}
		rdb.Close()
	}
	for _, n := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.addr})
		eventually(t, 20*time.Second, "cluster_state:ok", func() bool {
			s, err := rdb.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(s, "cluster_state:ok") && strings.Contains(s, "cluster_known_nodes:3")
		})
		rdb.Close()
	}
	return nodes
}

func TestCluster(t *testing.T) {
	eachServer(t, func(t *testing.T, s *server) {
		nodes := startCluster(t, s.name, s.bin)
		ctx := context.Background()
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr}})
		defer rdb.Close()
		c := dlock.New(rdb)
		defer c.Close()
		// one key per node (slots 0-5460, 5461-10922, 10923-16383)
		keys := map[int]string{}
		for i := 0; len(keys) < 3; i++ {
			k := "ck" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
			keys[dlock.Slot(k)*3/16384] = k
		}
		var locks []*dlock.Lock
		for n := 0; n < 3; n++ {
			l, err := c.TryAcquire(ctx, keys[n], dlock.TTL(300*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, l)
			direct := redis.NewClient(&redis.Options{Addr: nodes[n].addr})
			if holders(t, direct, keys[n]) != 1 {
				t.Fatalf("key %s not on node %d", keys[n], n)
			}
			direct.Close()
		}
		// a wait on node 2 runs on that node, and cancelling it unblocks it there
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { _, err := c.Acquire(wctx, keys[2]); errc <- err }()
		node2 := redis.NewClient(&redis.Options{Addr: nodes[2].addr})
		defer node2.Close()
		eventually(t, 5*time.Second, "a waiter on node 2", func() bool { return waiting(t, node2, keys[2]) == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "no waiter", func() bool { return waiting(t, node2, keys[2]) == 0 })
		time.Sleep(900 * time.Millisecond) // three leases: renewals reach every node
		for _, l := range locks {
			if l.Err() != nil {
				t.Fatalf("lost %s: %v", l.Key(), l.Err())
			}
			l.Release(ctx)
		}
		// MACQUIRE routes by its first key (no redirect allowed to hide a
		// wrong route); keys of different slots are refused before sending
		strict := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].addr}, MaxRedirects: -1})
		defer strict.Close()
		c = dlock.New(strict)
		defer c.Close()
		if _, err := c.TryAcquireMulti(ctx, []string{keys[0], keys[1]}); !errors.Is(err, dlock.ErrCrossSlot) {
			t.Fatalf("cross-slot multi: %v", err)
		}
		m, err := c.TryAcquireMulti(ctx, []string{"{" + keys[2] + "}a", "{" + keys[2] + "}b"})
		if err != nil {
			t.Fatal(err)
		}
		if holders(t, node2, "{"+keys[2]+"}b") != 1 {
			t.Fatal("multi-lock not on the first key's node")
		}
		m.Release(ctx)
		wm, err := c.AcquireMulti(ctx, []string{"{" + keys[1] + "}a", "{" + keys[1] + "}b"})
		if err != nil {
			t.Fatal(err)
		}
		wm.Release(ctx)
		// a master killed under a held lock: its context is cancelled
		// within the lease
		lease := time.Second
		sent := time.Now()
		doomed, err := c.TryAcquire(ctx, keys[2], dlock.TTL(lease))
		if err != nil {
			t.Fatal(err)
		}
		nodes[2].cmd.Process.Kill()
		select {
		case <-doomed.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("not lost")
		}
		if !errors.Is(doomed.Err(), dlock.ErrLockLost) {
			t.Fatal(doomed.Err())
		}
		if elapsed := time.Since(sent); elapsed > lease+100*time.Millisecond {
			t.Fatalf("lost %v after the send, after the lease of %v", elapsed, lease)
		}
	})
}
