package robustness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// target is what the workload runs against and the faults act on: one
// server, or a Sentinel deployment (master, replica, three Sentinels).
type target interface {
	// newClient returns a go-redis client of its own for one workload
	// client (never retrying a command; protocol 2 when resp2).
	newClient(resp2 bool) *redis.Client
	kill(rec *Recorder, downtime time.Duration) error
	pause(rec *Recorder, d time.Duration)
	clientKill(rec *Recorder)
	stop()
}

func clientOptions(addr string, resp2 bool) *redis.Options {
	o := &redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 4,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond, WriteTimeout: 600 * time.Millisecond}
	if resp2 {
		o.Protocol = 2
	}
	return o
}

// single is one server: kill -9 and restart in place.
type single struct{ srv *Server }

func (s *single) newClient(resp2 bool) *redis.Client {
	return redis.NewClient(clientOptions(s.srv.Addr(), resp2))
}

func (s *single) kill(rec *Recorder, downtime time.Duration) error {
	s.srv.Kill()
	rec.Crash("kill -9")
	time.Sleep(downtime)
	err := s.srv.Start()
	rec.Event("restarted")
	return err
}

func (s *single) pause(rec *Recorder, d time.Duration) {
	s.srv.Pause()
	rec.Event("SIGSTOP")
	time.Sleep(d)
	s.srv.Resume()
	rec.Event("SIGCONT")
}

func (s *single) clientKill(rec *Recorder) {
	admin := redis.NewClient(clientOptions(s.srv.Addr(), false))
	defer admin.Close()
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = admin.Do(c, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
	cancel()
	rec.ClientKill("CLIENT KILL TYPE normal")
}

func (s *single) stop() { s.srv.Resume(); s.srv.Stop() }

// sentinelGroup: a master and a replica with the module, watched by three
// Sentinels (quorum 2, down-after 1000 ms) on loopback. Clients find the
// master through the Sentinels (go-redis's failover client). A kill is
// kill -9 of the master, a failover to the replica, and the old master
// restarted later (Sentinel makes it a replica); a pause is SIGSTOP of the
// master long enough for Sentinel to fail it over, then SIGCONT.
type sentinelGroup struct {
	nodes     []*Server // data nodes
	sentinels []*exec.Cmd
	sentAddrs []string
}

const masterName = "dlock"

func startSentinelGroup(dir string, args []string) (*sentinelGroup, error) {
	g := &sentinelGroup{}
	for i := 0; i < 2; i++ {
		d := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		a := append([]string(nil), args...)
		if i == 1 {
			a = append(a, "--replicaof", "127.0.0.1", strconv.Itoa(g.nodes[0].Port))
		}
		s, err := StartServer(d, a...)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.nodes = append(g.nodes, s)
	}
	if err := waitLinked(g.nodes[1]); err != nil {
		g.stop()
		return nil, err
	}
	for i := 0; i < 3; i++ {
		d := filepath.Join(dir, fmt.Sprintf("sentinel%d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nlogfile sentinel.log\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 3000\nsentinel parallel-syncs %s 1\n",
			port, d, masterName, g.nodes[0].Port, masterName, masterName, masterName)
		p := filepath.Join(d, "sentinel.conf")
		if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.Command(ServerBin(), p, "--sentinel")
		cmd.Dir = d
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			g.stop()
			return nil, err
		}
		g.sentinels = append(g.sentinels, cmd)
		g.sentAddrs = append(g.sentAddrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	// Every Sentinel knows the master and the replica before the run.
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range g.sentAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: 300 * time.Millisecond})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			reps, err := sc.Replicas(ctx, masterName).Result()
			cancel()
			if err == nil && len(reps) > 0 {
				break
			}
			if time.Now().After(deadline) {
				sc.Close()
				g.stop()
				return nil, fmt.Errorf("sentinel %s does not see the replica", a)
			}
			time.Sleep(100 * time.Millisecond)
		}
		sc.Close()
	}
	return g, nil
}

func waitLinked(s *Server) error {
	c := redis.NewClient(clientOptions(s.Addr(), false))
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		info, err := c.Info(ctx, "replication").Result()
		cancel()
		if err == nil && contains(info, "master_link_status:up") {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("replica %s never linked", s.Addr())
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func (g *sentinelGroup) newClient(resp2 bool) *redis.Client {
	o := &redis.FailoverOptions{MasterName: masterName, SentinelAddrs: g.sentAddrs, MaxRetries: -1, PoolSize: 4,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 600 * time.Millisecond, WriteTimeout: 600 * time.Millisecond}
	if resp2 {
		o.Protocol = 2
	}
	return redis.NewFailoverClient(o)
}

// master asks the Sentinels for the master's address.
func (g *sentinelGroup) master() string {
	for _, a := range g.sentAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		r, err := sc.GetMasterAddrByName(ctx, masterName).Result()
		cancel()
		sc.Close()
		if err == nil && len(r) == 2 {
			return r[0] + ":" + r[1]
		}
	}
	return ""
}

func (g *sentinelGroup) node(addr string) *Server {
	for _, n := range g.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// awaitFailover waits until the Sentinels name another master than old.
func (g *sentinelGroup) awaitFailover(rec *Recorder, old string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := g.master(); m != "" && m != old {
			rec.Event("failover to " + m)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec.Event("no failover")
}

func (g *sentinelGroup) kill(rec *Recorder, downtime time.Duration) error {
	old := g.master()
	n := g.node(old)
	if n == nil {
		return nil
	}
	n.Kill()
	rec.Crash("kill -9")
	g.awaitFailover(rec, old)
	time.Sleep(downtime)
	// The old master comes back with its data; Sentinel turns it into a
	// replica of the new one.
	err := n.Start()
	rec.Event("restarted")
	return err
}

func (g *sentinelGroup) pause(rec *Recorder, d time.Duration) {
	old := g.master()
	n := g.node(old)
	if n == nil {
		return
	}
	n.Pause()
	// Sentinel may promote the replica meanwhile: for the lossy model the
	// paused master is as good as crashed.
	rec.Crash("SIGSTOP")
	time.Sleep(d)
	n.Resume()
	rec.Event("SIGCONT")
}

func (g *sentinelGroup) clientKill(rec *Recorder) {
	admin := redis.NewClient(clientOptions(g.master(), false))
	defer admin.Close()
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = admin.Do(c, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
	cancel()
	rec.ClientKill("CLIENT KILL TYPE normal")
}

func (g *sentinelGroup) stop() {
	for _, s := range g.sentinels {
		_ = s.Process.Kill()
		_, _ = s.Process.Wait()
	}
	for _, n := range g.nodes {
		n.Resume()
		n.Stop()
	}
}
