package crashtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/client"
)

// The run's size. LC_CRASH_CYCLES raises the number of kills (say 500 for a
// long run); LC_CRASH_SEED replays a run (its seed is logged).
const (
	defaultCycles = 20
	workers       = 12
	keyCount      = 6
)

var serverBinary string // the server, built by TestMain

func TestMain(m *testing.M) {
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashtest:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return 0, fmt.Errorf("repo root not found: %w", err)
	}
	dir, err := os.MkdirTemp("", "lc-crashtest")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	serverBinary = filepath.Join(dir, "locking-center")
	cmd := exec.Command("go", "build", "-o", serverBinary, ".")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build: %v\n%s", err, out)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			return 0, fmt.Errorf("goleak: %w", err)
		}
	}
	return code, nil
}

// server is one run of the binary.
type server struct {
	cmd    *exec.Cmd
	out    *output
	addr   string
	web    string        // "off" unless started with a WEB_ADDRESS
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's error, once exited is closed
}

// output collects the server's stderr and notices the start line.
type output struct {
	mu        sync.Mutex // guards buf, addr and web
	buf       bytes.Buffer
	addr, web string
	started   chan struct{} // closed when the start line is seen
}

var startLine = regexp.MustCompile(`msg="locking-center started".* bind=(\S+) web=(\S+)`)

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if o.addr == "" {
		if m := startLine.FindSubmatch(o.buf.Bytes()); m != nil {
			o.addr, o.web = string(m[1]), string(m[2])
			close(o.started)
		}
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// start runs the binary with the log at dataPath ("" for none) and waits
// for it to serve. env adds to or overrides its environment.
func start(t testing.TB, dataPath string, env ...string) *server {
	t.Helper()
	s := &server{out: &output{started: make(chan struct{})}, exited: make(chan struct{})}
	s.cmd = exec.Command(serverBinary)
	s.cmd.Env = append(os.Environ(), "DATA_PATH="+dataPath, "BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=off")
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stderr = s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // ends when the process has exited and its stderr is read
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	select {
	case <-s.out.started:
		s.out.mu.Lock()
		s.addr, s.web = s.out.addr, s.out.web
		s.out.mu.Unlock()
		return s
	case <-s.exited:
		t.Fatalf("server exited at start (%v):\n%s", s.err, s.out)
	case <-time.After(30 * time.Second):
		s.kill()
		t.Fatalf("server did not start within 30s:\n%s", s.out)
	}
	return nil
}

func (s *server) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// hold is one acknowledged grant: from the '+' to the moment its Unlock
// was sent (zero while the key is still held).
type hold struct {
	key, who string
	ack, end time.Time
}

// recorder keeps every hold of the run.
type recorder struct {
	mu    sync.Mutex // guards holds
	holds []*hold
}

func (r *recorder) grant(key, who string, ack time.Time) *hold {
	h := &hold{key: key, who: who, ack: ack}
	r.mu.Lock()
	r.holds = append(r.holds, h)
	r.mu.Unlock()
	return h
}

func (r *recorder) release(h *hold, at time.Time) {
	r.mu.Lock()
	h.end = at
	r.mu.Unlock()
}

// check reports every pair of holds of one key that overlap. If the server
// is right, a grant is acknowledged only after the previous holder's Unlock
// was sent (or before the previous grant), so the intervals are disjoint.
func (r *recorder) check(t *testing.T) (grants int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := make(map[string][]*hold)
	for _, h := range r.holds {
		byKey[h.key] = append(byKey[h.key], h)
	}
	for key, hs := range byKey {
		slices.SortFunc(hs, func(a, b *hold) int { return a.ack.Compare(b.ack) })
		for i := 1; i < len(hs); i++ {
			prev, cur := hs[i-1], hs[i]
			if prev.end.IsZero() || cur.ack.Before(prev.end) {
				t.Errorf("key %q granted to two holders at once: %s from %v until %v, and %s from %v",
					key, prev.who, prev.ack.Format(time.StampMicro), prev.end.Format(time.StampMicro),
					cur.who, cur.ack.Format(time.StampMicro))
			}
		}
	}
	return len(r.holds)
}

// worker is one client locking and unlocking random keys until the server
// dies under it.
type worker struct {
	name    string
	holding *hold           // acknowledged and not yet unlocked
	unsure  map[string]bool // keys whose last lock or unlock has no known outcome
}

func (w *worker) run(ctx context.Context, t *testing.T, c *client.Client, rec *recorder, keys []string, rng *rand.Rand) {
	for ctx.Err() == nil {
		k := keys[rng.IntN(len(keys))]
		err := c.Lock(ctx, k)
		if err != nil {
			if errors.Is(err, client.ErrReset) {
				t.Errorf("%s: lock %q answered '-' on a healthy disk", w.name, k)
			}
			w.unsure[k] = true // the server died while we waited
			return
		}
		w.holding = rec.grant(k, w.name, time.Now())
		if d := rng.IntN(500); d > 0 {
			time.Sleep(time.Duration(d) * time.Microsecond) // the critical section
		}
		if ctx.Err() != nil {
			return // hold the key across the crash
		}
		rec.release(w.holding, time.Now())
		w.holding = nil
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = c.Unlock(uctx, k)
		cancel()
		if err != nil {
			if errors.Is(err, client.ErrRefused) {
				t.Errorf("%s: unlock of held key %q answered '-'", w.name, k)
			}
			w.unsure[k] = true
			return
		}
	}
}

// TestCrashRestart kills the server with SIGKILL at random moments under
// concurrent lockers and restarts it: after every restart each key
// acknowledged and not released is held (and its holder can unlock it),
// each key released is free, and over the whole run no key was ever
// granted to two holders at once.
func TestCrashRestart(t *testing.T) {
	cycles := defaultCycles
	if v := os.Getenv("LC_CRASH_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LC_CRASH_CYCLES=%q: want a whole number of at least 1", v)
		}
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LC_CRASH_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LC_CRASH_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("seed %d (LC_CRASH_SEED replays it), %d cycles", seed, cycles)
	rng := rand.New(rand.NewPCG(seed, 0))

	dataPath := filepath.Join(t.TempDir(), "locks.wal")
	keys := make([]string, keyCount)
	for i := range keys {
		keys[i] = fmt.Sprintf("crash/%d", i)
	}
	rec := &recorder{}
	ws := make([]*worker, workers)
	for i := range ws {
		ws[i] = &worker{name: fmt.Sprintf("w%d", i), unsure: make(map[string]bool)}
	}

	srv := start(t, dataPath)
	for cycle := range cycles {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, w := range ws {
			c := client.New(srv.addr, client.WithSource(w.name))
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(cycle)))
			wg.Go(func() { w.run(ctx, t, c, rec, keys, wrng) })
		}
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond) // the random moment
		srv.kill()
		cancel()
		wg.Wait()

		srv = start(t, dataPath)
		verify(t, srv, ws, keys, rec, cycle)
		if t.Failed() {
			t.Logf("server log of the restart:\n%s", srv.out)
			break
		}
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.exited
	if srv.err != nil {
		t.Errorf("server exit on SIGTERM: %v\n%s", srv.err, srv.out)
	}
	grants := rec.check(t)
	fi, err := os.Stat(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d cycles, %d acknowledged grants checked, final log %d bytes", cycles, grants, fi.Size())
	if grants < cycles {
		t.Errorf("only %d grants in %d cycles: the test exercised little", grants, cycles)
	}
}

