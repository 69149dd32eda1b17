package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/web/api"
)

// Tests of the holds lc-cli makes through a session (lock/trylock -- CMD),
// against the real server.

// exists reports whether the file at path exists.
func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// gate is a command that records its fencing token, says it is running,
// and waits for the test to let it end with status 0.
type gate struct {
	dir string
}

func newGate(t *testing.T) *gate { return &gate{dir: t.TempDir()} }

func (g *gate) argv() []string {
	return []string{"sh", "-c", `echo "$LC_FENCING_TOKEN" > "$1/token.tmp" && mv "$1/token.tmp" "$1/token"; while [ ! -e "$1/go" ]; do sleep 0.02; done`, "sh", g.dir}
}

func (g *gate) started(t *testing.T) uint64 {
	t.Helper()
	var tok uint64
	eventually(t, "the command to start", func() bool {
		b, err := os.ReadFile(filepath.Join(g.dir, "token"))
		if err != nil {
			return false
		}
		tok, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return err == nil
	})
	return tok
}

func (g *gate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func startCLI(t *testing.T, env []string, args ...string) (*cliRun, func() int) {
	t.Helper()
	cmd, stdout, stderr := cli(env, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &cliRun{stdout: stdout, stderr: stderr}
	return r, func() int { return wait(t, cmd) }
}

type cliRun struct {
	stdout, stderr fmt.Stringer
}

// heldBySession fails unless key is held through a session with token.
func (s *server) heldBySession(t *testing.T, key string, token uint64) {
	t.Helper()
	k := s.key(t, key)
	switch {
	case k == nil:
		t.Fatalf("%s is not held", key)
	case k.Session == nil || k.Token != token:
		t.Fatalf("%s held by session %v with token %d, want a session hold with token %d", key, k.Session, k.Token, token)
	}
}

func TestLockCommandHoldsThroughASession(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	g := newGate(t)
	run1, wait1 := startCLI(t, s.env("LC_SOURCE=svc"), append([]string{"lock", "sess/k", "--ttl", "5s", "--"}, g.argv()...)...)
	tok := g.started(t)
	if tok == 0 {
		t.Fatal("LC_FENCING_TOKEN is 0 or missing")
	}
	s.heldBySession(t, "sess/k", tok)

	code, stdout, _ := run(t, s.env(), "sessions")
	if code != 0 || !strings.Contains(stdout, "svc") || !strings.Contains(stdout, "connected") {
		t.Errorf("sessions: %d\n%s", code, stdout)
	}
	code, stdout, _ = run(t, s.env(), "sessions", "--json")
	var list []api.Session
	if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil || len(list) != 1 ||
		list[0].Source != "svc" || list[0].Holds != 1 || list[0].TTLMillis != 5000 || !list[0].Connected {
		t.Errorf("sessions --json: %d %q (%v)", code, stdout, err)
	}
	g.open(t)
	if code := wait1(); code != 0 {
		t.Fatalf("lock -- CMD: status %d, stderr %q", code, run1.stderr)
	}
	if !s.free(t, "sess/k") {
		t.Error("key held after the command ended")
	}
	eventually(t, "the session to close", func() bool {
		_, out, _ := run(t, s.env(), "sessions")
		return strings.Contains(out, "no session is open")
	})
}

// TestResetThenSecondHolder is the first reproduction: the key is reset
// while the first command runs and taken by a second; the first command's
// end must not release the second holder's key.
func TestResetThenSecondHolder(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	g1, g2 := newGate(t), newGate(t)
	first, wait1 := startCLI(t, s.env(), append([]string{"lock", "deploy/prod", "--"}, g1.argv()...)...)
	g1.started(t)
	if code, out, e := run(t, s.env(), "reset", "key", "deploy/prod"); code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("reset key: %d %q %q", code, out, e)
	}
	second, wait2 := startCLI(t, s.env(), append([]string{"lock", "deploy/prod", "--"}, g2.argv()...)...)
	tok2 := g2.started(t)
	g1.open(t)
	if code := wait1(); code != 0 {
		t.Fatalf("first: status %d, stderr %q", code, first.stderr)
	}
	if e := first.stderr.String(); !strings.Contains(e, "no longer held") {
		t.Errorf("first's stderr %q, want it to say the key was no longer its", e)
	}
	s.heldBySession(t, "deploy/prod", tok2)
	if code, _, _ := run(t, s.env(), "trylock", "deploy/prod"); code != exitNotAcquired {
		t.Fatalf("a third client took the key the second still holds (trylock status %d)", code)
	}
	g2.open(t)
	if code := wait2(); code != 0 {
		t.Fatalf("second: status %d, stderr %q", code, second.stderr)
	}
	if !s.free(t, "deploy/prod") {
		t.Error("key held after both ended")
	}
}

// answerDropper forwards session connections to the server and, after the
// first Unlock it sees, drops that Unlock's answer and cuts the
// connection: the Unlock was applied, its answer lost.
type answerDropper struct {
	l  net.Listener
	wg sync.WaitGroup // accept loop and copiers

	mu       sync.Mutex // guards the fields below
	target   string
	down     bool
	unlocks  int // Unlock frames forwarded, on every connection
	dropped  chan struct{}
	dropOnce sync.Once
}

func newAnswerDropper(t *testing.T, target string) *answerDropper {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &answerDropper{l: l, target: target, dropped: make(chan struct{})}
	d.wg.Go(d.accept)
	t.Cleanup(func() { l.Close(); d.wg.Wait() })
	return d
}

func (d *answerDropper) accept() {
	for {
		c, err := d.l.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		down, target := d.down, d.target
		d.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		srv, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		unlockID := make(chan uint32, 1)
		d.wg.Go(func() { d.upstream(c, srv, unlockID) })
		d.wg.Go(func() { d.downstream(c, srv, unlockID) })
	}
}

// upstream copies client to server frame by frame, noting the first
// Unlock's id.
func (d *answerDropper) upstream(c, srv net.Conn, unlockID chan<- uint32) {
	defer srv.Close()
	defer c.Close()
	head := make([]byte, 14)
	if _, err := io.ReadFull(c, head); err != nil {
		return
	}
	src := make([]byte, 1)
	var open []byte
	open = append(open, head...)
	for range 2 { // source, auth
		if _, err := io.ReadFull(c, src); err != nil {
			return
		}
		field := make([]byte, src[0])
		if _, err := io.ReadFull(c, field); err != nil {
			return
		}
		open = append(append(open, src[0]), field...)
	}
	if _, err := srv.Write(open); err != nil {
		return
	}
	for {
		req := make([]byte, 14)
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		key := make([]byte, req[13])
		if _, err := io.ReadFull(c, key); err != nil {
			return
		}
		if req[0] == 2 {
			d.mu.Lock()
			d.unlocks++
			first := d.unlocks == 1
			d.mu.Unlock()
			if first {
				unlockID <- binary.BigEndian.Uint32(req[1:5])
			}
		}
		if _, err := srv.Write(append(req, key...)); err != nil {
			return
		}
	}
}

// downstream copies server to client, answer by answer; the answer to
// the noted Unlock is read, dropped, and both connections are cut.
func (d *answerDropper) downstream(c, srv net.Conn, unlockID <-chan uint32) {
	defer c.Close()
	defer srv.Close()
	opened := make([]byte, 13)
	if _, err := io.ReadFull(srv, opened); err != nil {
		return
	}
	if _, err := c.Write(opened); err != nil {
		return
	}
	var drop uint32
	watching := false
	for {
		ans := make([]byte, 13)
		if _, err := io.ReadFull(srv, ans); err != nil {
			return
		}
		if !watching {
			select {
			case drop = <-unlockID:
				watching = true
			default:
			}
		}
		if watching && binary.BigEndian.Uint32(ans[0:4]) == drop {
			d.dropOnce.Do(func() { close(d.dropped) })
			return // the answer is lost with the connection
		}
		if _, err := c.Write(ans); err != nil {
			return
		}
	}
}

func (d *answerDropper) set(target string, down bool) {
	d.mu.Lock()
	d.target, d.down = target, down
	d.mu.Unlock()
}

// TestLostAnswerOnRestart is the second reproduction: the release's
// answer is lost as the server restarts; a second client takes the key on
// the restarted server; the first lc-cli must not send its Unlock again,
// and the second keeps the key.
func TestLostAnswerOnRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t, "DATA_PATH="+filepath.Join(t.TempDir(), "locks.wal"))
	d := newAnswerDropper(t, s.Addr)
	g1, g2 := newGate(t), newGate(t)
	env := s.env()
	env[1] = "LC_ADDRESS=" + d.l.Addr().String()
	first, wait1 := startCLI(t, env, append([]string{"lock", "restart/k", "--"}, g1.argv()...)...)
	g1.started(t)
	d.set(s.Addr, true) // no reconnection until the server is back
	g1.open(t)
	select {
	case <-d.dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("the first lc-cli sent no Unlock")
	}
	s.Restart(t)
	second, wait2 := startCLI(t, s.env(), append([]string{"lock", "restart/k", "--"}, g2.argv()...)...)
	tok2 := g2.started(t)
	d.set(s.Addr, false) // the first lc-cli may reach the server again
	if code := wait1(); code != 0 {
		t.Fatalf("first: status %d, stderr %q", code, first.stderr)
	}
	d.mu.Lock()
	unlocks := d.unlocks
	d.mu.Unlock()
	if unlocks != 1 {
		t.Fatalf("the first lc-cli sent %d Unlock frames, want 1 (no blind retry)", unlocks)
	}
	s.heldBySession(t, "restart/k", tok2)
	if code, _, _ := run(t, s.env(), "trylock", "restart/k"); code != exitNotAcquired {
		t.Fatalf("a third client took the key the second still holds (trylock status %d)", code)
	}
	g2.open(t)
	if code := wait2(); code != 0 {
		t.Fatalf("second: status %d, stderr %q", code, second.stderr)
	}
}

