package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/lctest"
	"github.com/locking-center/locking-center/web/api"
	"github.com/locking-center/locking-center/web/keypath"
	"go.uber.org/goleak"
)

// cliBin is the real lc-cli, built once by TestMain; the server comes
// from lctest.
var cliBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lc-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		os.Exit(1)
	}
	code := func() int {
		cliBin = filepath.Join(dir, "lc-cli")
		if out, err := exec.Command("go", "build", "-o", cliBin, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build of lc-cli: %v\n%s", err, out)
			return 1
		}
		code := m.Run()
		lctest.RemoveBinaries()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				return 1
			}
		}
		return code
	}()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a real locking-center process on loopback ports, with what
// lc-cli's tests ask of it.
type server struct{ *lctest.Server }

// startServer starts the server binary and stops it at the end of the test.
func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	return &server{lctest.Start(t, env...)}
}

// env is the environment of an lc-cli talking to s.
func (s *server) env(extra ...string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "LC_ADDRESS=" + s.Addr, "LC_WEB_ADDRESS=" + s.Web}
	return append(env, extra...)
}

// cli prepares an lc-cli run with the given environment.
func cli(env []string, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	cmd := exec.Command(cliBin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return cmd, &stdout, &stderr
}

// run runs lc-cli to its end and returns its exit status, stdout, stderr.
func run(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd, stdout, stderr := cli(env, args...)
	err := cmd.Run()
	return exitOf(t, cmd, err), stdout.String(), stderr.String()
}

func exitOf(t *testing.T, cmd *exec.Cmd, err error) int {
	t.Helper()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %v: %v", cmd.Args, err)
	}
	return cmd.ProcessState.ExitCode()
}

// wait waits for a started lc-cli and returns its exit status.
func wait(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	return exitOf(t, cmd, cmd.Wait())
}

// eventually polls cond until it holds or 10s pass.
// The optional explain tells what was seen instead.
func eventually(t *testing.T, what string, cond func() bool, explain ...func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			var seen []string
			for _, e := range explain {
				seen = append(seen, e())
			}
			t.Fatalf("timed out waiting for %s %s", what, strings.Join(seen, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// key reads one key from the JSON API; nil when it is not held.
func (s *server) key(t *testing.T, key string) *api.KeyDetail {
	t.Helper()
	resp, err := http.Get("http://" + s.Web + "/api/v1/keys/" + keypath.Encode(key))
	if err != nil {
		t.Fatalf("JSON API: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusNotFound:
		if !json.Valid(body) {
			t.Fatalf("GET /api/v1/keys/%s: 404 without a JSON body %q: the JSON API (web/README.md) is not served", key, body)
		}
		return nil
	case http.StatusOK:
	default:
		t.Fatalf("GET /api/v1/keys/%s: %s %s", key, resp.Status, body)
	}
	var k api.KeyDetail
	if err := json.Unmarshal(body, &k); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return &k
}

// free reports whether key is free, by taking and giving it back.
func (s *server) free(t *testing.T, key string) bool {
	t.Helper()
	code, _, errOut := run(t, s.env(), "trylock", key)
	switch code {
	case 0:
		if c, _, e := run(t, s.env(), "unlock", key); c != 0 {
			t.Fatalf("unlock after trylock: %d %s", c, e)
		}
		return true
	case exitNotAcquired:
		return false
	}
	t.Fatalf("trylock %s: status %d: %s", key, code, errOut)
	return false
}

// waiters returns how many wait for key (0 when it is not held).
func (s *server) waiters(t *testing.T, key string) int {
	t.Helper()
	k := s.key(t, key)
	if k == nil {
		return 0
	}
	if len(k.Queue) != k.Waiters {
		t.Fatalf("key %s: waiters %d but queue %v", key, k.Waiters, k.Queue)
	}
	return k.Waiters
}

// hold takes key with "lc-cli lock KEY" (no command): it stays held.
func (s *server) hold(t *testing.T, key string, env ...string) {
	t.Helper()
	if code, _, errOut := run(t, s.env(env...), "lock", key); code != 0 {
		t.Fatalf("lock %s: status %d: %s", key, code, errOut)
	}
}

func TestExitStatusPassesThrough(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, c := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 255", 255},
		{"kill -KILL $$", 128 + 9}, // killed: the key is still released
		{"kill -TERM $$", 128 + 15},
		{`test "$LC_KEY" = pass/through && test -n "$LC_ADDRESS"`, 0},
	} {
		code, _, errOut := run(t, s.env(), "lock", "pass/through", "--", "sh", "-c", c.script)
		if code != c.want {
			t.Errorf("lock -- sh -c %q: status %d, want %d; stderr %q", c.script, code, c.want, errOut)
		}
		if errOut != "" {
			t.Errorf("lock -- sh -c %q: stderr %q, want nothing", c.script, errOut)
		}
		if !s.free(t, "pass/through") {
			t.Fatalf("after sh -c %q the key is still held", c.script)
		}
	}
}

func TestCommandNotRunnable(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	code, _, errOut := run(t, s.env(), "lock", "nf", "--", "no-such-command-here")
	if code != exitNotFound || !strings.Contains(errOut, "cannot run no-such-command-here") {
		t.Errorf("missing command: status %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, s.env(), "lock", "nf", "--", t.TempDir())
	if code != exitCannotRun {
		t.Errorf("directory as command: status %d, want 126; stderr %q", code, errOut)
	}
	if !s.free(t, "nf") {
		t.Fatal("key held after the command could not run")
	}
}

func TestSignalsReachTheCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	// The command traps each signal with its own exit status, so the status
	// proves which signal arrived (and that it was passed on, not the
	// command killed some other way).
	script := `trap 'exit 11' INT; trap 'exit 12' TERM; trap 'exit 13' HUP; trap 'exit 14' QUIT
echo $$ > "$1"; while :; do sleep 0.02; done`
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 11}, {syscall.SIGTERM, 12}, {syscall.SIGHUP, 13}, {syscall.SIGQUIT, 14}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			key := "fwd/" + c.sig.String()
			pidFile := filepath.Join(t.TempDir(), "pid")
			cmd, _, stderr := cli(s.env(), "lock", key, "--", "sh", "-c", script, "sh", pidFile)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the command to start", func() bool { b, _ := os.ReadFile(pidFile); return len(b) > 0 })
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if code := wait(t, cmd); code != c.want {
				t.Errorf("status %d, want %d; stderr %q", code, c.want, stderr)
			}
			if !s.free(t, key) {
				t.Error("key still held")
			}
		})
	}
}

