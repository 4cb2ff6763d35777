package dlock_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The documented Go blocks: every ```go block of clients/go/README.md and
// of the Go section of docs/clients.md is compiled and run against the
// suite's first server (as tests/docs.rs runs the server's sessions).
//
// A block is the body of a function returning an error (it ends in
// `return ...`). Each becomes the run() of a main package of its own in a
// temporary module that requires this one through a replace directive, with
// the imports a reader would add and stubs of the helpers the block calls
// but does not define (payOrder, pay: each checks its arguments, a fence is
// positive and the lock's context live). "localhost:6379" becomes the test
// server's address. A block that does not compile, or whose run() returns
// an error, fails the suite.
//
// A marker comment on the line before a fence, `<!-- snippet: skip REASON -->`,
// leaves a block out, saying why.

type goBlock struct {
	name string
	code string
	skip string
}

var snippetSkip = regexp.MustCompile(`<!--\s*snippet:\s*skip\b(.*?)-->`)

func goBlocksOf(document, text string, offset int) []goBlock {
	lines := strings.Split(text, "\n")
	var found []goBlock
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		start := i + 1
		end := start
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		b := goBlock{name: fmt.Sprintf("%s:%d", document, offset+start+1), code: strings.Join(lines[start:end], "\n")}
		if i > 0 {
			if m := snippetSkip.FindStringSubmatch(lines[i-1]); m != nil {
				b.skip = strings.TrimSpace(m[1]) + " "
			}
		}
		found = append(found, b)
		i = end
	}
	return found
}

func docSection(t *testing.T, text, title string) (int, string) {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if line == "## "+title {
			end := i + 1
			for end < len(lines) && !strings.HasPrefix(lines[end], "## ") {
				end++
			}
			return i, strings.Join(lines[i:end], "\n")
		}
	}
	t.Fatalf("no ## %s section", title)
	return 0, ""
}

func documentedGoBlocks(t *testing.T) []goBlock {
	root := repoRoot()
	readme, err := os.ReadFile(filepath.Join(root, "clients", "go", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	offset, goSection := docSection(t, string(guide), "Go")
	blocks := goBlocksOf("clients/go/README.md", string(readme), 0)
	blocks = append(blocks, goBlocksOf("docs/clients.md#go", goSection, offset)...)
	fences := strings.Count(string(readme), "\n```go\n") + strings.Count(goSection, "\n```go\n")
	if len(blocks) != fences || len(blocks) == 0 {
		t.Fatalf("found %d go blocks, the documents have %d fences", len(blocks), fences)
	}
	return blocks
}

const snippetMain = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock/dlock/clients/go/dlock"
	"github.com/redis/go-redis/v9"
)

var (
	_ = errors.Is
	_ = time.Second
	_ = dlock.New
	_ = redis.NewClient
)

func checkFenced(ctx context.Context, order int, token int64) error {
	if order <= 0 || token <= 0 {
		return fmt.Errorf("order %d, token %d", order, token)
	}
	return ctx.Err() // the lock's context: live while the lock is held
}

func payOrder(ctx context.Context, order int, token int64) error { return checkFenced(ctx, order, token) }
func pay(ctx context.Context, order int, token int64) error      { return checkFenced(ctx, order, token) }

func run() error {
{{BODY}}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "{{NAME}}:", err)
		os.Exit(1)
	}
}
`

func TestDocumentedGoBlocks(t *testing.T) {
	if len(servers) == 0 {
		t.Skip("no server")
	}
	blocks := documentedGoBlocks(t)
	dir := t.TempDir()
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	module := filepath.Dir(here) // clients/go
	sum, err := os.ReadFile(filepath.Join(module, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(module, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	redisVersion := regexp.MustCompile(`github.com/redis/go-redis/v9 (v\S+)`).FindStringSubmatch(string(goMod))
	if redisVersion == nil {
		t.Fatal("go.mod names no go-redis version")
	}
	mod := fmt.Sprintf("module snippets\n\ngo 1.24\n\nrequire (\n\tgithub.com/dlock/dlock/clients/go v0.0.0\n\tgithub.com/redis/go-redis/v9 %s\n)\n\nreplace github.com/dlock/dlock/clients/go => %s\n",
		redisVersion[1], module)
	write := func(path, text string) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "go.mod"), mod)
	write(filepath.Join(dir, "go.sum"), string(sum))
	addr := servers[0].addr
	for i, b := range blocks {
		if b.skip != "" {
			continue
		}
		body := strings.ReplaceAll(b.code, `"localhost:6379"`, fmt.Sprintf("%q", addr))
		pkg := fmt.Sprintf("snippet%d", i)
		write(filepath.Join(dir, pkg, "main.go"), strings.NewReplacer("{{BODY}}", body, "{{NAME}}", b.name).Replace(snippetMain))
	}
	build := exec.Command("go", "build", "-mod=mod", "-o", filepath.Join(dir, "bin")+string(os.PathSeparator), "./...")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the documented Go blocks do not compile:\n%s", out)
	}
	for i, b := range blocks {
		b := b
		t.Run(fmt.Sprintf("block%d", i), func(t *testing.T) {
			if b.skip != "" {
				t.Skip(b.skip)
			}
			run := exec.Command(filepath.Join(dir, "bin", fmt.Sprintf("snippet%d", i)))
			done := make(chan error, 1)
			var out strings.Builder
			run.Stdout, run.Stderr = &out, &out
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- run.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s: %v\n%s", b.name, err, out.String())
				}
			case <-time.After(30 * time.Second):
				_ = run.Process.Kill()
				t.Fatalf("%s did not return within 30 s", b.name)
			}
		})
	}
}