// TestSessionLostStopsCommand: the session holding the key is ended from
// the dashboard's API, or the server goes away past the TTL; lc-cli says
// so, sends CMD SIGTERM and exits 4 once CMD has ended.
func TestSessionLostStopsCommand(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"ended", "unreachable"} {
		t.Run(how, func(t *testing.T) {
			s := startServer(t)
			dir := t.TempDir()
			script := `trap 'touch "$1/termed"; exit 9' TERM; touch "$1/ready"; while :; do sleep 0.02; done`
			r, waitCLI := startCLI(t, s.env("LC_SOURCE=doomed"), "lock", "lost/k", "--ttl", "1s", "--", "sh", "-c", script, "sh", dir)
			eventually(t, "the command to start", func() bool { return exists(filepath.Join(dir, "ready")) })
			start := time.Now()
			switch how {
			case "ended":
				var list []api.Session
				resp, err := http.Get("http://" + s.Web + "/api/v1/sessions")
				if err != nil {
					t.Fatal(err)
				}
				err = json.NewDecoder(resp.Body).Decode(&list)
				resp.Body.Close()
				if err != nil || len(list) != 1 {
					t.Fatalf("sessions: %v %v", list, err)
				}
				req, _ := http.NewRequest(http.MethodPost, "http://"+s.Web+"/api/v1/sessions/"+list[0].Session+"/end", nil)
				resp, err = http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("end session: %s", resp.Status)
				}
			case "unreachable":
				s.Stop()
			}
			if code := waitCLI(); code != exitSessionLost {
				t.Fatalf("status %d, want 4; stderr %q", code, r.stderr)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("lc-cli took %v to stop the command (TTL 1s)", d)
			}
			if !exists(filepath.Join(dir, "termed")) {
				t.Error("the command did not get SIGTERM")
			}
			// sh may add "Terminated" for its sleep: only lc-cli's lines count.
			if e := r.stderr.String(); !strings.Contains(e, "was lost") || strings.Count(e, "lc-cli:") != 1 {
				t.Errorf("stderr %q, want one line of lc-cli saying the session was lost", e)
			}
		})
	}
}