// verify checks the restarted server against what the workers were told,
// then brings every key back to free for the next cycle.
func verify(t *testing.T, srv *server, ws []*worker, keys []string, rec *recorder, cycle int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	checker := client.New(srv.addr, client.WithSource("checker"))
	for _, k := range keys {
		var holders []*worker
		unsure := false
		for _, w := range ws {
			if w.holding != nil && w.holding.key == k {
				holders = append(holders, w)
			}
			unsure = unsure || w.unsure[k]
			delete(w.unsure, k)
		}
		switch {
		case len(holders) > 1:
			t.Errorf("cycle %d: key %q acknowledged to %d workers at the crash", cycle, k, len(holders))
		case len(holders) == 1:
			w := holders[0]
			err := checker.TryLock(ctx, k)
			if !errors.Is(err, client.ErrLocked) {
				t.Errorf("cycle %d: %q was granted to %s and not released, but after restart TryLock gave %v",
					cycle, k, w.name, err)
				if err == nil {
					rec.release(rec.grant(k, "checker", time.Now()), time.Now())
				}
			}
			rec.release(w.holding, time.Now())
			w.holding = nil
			// Its holder can unlock it after the restart.
			if err := client.New(srv.addr, client.WithSource(w.name)).Unlock(ctx, k); err != nil {
				t.Errorf("cycle %d: %s could not unlock restored %q: %v", cycle, w.name, k, err)
			}
		case unsure:
			// A lock or unlock was in flight: held or not, both are
			// allowed (held by nobody is the safe side). Clear it.
			if err := checker.ResetByKey(ctx, k); err != nil {
				t.Errorf("cycle %d: reset %q: %v", cycle, k, err)
			}
		default:
			err := checker.TryLock(ctx, k)
			if err != nil {
				t.Errorf("cycle %d: %q was released before the crash, but after restart TryLock gave %v", cycle, k, err)
				continue
			}
			h := rec.grant(k, "checker", time.Now())
			rec.release(h, time.Now())
			if err := checker.Unlock(ctx, k); err != nil {
				t.Errorf("cycle %d: unlock %q: %v", cycle, k, err)
			}
		}
	}
}

