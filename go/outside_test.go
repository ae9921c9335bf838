package shmring

// Outside a built checkout (the package's folder copied alone, as a project
// vendoring it would), the tests that need the repository's programs and files
// skip, each saying what is missing and how to get it; with
// SHMRING_GO_REQUIRE_PEERS=1 (make test-go) the same tests fail instead.

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The tests that need the repository: its header, its README, its programs.
const needRepository = "^(TestEveryCStatusHasASentinel|TestReadmeSnippetsRun|TestGoProducerIntoRecorders|" +
	"TestRustProducerIntoGoRecorder|TestRustProducerIntoGoConsumer|TestGoProducerIntoPythonConsumer)$/^shmring_record$"

func TestOutsideACheckoutTheTestsSkipSayingWhy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "go")
	must(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		must(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755))
		return os.WriteFile(filepath.Join(dir, path), b, 0o644)
	}))
	run := func(require bool) (string, error) {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-count=1", "-v", "-run", needRepository, ".")
		cmd.Dir = dir
		for _, kv := range os.Environ() {
			switch strings.SplitN(kv, "=", 2)[0] {
			case "CARGO_TARGET_DIR", "SHMRING_PYTHON", "SHMRING_GO_REQUIRE_PEERS":
			default:
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if require {
			cmd.Env = append(cmd.Env, "SHMRING_GO_REQUIRE_PEERS=1")
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(false)
	if err != nil {
		t.Fatalf("outside a checkout: %v\n%s", err, out)
	}
	for _, want := range []string{
		"--- SKIP: TestEveryCStatusHasASentinel", "../include/shmring.h is missing: the repository's C header",
		"--- SKIP: TestReadmeSnippetsRun", "../README.md is missing",
		"--- SKIP: TestGoProducerIntoRecorders/shmring_record", "../target/release/shmring is missing: cargo build",
		"--- SKIP: TestRustProducerIntoGoRecorder", "--- SKIP: TestRustProducerIntoGoConsumer",
		"../target/release/ring-peer is missing", "--- SKIP: TestGoProducerIntoPythonConsumer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("outside a checkout, the output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--- FAIL") {
		t.Errorf("a test failed outside a checkout:\n%s", out)
	}
	// Required (make test-go): the same tests fail, saying what is missing.
	out, err = run(true)
	if err == nil || !strings.Contains(out, "--- FAIL: TestEveryCStatusHasASentinel") ||
		!strings.Contains(out, "../target/release/shmring is missing") {
		t.Errorf("with SHMRING_GO_REQUIRE_PEERS=1: %v\n%s", err, out)
	}
}
