package robustness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server with the module, on a free loopback port, in
// a directory of its own; it can be killed, restarted and paused.
type Server struct {
	Bin, Module, Dir string
	Port             int
	Args             []string
	// Host is the address it listens on (127.0.0.1 unless in a namespace);
	// Exec prefixes the command (ip netns exec NS); Dial reaches it.
	Host string
	Exec []string
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	cmd  *exec.Cmd
	done chan struct{}
}

func repoRoot() string {
	if r := os.Getenv("DLOCK_REPO"); r != "" {
		return r
	}
	wd, _ := os.Getwd()
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// ServerBin is DLOCK_SERVER or redis-server.
func ServerBin() string {
	if s := os.Getenv("DLOCK_SERVER"); s != "" {
		return s
	}
	return "redis-server"
}

// ModulePath is DLOCK_MODULE or target/release/libdlock.so.
func ModulePath() string {
	if m := os.Getenv("DLOCK_MODULE"); m != "" {
		return m
	}
	return filepath.Join(repoRoot(), "target", "release", "libdlock.so")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartServer starts a server with extra configuration args.
func StartServer(dir string, args ...string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Bin: ServerBin(), Module: ModulePath(), Dir: dir, Port: port, Args: args}
	if _, err := os.Stat(s.Module); err != nil {
		return nil, fmt.Errorf("module not built (make build): %w", err)
	}
	return s, s.Start()
}

// Addr is host:port.
func (s *Server) Addr() string {
	if s.Host != "" {
		return s.Host + ":" + strconv.Itoa(s.Port)
	}
	return "127.0.0.1:" + strconv.Itoa(s.Port)
}

// Start (re)starts the process and waits until it answers PING.
func (s *Server) Start() error {
	host := s.Host
	if host == "" {
		host = "127.0.0.1"
	}
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", host, "--dir", s.Dir,
		"--save", "", "--logfile", "server.log", "--daemonize", "no", "--protected-mode", "no",
		"--loadmodule", s.Module,
		// FAIR reservations last 300 ms (not 5 s) so that an abandoned one
		// does not stall a key for the length of a run.
		"--dlock.fair-reservation-ms", "300"}
	args = append(args, s.Args...)
	argv := append(append(append([]string(nil), s.Exec...), s.Bin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, Dialer: s.Dial})
	defer rdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
			return fmt.Errorf("redis-server exited at start: %s", tail(string(log), 2000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING", s.Addr())
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Kill sends SIGKILL and waits for the process to end.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause and Resume send SIGSTOP and SIGCONT.
func (s *Server) Pause() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume sends SIGCONT.
func (s *Server) Resume() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Stop kills the server for good.
func (s *Server) Stop() { s.Kill() }
