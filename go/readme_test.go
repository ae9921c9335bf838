package shmring

// Every Go snippet of README.md, docs/GUIDE.md and go/README.md runs as written: each is built as
// a program of its own against this package and run; the ring names it uses
// (cam0) are made unique per run, and none may be left behind.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

func snippets(t *testing.T) map[string]string {
	out := map[string]string{}
	top := peer(t, "../README.md", "the repository's README: run the tests in a checkout")
	guide := peer(t, "../docs/GUIDE.md", "the repository's guide: run the tests in a checkout")
	for path, label := range map[string]string{top: "README.md", guide: "docs/GUIDE.md", "README.md": "go/README.md"} {
		b, err := os.ReadFile(path)
		must(t, err)
		for i, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(b, -1) {
			out[fmt.Sprintf("%s#%d", label, i+1)] = string(m[1])
		}
	}
	return out
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	must(t, err)
	return a
}

func TestReadmeSnippetsRun(t *testing.T) {
	snips := snippets(t)
	var docs []string
	for name := range snips {
		docs = append(docs, strings.SplitN(name, "#", 2)[0])
	}
	seen := map[string]bool{}
	for _, d := range docs {
		seen[d] = true
	}
	if !seen["README.md"] || !seen["docs/GUIDE.md"] || !seen["go/README.md"] || len(snips) < 4 {
		t.Fatalf("snippets found: %v", docs)
	}
	here := mustAbs(t, ".")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for name, code := range snips {
		code := code
		t.Run(name, func(t *testing.T) {
			if !strings.HasPrefix(code, "package main") {
				t.Fatal("a Go snippet is a whole program (package main)")
			}
			ring := fmt.Sprintf("shmring-go-doc-%d-%d", os.Getpid(), time.Now().UnixNano())
			code = strings.ReplaceAll(code, `"cam0"`, fmt.Sprintf("%q", ring))
			t.Cleanup(func() {
				if _, err := os.Stat("/dev/shm/" + ring); err == nil {
					os.Remove("/dev/shm/" + ring)
					t.Errorf("the snippet left /dev/shm/%s", ring)
				}
			})
			dir := t.TempDir()
			mod := fmt.Sprintf("module snippet\n\ngo 1.19\n\nrequire shmring v0.0.0\n\nreplace shmring => %s\n", here)
			must(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(code), 0o644))
			build := exec.Command(gobin, "build", "-buildvcs=false", "-o", "snippet", ".")
			build.Dir = dir
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build: %v\n%s\n%s", err, out, code)
			}
			run := exec.Command(filepath.Join(dir, "snippet"))
			run.Dir = dir
			done := make(chan struct{})
			go func() {
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					run.Process.Kill()
				}
			}()
			out, err := run.CombinedOutput()
			close(done)
			if err != nil {
				t.Fatalf("run: %v\n%s\n%s", err, out, code)
			}
		})
	}
}