func TestSIGTERMWhileRunning(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	// The shape of the README's demo: sh does not exec the sleep, so sh
	// and sleep are two processes, and both must end.
	for _, script := range []string{`echo $$ > "$1"; sleep 60; exit 7`, `echo $$ > "$1"; sleep 60 & wait; exit 7`} {
		pidFile := filepath.Join(t.TempDir(), "pid")
		cmd, _, stderr := cli(s.env(), "lock", "term/run", "--", "sh", "-c", script, "sh", pidFile)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		eventually(t, "the command to start", func() bool {
			b, _ := os.ReadFile(pidFile)
			_, err := fmt.Sscan(string(b), &pid)
			return err == nil
		})
		// The command runs in a process group of its own, led by sh.
		if live := liveInGroup(t, pid); len(live) == 0 {
			t.Fatalf("%q: no process in the group of the command's pid %d: it does not lead its own group", script, pid)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := wait(t, cmd); code != 143 {
			t.Errorf("%q: status %d, want 143; stderr %q", script, code, stderr)
		}
		eventually(t, "every process of the command to end", func() bool { return len(liveInGroup(t, pid)) == 0 },
			func() string { return fmt.Sprintf("still alive: %v", liveInGroup(t, pid)) })
		if !s.free(t, "term/run") {
			t.Errorf("%q: key still held", script)
		}
	}
}

// liveInGroup lists the processes of group pgid that are not zombies.
func liveInGroup(t *testing.T, pgid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // it ended meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split
		// after its closing parenthesis.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		var state string
		var ppid, pgrp int
		if _, err := fmt.Sscan(rest, &state, &ppid, &pgrp); err == nil && pgrp == pgid && state != "Z" {
			live = append(live, string(b[:bytes.LastIndexByte(b, ')')+1]))
		}
	}
	return live
}

