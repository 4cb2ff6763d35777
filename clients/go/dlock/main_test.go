package dlock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server or valkey-server process with the module,
// started on a free port by TestMain (or by a test that kills it).
type server struct {
	name string
	bin  string
	addr string
	dir  string
	cmd  *exec.Cmd
	// tls: a TLS-only server (startTLSServer); the config trusts its CA.
	tls    *tls.Config
	caFile string
}

var servers []*server

func repoRoot() string {
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..", "..")
}

func modulePath() string {
	if m := os.Getenv("DLOCK_MODULE"); m != "" {
		return m
	}
	return filepath.Join(repoRoot(), "target", "release", "libdlock.so")
}

func valkeyPath() (string, error) {
	return serverPath("DLOCK_VALKEY_SERVER", "fetch-valkey.sh")
}

// redis8Path: Redis 8 (DLOCK_REDIS8_SERVER, else scripts/fetch-redis8.sh,
// which builds it once into target/redis8).
func redis8Path() (string, error) {
	return serverPath("DLOCK_REDIS8_SERVER", "fetch-redis8.sh")
}

// serverPath: the binary named by the environment variable, else the path
// the fetch script prints.
func serverPath(env, script string) (string, error) {
	if v := os.Getenv(env); v != "" {
		return v, nil
	}
	out, err := exec.Command(filepath.Join(repoRoot(), "scripts", script)).Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer starts bin with the module and extra arguments, and waits
// until it answers as its own process (INFO server).
func startServer(name, bin string, extra ...string) (*server, error) {
	return startServerOn(0, name, bin, extra...)
}

// startServerOn starts a server on port (a free port when 0).
func startServerOn(fixedPort int, name, bin string, extra ...string) (*server, error) {
	return launch(fixedPort, name, bin, "", extra...)
}

// errNoTLS: the server binary has no TLS built in (its log says so).
var errNoTLS = errors.New("no TLS built in")

// startTLSServer starts bin with the module and only a TLS port (port 0,
// tls-port: the settings of docs/operations.md's "TLS and ACL users"), its
// certificates made by scripts/tls-test-certs.sh in a temporary folder
// removed with the server. errNoTLS when the binary has no TLS.
func startTLSServer(name, bin string, extra ...string) (*server, error) {
	certs, err := os.MkdirTemp("", "dlock-go-tls-")
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command(filepath.Join(repoRoot(), "scripts", "tls-test-certs.sh"), certs).CombinedOutput(); err != nil {
		os.RemoveAll(certs)
		return nil, fmt.Errorf("tls-test-certs.sh: %v: %s", err, out)
	}
	s, err := launch(0, name, bin, certs, extra...)
	if err != nil {
		os.RemoveAll(certs)
		if strings.Contains(err.Error(), "TLS support") || strings.Contains(err.Error(), "connection type tls") {
			return nil, fmt.Errorf("%s: %w", bin, errNoTLS)
		}
		return nil, err
	}
	return s, nil
}

// launch starts a server; with certs (a folder of scripts/tls-test-certs.sh)
// a TLS-only one.
func launch(fixedPort int, name, bin, certs string, extra ...string) (*server, error) {
	var tlsConfig *tls.Config
	if certs != "" {
		pem, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
		if err != nil {
			return nil, err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		tlsConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		dir, err := os.MkdirTemp("", "dlock-go-"+name+"-")
		if err != nil {
			return nil, err
		}
		port := fixedPort
		if port == 0 {
			port = freePort()
		}
		listen := []string{"--port", strconv.Itoa(port)}
		if certs != "" {
			listen = []string{"--port", "0", "--tls-port", strconv.Itoa(port),
				"--tls-cert-file", filepath.Join(certs, "server.crt"), "--tls-key-file", filepath.Join(certs, "server.key"),
				"--tls-ca-cert-file", filepath.Join(certs, "ca.crt"), "--tls-auth-clients", "no"}
		}
		args := append(append(listen, "--bind", "127.0.0.1", "--dir", dir,
			"--logfile", "server.log", "--daemonize", "no", "--save", "", "--appendonly", "no",
			"--loadmodule", modulePath()), extra...)
		cmd := exec.Command(bin, args...)
		if err := cmd.Start(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &server{name: name, bin: bin, addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd, tls: tlsConfig}
		if certs != "" {
			s.caFile = filepath.Join(certs, "ca.crt")
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, TLSConfig: tlsConfig})
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				lastErr = fmt.Errorf("%s exited: %s", name, s.log())
				deadline = time.Time{}
				continue
			default:
			}
			// A server that could not bind its port exits, but until it
			// has, another test's server may answer there: only our own
			// process counts. INFO answers while the data set loads; PING
			// only once it is loaded.
			info, err := rdb.Info(context.Background(), "server").Result()
			if err == nil {
				err = rdb.Ping(context.Background()).Err()
			}
			if err == nil && strings.Contains(info, "\nprocess_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				rdb.Close()
				return s, nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		rdb.Close()
		s.stop()
		if lastErr == nil {
			lastErr = fmt.Errorf("%s did not answer: %s", name, s.log())
		}
	}
	return nil, lastErr
}

func (s *server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return string(b)
}

func (s *server) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	// wait for the port to close so a later test does not reach a dying server
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	os.RemoveAll(s.dir)
	if s.caFile != "" {
		os.RemoveAll(filepath.Dir(s.caFile))
	}
}

// client: a connection as the default user (over TLS to a TLS server).
func (s *server) client(t testing.TB) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, TLSConfig: s.tls})
	if t != nil {
		t.Cleanup(func() { rdb.Close() })
	}
	return rdb
}

