package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// process is a server the bench started: its address, its temporary
// folder (data and log) and how to stop it.
type process struct {
	name string
	addr string // host:port for clients
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has ended
}

// started watches the process: done closes when it ends.
func started(name, addr, dir string, cmd *exec.Cmd) *process {
	p := &process{name: name, addr: addr, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p
}

// exited reports whether the process has ended (e.g. it refused its
// arguments): a start stops waiting for it at once.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop kills the server, waits for it and removes its folder.
func (p *process) stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	_ = os.RemoveAll(p.dir)
}

// pid is the server's process id (for its resident memory).
func (p *process) pid() int { return p.cmd.Process.Pid }

// logTail is the end of the server's log, for an error message.
func (p *process) logTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts redis-server (DLOCK_REDIS_SERVER) with the module and
// AOF on with the given appendfsync policy (everysec or always), data in a
// temporary folder, on a free loopback port; ready once PING answers.
func startRedis(root, fsync string) (*process, error) {
	module := os.Getenv("DLOCK_MODULE")
	if module == "" {
		module = filepath.Join(root, "target", "release", "libdlock.so")
	}
	bin := os.Getenv("DLOCK_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-consensus-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", fsync, "--logfile", "server.log", "--loadmodule", module)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := started("redis-server (AOF "+fsync+")", "127.0.0.1:"+strconv.Itoa(port), dir, cmd)
	rdb := redis.NewClient(&redis.Options{Addr: p.addr})
	defer rdb.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !p.exited(); time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return p, nil
		}
	}
	tail := p.logTail()
	p.stop()
	return nil, fmt.Errorf("%s did not answer PING (ended: %v): %s", bin, p.exited(), tail)
}

// startEtcd starts a single-member etcd (DLOCK_ETCD, default etcd from
// PATH: Debian's etcd-server) on two free loopback ports, its data in a
// temporary folder and fsync as shipped; ready once a linearizable Get
// answers (the member has elected itself and applied its first entries).
func startEtcd() (*process, error) {
	bin := os.Getenv("DLOCK_ETCD")
	if bin == "" {
		bin = "etcd"
	}
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlock-consensus-etcd-")
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--initial-cluster-state", "new")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := started("etcd", "127.0.0.1:"+strconv.Itoa(clientPort), dir, cmd)
	cli, err := etcdClient(p.addr)
	if err != nil {
		p.stop()
		return nil, err
	}
	defer cli.Close()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !p.exited(); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "ready")
		cancel()
		if err == nil {
			return p, nil
		}
	}
	tail := p.logTail()
	p.stop()
	return nil, fmt.Errorf("%s did not answer (ended: %v): %s", bin, p.exited(), tail)
}

func etcdClient(addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second,
		Logger: quietLogger()})
}

// rss is a process's resident memory in bytes (/proc/PID/status VmRSS).
func rss(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			fs := strings.Fields(v)
			if len(fs) > 0 {
				kb, _ := strconv.ParseInt(fs[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

func serverVersions(redisAddr, etcdAddr string) (string, string) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	rv := "unknown"
	info, _ := rdb.Info(context.Background(), "server").Result()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			rv = v
		}
	}
	ev := "unknown"
	if cli, err := etcdClient(etcdAddr); err == nil {
		defer cli.Close()
		if st, err := cli.Status(context.Background(), etcdAddr); err == nil {
			ev = st.Version
		}
	}
	return rv, ev
}
