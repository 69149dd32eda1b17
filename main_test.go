package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/internal/lctest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	lctest.RemoveBinaries()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serverBinary builds the server once per test run, the way a user does.
func serverBinary(t testing.TB) string { return lctest.Binary(t) }

// process is a running server binary.
type process = lctest.Server

// startBinary runs the server with env added to a clean environment on
// ports the kernel picks, and waits until it is ready. It is stopped with
// SIGTERM at cleanup.
func startBinary(t testing.TB, env ...string) *process { return lctest.Start(t, env...) }

// raw sends a raw frame and returns the one-byte answer (0 if none).
func raw(t testing.TB, addr string, frame []byte) byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if n, _ := c.Read(b[:]); n == 1 {
		return b[0]
	}
	return 0
}

func TestBinaryRawSocketAndClient(t *testing.T) {
	p := startBinary(t)
	// The README's example: \x01\x03abc\x00 is Lock "abc" with no source.
	if got := raw(t, p.Addr, []byte("\x01\x03abc\x00")); got != '+' {
		t.Fatalf("raw lock answered %q", got)
	}
	c := client.New(p.Addr, client.WithSource("e2e"))
	ctx := context.Background()
	if err := c.TryLock(ctx, "abc"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock on a held key = %v", err)
	}
	if err := c.Unlock(ctx, "abc"); err != nil {
		t.Fatal(err)
	}
	if err := c.Lock(ctx, "abc"); err != nil {
		t.Fatal(err)
	}
	if got := raw(t, p.Addr, []byte{9, 1, 'x', 0}); got != '-' {
		t.Fatalf("unknown action answered %q", got)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("SIGTERM: exit %v, want status 0\n%s", err, p.Logs())
	}
	if !strings.Contains(p.Logs(), "version=") {
		t.Fatalf("no version in the start-up log:\n%s", p.Logs())
	}
}

// TestBinaryFIFOAndGhost: 20 waiters arriving one after another are granted
// in arrival order, and a waiter killed mid-queue never gets the key.
func TestBinaryFIFOAndGhost(t *testing.T) {
	p := startBinary(t)
	ctx := context.Background()
	holder := client.New(p.Addr, client.WithSource("holder"))
	if err := holder.Lock(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		i   int
		err error
	}
	const n = 20
	const ghost = 7
	grants := make(chan result, n)
	ghostDone := make(chan error, 1)
	ghostCtx, killGhost := context.WithCancel(ctx)
	for i := range n {
		go func() {
			c := client.New(p.Addr, client.WithSource(fmt.Sprint("w", i)))
			if i == ghost {
				ghostDone <- c.Lock(ghostCtx, "q")
				return
			}
			grants <- result{i, c.Lock(ctx, "q")}
		}()
		waitQueue(t, p, "q", i+1)
	}
	killGhost()
	if err := <-ghostDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("ghost: %v", err)
	}
	waitQueue(t, p, "q", n-1)
	var order []int
	for range n - 1 {
		// Release, then wait for that grant before the next release, so
		// the order of grants is the order of results.
		if err := holder.Unlock(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		r := <-grants
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		order = append(order, r.i)
	}
	for i, got := range order {
		want := i
		if i >= ghost {
			want++
		}
		if got != want {
			t.Fatalf("grant order %v", order)
		}
	}
}

// waitQueue polls the JSON API until key has n waiters.
func waitQueue(t *testing.T, p *process, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := queueLen(p.Web, key)
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q: %d (%v), want %d", key, got, err, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func queueLen(web, key string) (int, error) {
	resp, err := http.Get("http://" + web + "/api/v1/keys/" + key)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return -1, fmt.Errorf("status %d", resp.StatusCode)
	}
	// "waiters": N — read without a struct to stay independent of the
	// dashboard's other fields.
	s := string(b)
	i := strings.Index(s, `"waiters":`)
	if i < 0 {
		return -1, fmt.Errorf("no waiters field in %s", s)
	}
	s = strings.TrimLeft(s[i+len(`"waiters":`):], " ")
	j := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	return strconv.Atoi(s[:j])
}