func TestSignalWhileWaitingLeavesTheQueue(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			key := "waiting/" + c.sig.String()
			s.hold(t, key)
			ran := filepath.Join(t.TempDir(), "ran")
			cmd, _, stderr := cli(s.env(), "lock", key, "--", "touch", ran)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the waiter to queue", func() bool { return s.waiters(t, key) == 1 })
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if code := wait(t, cmd); code != c.want {
				t.Errorf("status %d, want %d; stderr %q", code, c.want, stderr)
			}
			if n := strings.Count(stderr.String(), "\n"); n != 1 || !strings.Contains(stderr.String(), "left the queue") {
				t.Errorf("stderr %q, want one line saying it left the queue", stderr)
			}
			eventually(t, "the queue to empty", func() bool { return s.waiters(t, key) == 0 })
			if code, _, e := run(t, s.env(), "unlock", key); code != 0 {
				t.Fatalf("unlock: %d %s", code, e)
			}
			if !s.free(t, key) {
				t.Error("the withdrawn waiter was granted the key")
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the command ran although lc-cli was stopped while waiting")
			}
		})
	}
}

func TestTimeoutWithdrawsTheWaiter(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "slow")
	for _, args := range [][]string{
		{"lock", "slow", "--timeout", "200ms", "--", "true"},
		{"lock", "--timeout", "0.2", "slow"},
		{"wait", "slow", "--timeout", "200ms"},
	} {
		start := time.Now()
		code, _, errOut := run(t, s.env(), args...)
		if code != exitNotAcquired || !strings.Contains(errOut, "not acquired within") {
			t.Errorf("%v: status %d, stderr %q; want 1 and a timeout message", args, code, errOut)
		}
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Errorf("%v: returned after %v, before its timeout", args, d)
		}
		eventually(t, "the queue to empty", func() bool { return s.waiters(t, "slow") == 0 })
		k := s.key(t, "slow")
		if k == nil || len(k.Queue) != 0 {
			t.Fatalf("%v: key after the timeout: %+v, want held with an empty queue", args, k)
		}
	}
}

func TestTryLock(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	if code, _, e := run(t, s.env(), "trylock", "try"); code != 0 {
		t.Fatalf("trylock on a free key: %d %s", code, e)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"trylock", "try"}, 1},
		{[]string{"trylock", "try", "--conflict-exit-code", "75"}, 75},
		{[]string{"trylock", "--conflict-exit-code=0", "try", "--", "false"}, 0},
		{[]string{"trylock", "try", "--conflict-exit-code", "9", "--", "true"}, 9},
	} {
		if code, _, e := run(t, s.env(), c.args...); code != c.want {
			t.Errorf("%v while held: status %d, want %d; stderr %q", c.args, code, c.want, e)
		}
	}
	if code, _, e := run(t, s.env(), "unlock", "try"); code != 0 {
		t.Fatalf("unlock: %d %s", code, e)
	}
	if code, _, e := run(t, s.env(), "trylock", "try", "--conflict-exit-code", "75", "--", "sh", "-c", "exit 4"); code != 4 {
		t.Errorf("trylock -- exit 4 on a free key: status %d; stderr %q", code, e)
	}
	if !s.free(t, "try") {
		t.Error("trylock -- CMD left the key held")
	}
}

func TestWaitAndUnlock(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "w")
	cmd, _, stderr := cli(s.env(), "wait", "w")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code, _, e := run(t, s.env(), "unlock", "w"); code != 0 {
		t.Fatalf("unlock: %d %s", code, e)
	}
	if code := wait(t, cmd); code != 0 {
		t.Errorf("wait: status %d; stderr %q", code, stderr)
	}
	if !s.free(t, "w") {
		t.Error("wait left the key held")
	}
	code, _, errOut := run(t, s.env(), "unlock", "w")
	if code != exitServer || !strings.Contains(errOut, "not held") {
		t.Errorf("unlock of a free key: status %d, stderr %q; want 3", code, errOut)
	}
}