// hasCommand reports whether the server knows a command (WATCH, WEIGHT
// arrive with newer modules).
func (s *server) hasCommand(name string) bool {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	v, err := rdb.Do(context.Background(), "COMMAND", "INFO", name).Slice()
	return err == nil && len(v) > 0 && v[0] != nil
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if _, err := os.Stat(modulePath()); err != nil {
		fmt.Fprintf(os.Stderr, "%s is missing: run `make build` (or set DLOCK_MODULE)\n", modulePath())
		return 1
	}
	redisBin := os.Getenv("DLOCK_REDIS_SERVER")
	if redisBin == "" {
		redisBin = "redis-server"
	}
	// The servers to test on, a comma-separated list of redis (redis-server
	// or DLOCK_REDIS_SERVER: Redis 7.0 on Debian 12), redis8
	// (DLOCK_REDIS8_SERVER) and valkey (DLOCK_VALKEY_SERVER).
	kinds := os.Getenv("DLOCK_GO_SERVERS")
	if kinds == "" {
		kinds = "redis,valkey"
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	names := strings.Split(kinds, ",")
	started := make([]*server, len(names))
	for i, kind := range names {
		kind := strings.TrimSpace(kind)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var bin string
			var err error
			switch kind {
			case "redis":
				bin = redisBin
			case "redis8":
				bin, err = redis8Path()
			case "valkey":
				bin, err = valkeyPath()
			default:
				err = fmt.Errorf("DLOCK_GO_SERVERS: unknown server %q (redis, redis8, valkey)", kind)
			}
			if err != nil {
				fail(err)
				return
			}
			s, err := startServer(kind, bin)
			if err != nil {
				fail(err)
				return
			}
			started[i] = s
		}()
	}
	wg.Wait()
	// A stable order: that of DLOCK_GO_SERVERS.
	for _, s := range started {
		if s != nil {
			servers = append(servers, s)
		}
	}
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, firstErr)
		return 1
	}
	os.Setenv("DLOCK_EXAMPLE_ADDR", servers[0].addr)
	return m.Run()
}

// eachServer runs f as a subtest on every server, in parallel.
func eachServer(t *testing.T, f func(t *testing.T, s *server)) {
	t.Helper()
	for _, s := range servers {
		s := s
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f(t, s)
		})
	}
}

// key returns a key unique to the test.
func key(t *testing.T, suffix string) string {
	return t.Name() + ":" + suffix
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// info returns DLOCK.INFO as a map (RESP2 and RESP3 alike); nil when missing.
func info(t *testing.T, rdb *redis.Client, key string) map[string]any {
	t.Helper()
	v, err := rdb.Do(context.Background(), "DLOCK.INFO", key).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatalf("DLOCK.INFO %s: %v", key, err)
	}
	out := map[string]any{}
	switch x := v.(type) {
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = v
		}
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = x[i+1]
		}
	}
	return out
}

// holders returns the number of holders listed by DLOCK.INFO.
func holders(t *testing.T, rdb *redis.Client, key string) int {
	m := info(t, rdb, key)
	if m == nil {
		return 0
	}
	h, _ := m["holders"].([]any)
	return len(h)
}

func waiting(t *testing.T, rdb *redis.Client, key string) int64 {
	m := info(t, rdb, key)
	if m == nil {
		return 0
	}
	w, _ := m["waiting"].(int64)
	return w
}