func TestBinaryConfigErrorsNameTheVariable(t *testing.T) {
	bin := serverBinary(t)
	for _, env := range []string{
		"BIND_ADDRESS=nonsense", "WEB_ADDRESS=:99999", "STUCK_AFTER=soon", "MAX_CONNECTIONS=0",
		"REQUEST_TIMEOUT=-1s", "MAX_CONNECTIONS_PER_PEER=0", "SESSION_TTL=500ms", "SESSION_TTL=11m",
		"AUTH_TOKEN=" + strings.Repeat("x", 128), "WEB_MAX_CONNECTIONS=0", "WEB_MAX_CONNECTIONS_PER_PEER=-2",
	} {
		cmd := exec.Command(bin)
		cmd.Env = []string{env}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%s: exit %v, want non-zero", env, err)
		}
		name := env[:strings.Index(env, "=")]
		if !strings.Contains(string(out), name) {
			t.Errorf("%s: message does not name the variable: %s", env, out)
		}
	}
}

func rssOf(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skip("no /proc: cannot read the server's RSS")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestBinaryDistinctKeysDoNotLeak locks and unlocks 100,000 distinct keys
// over TCP and checks the server's RSS stays within 64 MiB of its start.
func TestBinaryDistinctKeysDoNotLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 200,000 connections take a while")
	}
	p := startBinary(t)
	start := rssOf(t, p.Cmd.Process.Pid)
	ctx := context.Background()
	var wg sync.WaitGroup
	const n, workers = 100_000, 4
	for w := range workers {
		wg.Go(func() {
			c := client.New(p.Addr)
			for i := w; i < n; i += workers {
				k := "distinct-" + strconv.Itoa(i)
				if err := c.Lock(ctx, k); err != nil {
					t.Error(err)
					return
				}
				if err := c.Unlock(ctx, k); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	end := rssOf(t, p.Cmd.Process.Pid)
	t.Logf("server RSS: %d MiB at start, %d MiB after %d distinct keys", start>>20, end>>20, n)
	if end-start > 64<<20 {
		t.Fatalf("server RSS grew by %d MiB", (end-start)>>20)
	}
}

// originalClient speaks as the original server's Go client does: one
// connection per call; Lock [1][keySize][key][sourceSize][source], Unlock
// and ResetByKey [action][keySize][key] with no source field,
// ResetBySource [4][sourceSize][source]; it writes, reads one byte, closes.
func originalClient(t *testing.T, addr string, frame []byte) (byte, time.Duration) {
	t.Helper()
	start := time.Now()
	got := raw(t, addr, frame)
	return got, time.Since(start)
}

// TestBinaryOriginalClientFrames: the frames of the original server's
// clients lock, unlock, reset by key and by source against this server,
// each answered at once (they waited 10 s and failed before).
func TestBinaryOriginalClientFrames(t *testing.T) {
	p := startBinary(t)
	steps := []struct {
		what  string
		frame []byte
	}{
		{"lock", []byte("\x01\x04jobs\x04orig")},
		{"unlock", []byte("\x02\x04jobs")},
		{"lock again", []byte("\x01\x04jobs\x04orig")},
		{"reset by key", []byte("\x03\x04jobs")},
		{"lock a", []byte("\x01\x01a\x04orig")},
		{"lock b", []byte("\x01\x01b\x04orig")},
		{"reset by source", []byte("\x04\x04orig")},
	}
	for _, s := range steps {
		got, took := originalClient(t, p.Addr, s.frame)
		if got != '+' {
			t.Fatalf("%s: answered %q", s.what, got)
		}
		if took > 2*time.Second {
			t.Fatalf("%s: answered after %v", s.what, took)
		}
	}
	resp, err := http.Get("http://" + p.Web + "/api/v1/keys")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("keys left held after the original client's resets: %s", body)
	}
}