func TestResets(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "r/key")
	cmd, _, stderr := cli(s.env(), "lock", "r/key", "--", "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiter to queue", func() bool { return s.waiters(t, "r/key") == 1 })
	if code, _, e := run(t, s.env(), "reset", "key", "r/key"); code != 0 {
		t.Fatalf("reset key: %d %s", code, e)
	}
	if code := wait(t, cmd); code != exitNotAcquired || !strings.Contains(stderr.String(), "reset") {
		t.Errorf("waiter of a reset key: status %d, stderr %q; want 1", code, stderr)
	}

	s.hold(t, "r/a", "LC_SOURCE=job-7")
	s.hold(t, "r/b", "LC_SOURCE=job-7")
	s.hold(t, "r/other", "LC_SOURCE=job-9")
	waiter, _, _ := cli(s.env("LC_SOURCE=job-7"), "lock", "r/other", "--", "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "job-7 to queue for r/other", func() bool { return s.waiters(t, "r/other") == 1 })
	if code, _, e := run(t, s.env(), "reset", "source", "job-7"); code != 0 {
		t.Fatalf("reset source: %d %s", code, e)
	}
	if !s.free(t, "r/a") || !s.free(t, "r/b") {
		t.Error("reset source left keys held")
	}
	if code := wait(t, waiter); code != exitNotAcquired {
		t.Errorf("job-7's waiter after reset source: status %d, want 1", code)
	}
	if s.free(t, "r/other") {
		t.Error("reset source job-7 released job-9's key")
	}
	s.hold(t, "r/c", "LC_SOURCE=job-8")
	if code, _, e := run(t, s.env("LC_SOURCE=job-8"), "reset", "source"); code != 0 {
		t.Fatalf("reset source (own): %d %s", code, e)
	}
	if !s.free(t, "r/c") {
		t.Error("reset source without SOURCE did not reset LC_SOURCE's keys")
	}
}

// TestKeysBehindPassword: with WEB_PASSWORD on the server, LC_WEB_ADDRESS
// may be a URL carrying the basic-auth user and password.
func TestKeysBehindPassword(t *testing.T) {
	t.Parallel()
	s := startServer(t, "WEB_PASSWORD=s3cret")
	s.hold(t, "guarded")
	code, stdout, errOut := run(t, s.env(), "keys", "--web-address", "http://admin:s3cret@"+s.Web)
	if code != 0 || !strings.Contains(stdout, "guarded") {
		t.Errorf("keys with the password in the URL: %d %q %q", code, stdout, errOut)
	}
	if code, _, _ := run(t, s.env(), "keys", "--web-address", "http://admin:wrong@"+s.Web); code == 0 {
		t.Error("keys with a wrong password succeeded")
	}
}

func TestAddressAndSource(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dead := deadAddress(t)
	// LC_ADDRESS alone.
	if code, _, e := run(t, s.env("LC_SOURCE=ci-runner"), "lock", "addr"); code != 0 {
		t.Fatalf("lock with LC_ADDRESS: %d %s", code, e)
	}
	if k := s.key(t, "addr"); k == nil || k.Source != "ci-runner" {
		t.Errorf("key taken with LC_SOURCE=ci-runner: %+v", k)
	}
	// --address wins over LC_ADDRESS, before the command or after KEY.
	env := []string{"PATH=" + os.Getenv("PATH"), "LC_ADDRESS=" + dead}
	if code, _, e := run(t, env, "--address", s.Addr, "unlock", "addr"); code != 0 {
		t.Errorf("--address before the command: %d %s", code, e)
	}
	if code, _, e := run(t, env, "trylock", "addr", "--address", s.Addr, "--source", "x", "--", "true"); code != 0 {
		t.Errorf("--address after KEY: %d %s", code, e)
	}
	// With LC_ADDRESS pointing nowhere, the env is what is used.
	if code, _, _ := run(t, env, "trylock", "addr"); code != exitServer {
		t.Errorf("trylock with LC_ADDRESS at a dead port: status %d, want 3", code)
	}
}

// deadAddress returns a loopback address nobody listens on.
func deadAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestMissingServer(t *testing.T) {
	t.Parallel()
	dead := deadAddress(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "LC_ADDRESS=" + dead, "LC_WEB_ADDRESS=" + dead}
	for _, args := range [][]string{
		{"lock", "k", "--", "true"}, {"lock", "k"}, {"trylock", "k"}, {"wait", "k"},
		{"unlock", "k"}, {"reset", "key", "k"}, {"reset", "source", "s"}, {"keys"},
	} {
		code, stdout, stderr := run(t, env, args...)
		if code != exitServer {
			t.Errorf("%v: status %d, want 3", args, code)
		}
		if stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, dead) {
			t.Errorf("%v: stdout %q, stderr %q; want one line naming %s", args, stdout, stderr, dead)
		}
	}
}

