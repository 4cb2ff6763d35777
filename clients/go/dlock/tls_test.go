package dlock_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

// The client over TLS as a restricted ACL user (docs/operations.md, "TLS and
// ACL users"): a TLS-only server, the document's ACL line and connection
// block, then an acquire, a blocking hand-off, a renewal, a release and an
// election; a key outside the user's pattern gets NOPERM.

// docBlock returns the lines of the fenced block of docs/operations.md
// after the marker <!-- tls: what -->.
func docBlock(t *testing.T, what string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	for i, line := range lines {
		if strings.TrimSpace(line) != "<!-- tls: "+what+" -->" {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("<!-- tls: %s --> is not followed by a fence", what)
		}
		var block []string
		for _, l := range lines[i+2:] {
			if strings.HasPrefix(l, "```") {
				return block
			}
			block = append(block, l)
		}
	}
	t.Fatalf("docs/operations.md has no <!-- tls: %s -->", what)
	return nil
}

// createDocumentedAppUser runs the document's ACL line for app1: the
// +@dlock one where the server has that category, else the Redis 7.0 one.
func createDocumentedAppUser(t *testing.T, admin *redis.Client) {
	t.Helper()
	ctx := context.Background()
	cats, err := admin.Do(ctx, "ACL", "CAT").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	block := "acl app redis-7.0"
	for _, c := range cats {
		if c == "dlock" {
			block = "acl app"
		}
	}
	lines := docBlock(t, block)
	if len(lines) != 1 {
		t.Fatalf("one ACL line under <!-- tls: %s -->, got %q", block, lines)
	}
	var args []any
	for _, f := range strings.Fields(lines[0]) {
		args = append(args, f)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%s: %v", lines[0], err)
	}
}

// connectAsDocumented is the Go block of docs/operations.md, as written
// there (TestTLSDocumentedGoConnection checks).
func connectAsDocumented(addr, caFile string) (*dlock.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	rdb := redis.NewClient(&redis.Options{
		Addr:      addr,
		Username:  "app1",
		Password:  "app1-secret",
		TLSConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	})
	locks := dlock.New(rdb)
	return locks, nil
}

func TestTLSDocumentedGoConnection(t *testing.T) {
	normalise := func(lines []string) []string {
		var out []string
		for _, l := range lines {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	doc := normalise(docBlock(t, "client go"))
	self, err := os.ReadFile("tls_test.go")
	if err != nil {
		t.Fatal(err)
	}
	here := normalise(strings.Split(string(self), "\n"))
	for i := 0; len(doc) > 0 && i+len(doc) <= len(here); i++ {
		if strings.Join(here[i:i+len(doc)], "\n") == strings.Join(doc, "\n") {
			return
		}
	}
	t.Fatalf("the Go block of docs/operations.md is not in tls_test.go:\n%s", strings.Join(doc, "\n"))
}

func TestTLSACLUser(t *testing.T) {
	for _, plain := range servers {
		plain := plain
		t.Run(plain.name, func(t *testing.T) {
			t.Parallel()
			s, err := startTLSServer(plain.name, plain.bin)
			if errors.Is(err, errNoTLS) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.stop()
			testACLUserOverTLS(t, s)
		})
	}
}

func testACLUserOverTLS(t *testing.T, s *server) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := s.client(t)
	createDocumentedAppUser(t, admin)
	first, err := connectAsDocumented(s.addr, s.caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := connectAsDocumented(s.addr, s.caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	// Acquire, then renew by hand. The lease's deadline is the key's
	// PEXPIRETIME: a renewal 50 ms or more later moves it on, however slowly
	// the replies come.
	held, err := first.Acquire(ctx, "app1:job")
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	deadline := admin.PExpireTime(ctx, "app1:job").Val()
	eventually(t, 20*time.Second, "50 ms of the lease to pass", func() bool {
		return admin.PTTL(ctx, "app1:job").Val() < held.Lease()-50*time.Millisecond
	})
	if err := held.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if after := admin.PExpireTime(ctx, "app1:job").Val(); after <= deadline {
		t.Fatalf("the renewal did not move the deadline on: %v, then %v", deadline, after)
	}

	// A blocking hand-off: the second client waits until the first releases.
	type result struct {
		l   *dlock.Lock
		err error
	}
	granted := make(chan result, 1)
	go func() {
		l, err := second.Acquire(ctx, "app1:job")
		granted <- result{l, err}
	}()
	eventually(t, 20*time.Second, "the second client to queue", func() bool {
		return info(t, admin, "app1:job")["waiting"] == int64(1)
	})
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	r := <-granted
	if r.err != nil {
		t.Fatalf("hand-off: %v", r.err)
	}
	if r.l.Token() <= held.Token() {
		t.Fatalf("hand-off token %d not above %d", r.l.Token(), held.Token())
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n, _ := admin.Exists(ctx, "app1:job").Result(); n != 0 {
		t.Fatal("app1:job still exists after the releases")
	}

	// An election: one leads, the other sees it.
	election := first.Election("app1:leader")
	leading, err := election.Campaign(ctx, "node-a")
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	leader, err := second.Election("app1:leader").Leader(ctx)
	if err != nil || leader.Value != "node-a" || leader.Term != leading.Token() {
		t.Fatalf("leader: %+v, %v", leader, err)
	}
	if err := election.Resign(ctx); err != nil {
		t.Fatalf("resign: %v", err)
	}
	if leader, err := second.Election("app1:leader").Leader(ctx); err != nil || leader.Term != 0 {
		t.Fatalf("after resigning: %+v, %v", leader, err)
	}

	// Outside the user's key pattern: NOPERM, as a *dlock.ServerError.
	_, err = first.TryAcquire(ctx, "app2:job")
	var se *dlock.ServerError
	if !errors.As(err, &se) || se.Code != "NOPERM" {
		t.Fatalf("app2:job is outside ~app1:*, got %v", err)
	}
}