// TestKilledCLIReleasesAtTTL: lc-cli killed with SIGKILL while CMD runs;
// the server releases the key one TTL later.
func TestKilledCLIReleasesAtTTL(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	g := newGate(t)
	defer g.open(t)
	cmd, _, _ := cli(s.env(), append([]string{"lock", "killed/k", "--ttl", "1s", "--"}, g.argv()...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g.started(t)
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	eventually(t, "the key to be released", func() bool { return s.key(t, "killed/k") == nil })
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("released %v after the kill, want within TTL (1s) + 1s", d)
	}
}

// TestTryLockCommandThroughASession: trylock -- CMD holds through a
// session; a busy key gives the conflict status and runs nothing.
func TestTryLockCommandThroughASession(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	g := newGate(t)
	_, wait1 := startCLI(t, s.env(), append([]string{"trylock", "try/s", "--"}, g.argv()...)...)
	tok := g.started(t)
	s.heldBySession(t, "try/s", tok)
	ran := filepath.Join(t.TempDir(), "ran")
	if code, _, e := run(t, s.env(), "trylock", "try/s", "--conflict-exit-code", "75", "--", "touch", ran); code != 75 || e != "" {
		t.Errorf("trylock -- CMD on a busy key: status %d, stderr %q; want 75 and nothing said off a terminal", code, e)
	}
	if exists(ran) {
		t.Error("the command ran without the key")
	}
	g.open(t)
	if code := wait1(); code != 0 {
		t.Fatalf("status %d", code)
	}
}

func TestResetSaysWhatWasReleased(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	if _, out, _ := run(t, s.env(), "reset", "key", "none/k"); !strings.Contains(out, "nothing was held") {
		t.Errorf("reset of a free key: %q", out)
	}
	s.hold(t, "say/k", "LC_SOURCE=alice")
	if code, out, _ := run(t, s.env(), "reset", "key", "say/k"); code != 0 || !strings.Contains(out, "released (held by alice") {
		t.Errorf("reset of a held key: %d %q", code, out)
	}
	s.hold(t, "say/a", "LC_SOURCE=job-7")
	s.hold(t, "say/b", "LC_SOURCE=job-7")
	if code, out, _ := run(t, s.env(), "reset", "source", "job-7"); code != 0 || !strings.Contains(out, "released 2 keys (say/a, say/b)") {
		t.Errorf("reset source: %d %q", code, out)
	}
	if _, out, _ := run(t, s.env(), "reset", "source", "job-7"); !strings.Contains(out, "nothing was held") {
		t.Errorf("reset source again: %q", out)
	}
}