// TestReleaseFailureIsReported: the server goes away while CMD runs and
// CMD ends before the TTL has passed; the release cannot be made, and
// lc-cli says in one line that the server released the key at expiry. It
// exits with CMD's status.
func TestReleaseFailureIsReported(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	cmd, _, stderr := cli(s.env(), "lock", "lost", "--ttl", "1s", "--", "sh", "-c",
		`touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done; exit 5`, "sh", ready, goOn)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the command to start", func() bool { _, err := os.Stat(ready); return err == nil })
	s.Stop()
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd); code != 5 {
		t.Errorf("status %d, want the command's 5; stderr %q", code, stderr)
	}
	if got := stderr.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "lost before the release") {
		t.Errorf("stderr %q, want one line saying the session was lost before the release", got)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	code, stdout, _ := run(t, s.env(), "keys")
	if code != 0 || !strings.Contains(stdout, "no key is held") {
		t.Errorf("keys on an empty server: %d %q", code, stdout)
	}
	s.hold(t, "deploy/prod", "LC_SOURCE=alice")
	s.hold(t, "cron/backup", "LC_SOURCE=cron-host-1")
	code, stdout, errOut := run(t, s.env(), "keys")
	if code != 0 {
		t.Fatalf("keys: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") {
		t.Fatalf("keys table:\n%s", stdout)
	}
	col := strings.Index(lines[0], "SOURCE")
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) != 4 || f[3] != "0" || strings.Index(l, f[1]) != col {
			t.Errorf("row %q does not line up with the header %q", l, lines[0])
		}
	}
	code, stdout, _ = run(t, s.env(), "keys", "--json", "--prefix", "deploy/")
	var keys []api.KeyDetail
	if err := json.Unmarshal([]byte(stdout), &keys); code != 0 || err != nil || len(keys) != 1 || keys[0].Source != "alice" {
		t.Errorf("keys --json --prefix deploy/: %d %q (%v)", code, stdout, err)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=" + os.Getenv("PATH"), "LC_ADDRESS=" + deadAddress(t)}
	for _, args := range [][]string{
		{}, {"frobnicate"}, {"lock"}, {"lock", "a", "b"}, {"lock", "k", "--"}, {"lock", "k", "--timeout", "soon"},
		{"lock", "k", "--timeout", "-1s"}, {"trylock", "k", "--conflict-exit-code", "300"}, {"unlock"},
		{"wait", "k", "--", "true"}, {"reset"}, {"reset", "nothing"}, {"reset", "key"},
		{"lock", strings.Repeat("k", 128)}, {"--source", strings.Repeat("s", 128), "lock", "k"},
		{"--address", "nohost", "lock", "k"}, {"keys", "extra"}, {"version", "x"}, {"--bogus", "lock", "k"},
	} {
		code, stdout, stderr := run(t, env, args...)
		if code != exitUsage {
			t.Errorf("%q: status %d, want 2; stderr %q", args, code, stderr)
		}
		if len(args) > 0 && (stdout != "" || strings.Count(stderr, "\n") != 1) {
			t.Errorf("%q: stdout %q, stderr %q; want one line on stderr", args, stdout, stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			code, stdout, stderr := run(t, env, args...)
			if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage: lc-cli "+c.name) || !strings.Contains(stdout, "Example") {
				t.Errorf("%q: status %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
			}
			if c.name != "version" && c.name != "help" && !strings.Contains(stdout, "Exit status") {
				t.Errorf("%q: no exit statuses in the help", args)
			}
		}
	}
	code, stdout, _ := run(t, env, "--help")
	for _, want := range []string{"LC_ADDRESS", "LC_SOURCE", "LC_WEB_ADDRESS", "Exit status", "130", "143"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("lc-cli --help: status %d, no %q in:\n%s", code, want, stdout)
		}
	}
	if code, stdout, _ := run(t, env, "version"); code != 0 || !strings.HasPrefix(stdout, "lc-cli ") {
		t.Errorf("version: %d %q", code, stdout)
	}
}