// TestBinaryTornTailAndCorruption: a log whose last record is torn starts,
// with its whole records restored; a log with a flipped byte in the middle
// makes the binary exit non-zero naming the file and the byte offset.
func TestBinaryTornTailAndCorruption(t *testing.T) {
	dataPath := filepath.Join(t.TempDir(), "locks.wal")
	srv := start(t, dataPath)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New(srv.addr, client.WithSource("t"))
	for _, k := range []string{"a", "b", "c"} {
		if err := c.TryLock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	srv.kill()
	good, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}

	// Torn: the file ends three bytes into the last record ("c").
	if err := os.WriteFile(dataPath, good[:len(good)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	srv = start(t, dataPath)
	c = client.New(srv.addr, client.WithSource("t"))
	for k, want := range map[string]error{"a": client.ErrLocked, "b": client.ErrLocked, "c": nil} {
		if err := c.TryLock(ctx, k); !errors.Is(err, want) && err != want {
			t.Errorf("after a torn tail, TryLock(%q) = %v, want %v", k, err, want)
		}
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.exited
	if !bytes.Contains([]byte(srv.out.String()), []byte("torn final record")) {
		t.Errorf("the cut was not logged:\n%s", srv.out)
	}

	// Corrupt: flip a byte inside the second record (offset 16 is the
	// first record, right after the header).
	bad, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	first := 16 + 12 + int(binary.BigEndian.Uint32(bad[16+4:]))
	bad[first+12] ^= 0x40
	t.Logf("flipped byte %d of the record at %d", first+12, first)
	if err := os.WriteFile(dataPath, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(serverBinary)
	cmd.Env = append(os.Environ(), "DATA_PATH="+dataPath, "BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=off")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("a corrupt log did not stop the start (%v):\n%s", err, out)
	}
	want := fmt.Sprintf("%s: corrupt at byte offset %d", dataPath, first)
	if !bytes.Contains(out, []byte(want)) {
		t.Fatalf("output does not say %q:\n%s", want, out)
	}
}
