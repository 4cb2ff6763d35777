package robustness

import (
	"context"
	"os"
	"testing"
	"time"
)

// The partition fault really cuts the clients off: PING answers, times out
// during the cut, answers again after the heal.
func TestPartitionCutsTheLink(t *testing.T) {
	if why := NetUnavailable(); why != "" {
		t.Skip("SKIPPED:", why)
	}
	dir := t.TempDir()
	p, err := startPartitioned(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	c := p.newClient(false)
	defer c.Close()
	ping := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	if err := ping(); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	if err := p.net.cut(); err != nil {
		t.Fatal(err)
	}
	if err := ping(); err == nil {
		t.Fatal("PING answered across the partition")
	}
	if err := p.net.heal(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ping() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no answer after the heal")
		}
	}
	if _, err := os.Stat("/var/run/netns/" + p.net.cli); err != nil {
		t.Fatal(err)
	}
}
