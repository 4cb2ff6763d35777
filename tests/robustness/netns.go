package robustness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// A network partition between the clients and the server, in network
// namespaces, built as tests/netns does it: a switch namespace holds two
// bridges, br0 where every link sits and br1, the far side of a cut; the
// server and the clients each have a namespace with one veth link to the
// switch. A partition moves the server's link to br1: frames are silently
// lost, the clients see timeouts, the server goes on (leases end, waits
// time out) and TCP delivers what was retransmitted after the heal.
// Nothing is created in the machine's own namespace: the test process
// dials from the clients' namespace (each connection's socket is made on a
// thread switched into it). Needs root; NetUnavailable says why not.

const nsPrefix = "dlockrb"

type netEnv struct {
	sw, srv, cli string
	srvIP        string
}

func runIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NetUnavailable returns why namespaces cannot be used here ("" if they
// can).
func NetUnavailable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root"
	}
	probe := fmt.Sprintf("%s%dprobe", nsPrefix, os.Getpid())
	if err := runIP("netns", "add", probe); err != nil {
		return err.Error()
	}
	defer runIP("netns", "del", probe)
	if err := runIP("-n", probe, "link", "add", "br0", "type", "bridge"); err != nil {
		return err.Error()
	}
	return ""
}

// removeLeftoverNets deletes the namespaces of test processes that died.
func removeLeftoverNets() {
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pid := strings.TrimRightFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
		if i := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			pid = rest[:i]
		}
		if pid == "" {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue
		}
		_ = runIP("netns", "del", e.Name())
	}
}

func newNetEnv() (*netEnv, error) {
	removeLeftoverNets()
	p := fmt.Sprintf("%s%d", nsPrefix, os.Getpid())
	n := &netEnv{sw: p + "sw", srv: p + "srv", cli: p + "cli"}
	subnet := fmt.Sprintf("10.199.%d", os.Getpid()%250)
	n.srvIP = subnet + ".2"
	steps := [][]string{
		{"netns", "add", n.sw},
		{"-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"-n", n.sw, "link", "add", "br1", "type", "bridge"},
		{"-n", n.sw, "link", "set", "br0", "up"},
		{"-n", n.sw, "link", "set", "br1", "up"},
	}
	for i, host := range []string{n.srv, n.cli} {
		port := fmt.Sprintf("p%d", i+1)
		ip := fmt.Sprintf("%s.%d", subnet, i+2)
		steps = append(steps,
			[]string{"netns", "add", host},
			[]string{"-n", n.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host},
			[]string{"-n", n.sw, "link", "set", port, "master", "br0"},
			[]string{"-n", n.sw, "link", "set", port, "up"},
			[]string{"-n", host, "link", "set", "lo", "up"},
			[]string{"-n", host, "addr", "add", ip + "/24", "dev", "eth0"},
			[]string{"-n", host, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := runIP(s...); err != nil {
			n.remove()
			return nil, err
		}
	}
	return n, nil
}

func (n *netEnv) remove() {
	for _, ns := range []string{n.cli, n.srv, n.sw} {
		_ = runIP("netns", "del", ns)
	}
}

func (n *netEnv) cut() error  { return runIP("-n", n.sw, "link", "set", "p1", "master", "br1") }
func (n *netEnv) heal() error { return runIP("-n", n.sw, "link", "set", "p1", "master", "br0") }

// dialer dials from the clients' namespace: the socket is created on this
// goroutine's thread, switched into it for the call.
func (n *netEnv) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	path := filepath.Join("/var/run/netns", n.cli)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		target, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer target.Close()
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			return nil, err
		}
		defer orig.Close()
		if _, _, e := syscall.RawSyscall(sysSetns(), target.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
			runtime.UnlockOSThread()
			return nil, e
		}
		d := &net.Dialer{Timeout: 300 * time.Millisecond}
		conn, err := d.DialContext(ctx, network, addr)
		if _, _, e := syscall.RawSyscall(sysSetns(), orig.Fd(), syscall.CLONE_NEWNET, 0); e == 0 {
			runtime.UnlockOSThread()
		} // else the thread stays locked and dies with this goroutine
		return conn, err
	}
}

// partitioned is one server in its namespace, clients in theirs; its
// "pause" fault is a network partition instead of SIGSTOP.
type partitioned struct {
	single
	net *netEnv
}

func startPartitioned(dir string, args []string) (*partitioned, error) {
	n, err := newNetEnv()
	if err != nil {
		return nil, err
	}
	port := 6379
	s := &Server{Bin: ServerBin(), Module: ModulePath(), Dir: dir, Port: port, Host: n.srvIP, Args: args,
		Exec: []string{"ip", "netns", "exec", n.srv}, Dial: n.dialer()}
	if err := s.Start(); err != nil {
		n.remove()
		return nil, err
	}
	return &partitioned{single: single{srv: s}, net: n}, nil
}

func (p *partitioned) newClient(resp2 bool) *redis.Client {
	o := clientOptions(p.srv.Addr(), resp2)
	o.Dialer = p.net.dialer()
	return redis.NewClient(o)
}

func (p *partitioned) pause(rec *Recorder, d time.Duration) {
	if err := p.net.cut(); err != nil {
		rec.Event("partition failed: " + err.Error())
		return
	}
	rec.Event("partition")
	time.Sleep(d)
	_ = p.net.heal()
	rec.Event("healed")
}

func (p *partitioned) clientKill(rec *Recorder) {
	o := clientOptions(p.srv.Addr(), false)
	o.Dialer = p.net.dialer()
	admin := redis.NewClient(o)
	defer admin.Close()
	c, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = admin.Do(c, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err()
	cancel()
	rec.ClientKill("CLIENT KILL TYPE normal")
}

func (p *partitioned) kill(rec *Recorder, downtime time.Duration) error {
	return p.single.kill(rec, downtime)
}

func (p *partitioned) stop() {
	_ = p.net.heal()
	p.single.stop()
	p.net.remove()
}

// sysSetns is setns(2)'s number (the syscall package does not name it).
func sysSetns() uintptr {
	if runtime.GOARCH == "arm64" {
		return 268
	}
	return 308 // amd64
}
