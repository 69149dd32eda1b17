// Package lctest runs the real server binary for tests: it builds it once
// per test process, the way a user does (go build of the module root),
// starts it on loopback ports the kernel picks, waits until it listens,
// collects its log, and stops it by its PID at the end of the test — never
// by name. It is for tests only.
//
// Every process it starts is stopped: SIGTERM at the test's cleanup (and
// SIGKILL if that is ignored for 15 s), or Kill when a test wants a crash.
package lctest

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// builds are the binaries built so far in this process, by build tags.
var (
	buildMu  sync.Mutex // guards builds and buildDir
	builds   = map[string]string{}
	buildDir string
)

// Root is the module root: the folder of the server's main package.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Binary builds the server (go build of the module root, with the build
// tags given, for instance "failpoints") once per test process and
// returns its path.
func Binary(t testing.TB, tags ...string) string {
	t.Helper()
	key := strings.Join(tags, ",")
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := builds[key]; ok {
		return bin
	}
	if buildDir == "" {
		dir, err := os.MkdirTemp("", "lctest-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = dir
	}
	bin := filepath.Join(buildDir, "locking-center")
	args := []string{"build", "-o"}
	if key != "" {
		bin += "-" + strings.ReplaceAll(key, ",", "-")
		args = append(args, bin, "-tags", key, ".")
	} else {
		args = append(args, bin, ".")
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of the server: %v\n%s", err, out)
	}
	builds[key] = bin
	return bin
}

// RemoveBinaries deletes what Binary built; TestMain calls it after the
// tests.
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
		buildDir = ""
		clear(builds)
	}
}

// FreePort returns a loopback address nobody listened on a moment ago, for
// the servers that must be told their address before they start.
//
// The port is below the kernel's ephemeral range: a port the kernel hands
// out for ":0" is also one it may give to any outgoing connection (a
// node dialling its peers, a client of a test running beside) between the
// pick and the server's own bind, which made "address already in use" a
// rare failure. Ports are not handed out twice in one test process.
func FreePort(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + FreeSharedPort(t, "127.0.0.1")
}

// FreeSharedPort returns a port below the ephemeral range that every one
// of hosts (loopback addresses such as "127.0.0.1" and "::1") could bind a
// moment ago; see FreePort.
func FreeSharedPort(t testing.TB, hosts ...string) string {
	t.Helper()
	lo, hi := portRange()
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if portsGiven[port] || !bindable(port, hosts) {
			continue
		}
		portsGiven[port] = true
		return strconv.Itoa(port)
	}
	t.Fatalf("no port in [%d, %d) free on %v", lo, hi, hosts)
	return ""
}

var (
	portMu     sync.Mutex       // guards portsGiven
	portsGiven = map[int]bool{} // ports FreeSharedPort returned in this process
)

// portRange is where FreeSharedPort picks: from 10000 up to the first
// ephemeral port (32768 when the kernel does not say).
func portRange() (lo, hi int) {
	lo, hi = 10000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if first, err := strconv.Atoi(f[0]); err == nil && first > lo+1000 {
			hi = first
		}
	}
	return lo, hi
}

func bindable(port int, hosts []string) bool {
	var open []net.Listener
	defer func() {
		for _, l := range open {
			l.Close()
		}
	}()
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		open = append(open, l)
	}
	return true
}

// SyncBuffer collects what a process or a logger writes while a test reads
// it. It is safe for concurrent use.
type SyncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// LineWith returns the first line written that contains what, or "".
func (b *SyncBuffer) LineWith(what string) string {
	for line := range strings.SplitSeq(b.String(), "\n") {
		if strings.Contains(line, what) {
			return line
		}
	}
	return ""
}

// Server is one running server binary.
type Server struct {
	// Addr and Web are the lock port's and the web port's addresses.
	Addr, Web string
	// Cmd is the process; Cmd.Process.Pid its PID.
	Cmd *exec.Cmd

	bin     string
	env     []string
	log     *SyncBuffer
	done    chan struct{} // closed when the process has exited and its log is read
	exitErr error
}

var startedRE = regexp.MustCompile(`msg="locking-center started[^"]*".* bind=(\S+) web=(\S+)`)

// Start runs the server binary with env added to a clean environment
// (PATH only) — BIND_ADDRESS and WEB_ADDRESS are 127.0.0.1:0 unless env
// sets them — and returns once it has logged the addresses it listens on
// (with DATA_PATH, once its log is replayed and the lock port open). It is
// stopped with SIGTERM at the end of the test.
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	return StartBinary(t, Binary(t), env...)
}

