package client_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock is the README's one ```go block: a whole program.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// TestReadmeProgramInAnotherModule follows README.md as a user of another
// module would: a fresh module, the README's program as its main.go, the
// `go mod edit -replace` and `go mod tidy` lines it gives (with the module
// proxy off, so that nothing but this checkout can be used), then the
// program run against a real server.
func TestReadmeProgramInAnotherModule(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The whole program is the one go block that is a main package; the
	// others are fragments of it (TLS options, say).
	var blocks [][][]byte
	for _, b := range goBlock.FindAllSubmatch(readme, -1) {
		if bytes.HasPrefix(bytes.TrimSpace(b[1]), []byte("package main")) {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d whole programs (go blocks of package main), want one", len(blocks))
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), blocks[0][1], 0o644); err != nil {
		t.Fatal(err)
	}
	s := startReal(t)
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off", "LC_ADDRESS="+s.addr)
	for _, args := range [][]string{
		{"mod", "init", "example.com/billing"},
		{"mod", "edit", "-replace", "github.com/locking-center/locking-center/client=" + here},
		{"mod", "tidy"},
		{"run", "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "run" && !strings.Contains(string(out), "held invoices/2026-11 with fencing token ") {
			t.Errorf("the README's program printed %q, want the fencing token it held the key with", out)
		}
	}
}
