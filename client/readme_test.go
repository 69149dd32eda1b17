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

// goBlock is one of the README's ```go blocks.
var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// readmePrograms returns the README's whole programs: its go blocks that
// are a main package.
func readmePrograms(t *testing.T) [][]byte {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var progs [][]byte
	for _, b := range goBlock.FindAllSubmatch(readme, -1) {
		if bytes.HasPrefix(bytes.TrimSpace(b[1]), []byte("package main")) {
			progs = append(progs, b[1])
		}
	}
	if len(progs) != 2 {
		t.Fatalf("README.md has %d whole programs (go blocks of package main), want two: the quick start and TLS", len(progs))
	}
	return progs
}

// buildAsUser follows README.md as a user of another module would: a
// fresh module, prog as its main.go, the `go mod edit -replace` and `go
// mod tidy` lines it gives (with the module proxy off, so that nothing but
// this checkout can be used), then go build. It returns the program.
func buildAsUser(t *testing.T, prog []byte) string {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), prog, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	for _, args := range [][]string{
		{"mod", "init", "example.com/billing"},
		{"mod", "edit", "-replace", "github.com/locking-center/locking-center/client=" + here},
		{"mod", "tidy"},
		{"build", "-o", "prog", "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "prog")
}

// runProgram runs prog with env added and checks that it printed want.
func runProgram(t *testing.T, prog, want string, env ...string) {
	t.Helper()
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("the README's program with %v: %v, printed %q; want %q", env, err, out, want)
	}
}

// TestReadmeProgramInAnotherModule: the quick start against one server,
// and against a cluster's three nodes given as LC_ADDRESS, a dead address
// first, as the README says to run it.
func TestReadmeProgramInAnotherModule(t *testing.T) {
	prog := buildAsUser(t, readmePrograms(t)[0])
	const want = "held invoices/2026-11 with fencing token "
	runProgram(t, prog, want, "LC_ADDRESS="+startReal(t).addr)
	list := []string{deadAddress(t)}
	for _, nd := range startCluster(t) {
		list = append(list, nd.addr)
	}
	for range 3 {
		runProgram(t, prog, want, "LC_ADDRESS="+strings.Join(list, ","))
	}
}

// TestReadmeTLSProgram: the README's TLS program against a server that
// asks for a client certificate, with the variables it reads.
func TestReadmeTLSProgram(t *testing.T) {
	prog := buildAsUser(t, readmePrograms(t)[1])
	dir := t.TempDir()
	ca := newTestCA(t)
	caPath, certPath, keyPath := ca.write(t, dir, "server", false)
	_, clientCert, clientKey := ca.write(t, dir, "client", true)
	srv := startReal(t, "TLS_CERT="+certPath, "TLS_KEY="+keyPath, "TLS_CLIENT_CA="+caPath)
	runProgram(t, prog, "held reports/daily over TLS with fencing token ",
		"LC_ADDRESS="+srv.addr, "LC_TLS_CA="+caPath, "LC_TLS_CERT="+clientCert, "LC_TLS_KEY="+clientKey)
}