// StartBinary is Start with another build of the server (Binary's tags).
func StartBinary(t testing.TB, bin string, env ...string) *Server {
	t.Helper()
	s := &Server{bin: bin, env: env}
	s.start(t, env)
	t.Cleanup(func() {
		if err := s.Stop(); err != nil && !s.exitedBySignal() {
			t.Logf("server exit: %v", err)
		}
	})
	return s
}

func (s *Server) start(t testing.TB, env []string) {
	t.Helper()
	full := []string{"PATH=" + os.Getenv("PATH"), "BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=127.0.0.1:0"}
	s.Cmd = exec.Command(s.bin)
	s.Cmd.Env = append(full, env...) // later entries win
	if s.log == nil {                // a restart keeps the log of the run before
		s.log = &SyncBuffer{}
	}
	s.done = make(chan struct{})
	pipe, err := s.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cmd.Start(); err != nil {
		t.Fatalf("start the server: %v", err)
	}
	addrs := make(chan []string, 1)
	go func() {
		// Ends when the process exits and its stderr closes.
		defer close(s.done)
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.log, line)
			if m := startedRE.FindStringSubmatch(line); m != nil {
				select {
				case addrs <- m[1:]:
				default:
				}
			}
		}
		s.exitErr = s.Cmd.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	select {
	case a := <-addrs:
		s.Addr, s.Web = a[0], a[1]
		s.awaitReady(t, env, deadline)
	case <-s.done:
		t.Fatalf("the server exited before it listened (%v):\n%s", s.exitErr, s.Logs())
	case <-time.After(30 * time.Second):
		_ = s.Kill()
		t.Fatalf("the server did not log its addresses in 30 s:\n%s", s.Logs())
	}
}

// awaitReady waits until /readyz answers 200 (with DATA_PATH: the log is
// replayed). A server whose web port is off or speaks TLS, and a cluster
// node (ready only once a quorum has elected a leader), is taken as ready
// once it listens: the test checks what it needs itself.
func (s *Server) awaitReady(t testing.TB, env []string, deadline time.Time) {
	t.Helper()
	for _, e := range env {
		if e == "WEB_ADDRESS=off" || strings.HasPrefix(e, "TLS_CERT=") && e != "TLS_CERT=" ||
			strings.HasPrefix(e, "CLUSTER_PEERS=") && e != "CLUSTER_PEERS=" ||
			strings.HasPrefix(e, "CLUSTER_JOIN=") && e != "CLUSTER_JOIN=" {
			return
		}
	}
	hc := http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get("http://" + s.Web + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.done:
			t.Fatalf("the server exited before it was ready (%v):\n%s", s.exitErr, s.Logs())
		default:
		}
		if time.Now().After(deadline) {
			_ = s.Kill()
			t.Fatalf("the server was not ready in 30 s (%v):\n%s", err, s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logs returns what the server has logged so far.
func (s *Server) Logs() string { return s.log.String() }

// Stop sends SIGTERM, as in production, and waits for the exit (SIGKILL
// after 15 s). It returns the exit error, nil for status 0; stopping a
// server that has exited returns how it exited.
func (s *Server) Stop() error {
	select {
	case <-s.done:
		return s.exitErr
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("the server ignored SIGTERM for 15 s (%v)", s.exitErr)
	}
	return s.exitErr
}

// Kill kills the server with SIGKILL, a crash, and waits for it to end.
func (s *Server) Kill() error {
	_ = s.Cmd.Process.Kill()
	<-s.done
	return s.exitErr
}

// Exited is closed once the process has ended and its log is read.
func (s *Server) Exited() <-chan struct{} { return s.done }

// ExitErr is how the process ended; valid once Exited is closed.
func (s *Server) ExitErr() error { return s.exitErr }

func (s *Server) exitedBySignal() bool {
	st := s.Cmd.ProcessState
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// Restart stops the server (SIGTERM) and starts it again on the same
// addresses with the same environment, so the same DATA_PATH; env is
// added to it.
func (s *Server) Restart(t testing.TB, env ...string) {
	t.Helper()
	if err := s.Stop(); err != nil && !s.exitedBySignal() {
		t.Fatalf("stop before the restart: %v\n%s", err, s.Logs())
	}
	s.env = append(s.env, env...)
	s.start(t, append(append([]string(nil), s.env...), "BIND_ADDRESS="+s.Addr, "WEB_ADDRESS="+s.Web))
}
