package crashtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
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

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"

	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/client"
)

// The run's size. -crash-cycles or LC_CRASH_CYCLES raises the number of
// kills (say 500 for a long run); LC_CRASH_SEED replays a run (its seed is
// logged).
const (
	workers        = 8 // v1 clients
	sessionWorkers = 6 // session clients, half of them resumers
	keyCount       = 6
)

func TestMain(m *testing.M) {
	code := m.Run()
	lctest.RemoveBinaries()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "crashtest: goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// server is one run of the binary.
type server struct {
	cmd    *exec.Cmd
	out    *output
	addr   string
	web    string        // "off" unless started with a WEB_ADDRESS
	exited chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's error, once exited is closed
	armed  string        // the crash point its LC_FAILPOINT arms, if any (load_test.go)
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
	return startWith(t, lctest.Binary(t), dataPath, env...)
}

// startWith is start with the binary bin.
func startWith(t testing.TB, bin, dataPath string, env ...string) *server {
	t.Helper()
	s, err := tryStart(bin, dataPath, env...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// errExitedAtStart is a server that exited before it served; the server
// returned with it holds its output.
var errExitedAtStart = errors.New("server exited at start")

// tryStart runs bin and waits for it to serve; a server that exits first
// is returned with errExitedAtStart (a crash point may stop a start).
func tryStart(bin, dataPath string, env ...string) (*server, error) {
	s := &server{out: &output{started: make(chan struct{})}, exited: make(chan struct{})}
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), "DATA_PATH="+dataPath, "BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=off")
	s.cmd.Env = append(s.cmd.Env, env...)
	s.cmd.Stderr = s.out
	if err := s.cmd.Start(); err != nil {
		return nil, err
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
		return s, nil
	case <-s.exited:
		return s, fmt.Errorf("%w (%v):\n%s", errExitedAtStart, s.err, s.out)
	case <-time.After(30 * time.Second):
		s.kill()
		return nil, fmt.Errorf("server did not start within 30s:\n%s", s.out)
	}
}

func (s *server) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// hold is one acknowledged grant: from the '+' to the moment its Unlock
// was sent (zero while the key is still held). token is the grant's
// fencing token when the holder learnt it (sessions), else 0.
type hold struct {
	key, who string
	token    uint64
	ack, end time.Time
}

// recorder keeps every hold of the run.
type recorder struct {
	mu    sync.Mutex // guards holds
	holds []*hold
}

func (r *recorder) grant(key, who string, token uint64, ack time.Time) *hold {
	h := &hold{key: key, who: who, token: token, ack: ack}
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

// check reports every pair of holds of one key that overlap, and every
// token that is not above the one before it on that key. If the server is
// right, a grant is acknowledged only after the previous holder's Unlock
// was sent (or before the previous grant), so the intervals are disjoint,
// and in that order every token is larger than the last, across restarts
// and compactions.
func (r *recorder) check(t *testing.T) (grants, tokens int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byKey := make(map[string][]*hold)
	for _, h := range r.holds {
		byKey[h.key] = append(byKey[h.key], h)
	}
	for key, hs := range byKey {
		slices.SortFunc(hs, func(a, b *hold) int { return a.ack.Compare(b.ack) })
		var last *hold
		for i, cur := range hs {
			if i > 0 {
				prev := hs[i-1]
				if prev.end.IsZero() || cur.ack.Before(prev.end) {
					t.Errorf("key %q granted to two holders at once: %s from %v until %v, and %s from %v",
						key, prev.who, prev.ack.Format(time.StampMicro), prev.end.Format(time.StampMicro),
						cur.who, cur.ack.Format(time.StampMicro))
				}
			}
			if cur.token == 0 {
				continue
			}
			tokens++
			if last != nil && cur.token <= last.token {
				t.Errorf("key %q: token %d granted to %s at %v is not above token %d granted to %s at %v",
					key, cur.token, cur.who, cur.ack.Format(time.StampMicro), last.token, last.who, last.ack.Format(time.StampMicro))
			}
			last = cur
		}
	}
	return len(r.holds), tokens
}

// worker is one v1 client locking and unlocking random keys until the
// server dies under it.
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
		w.holding = rec.grant(k, w.name, 0, time.Now())
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

// The session workers' TTLs: a resumer's outlasts the check after a
// restart; an expirer's is the shortest the server grants, so that the
// check that its holds are released at expiry stays short.
const (
	resumerTTL = 10 * time.Second
	expirerTTL = time.Second
)

// sworker is one session client. A resumer takes its session back after
// every restart and goes on with it; an expirer leaves its session to
// expire and opens a new one. A sticky one keeps one of its grants until
// the crash, so that most cycles restore a session hold.
type sworker struct {
	name    string
	resumer bool
	sticky  bool
	keys    []string // its own keys, for a churner; nil: the shared ones
	s       *sess    // the open connection; nil between a crash and a resume
	id      uint64   // the session, kept across restarts; 0 for none
	holding *hold
	unsure  map[string]bool
}

func (w *sworker) ttl() time.Duration {
	if w.resumer {
		return resumerTTL
	}
	return expirerTTL
}

func (w *sworker) run(ctx context.Context, t *testing.T, addr string, rec *recorder, keys []string, rng *rand.Rand) {
	if w.s == nil {
		s, err := openSession(addr, w.name, w.ttl(), 0)
		if err != nil {
			return // the server died already
		}
		w.s, w.id = s, s.id
	}
	stickAt := -1
	if w.sticky {
		stickAt = rng.IntN(5)
	}
	for n := 0; ctx.Err() == nil; n++ {
		k := keys[rng.IntN(len(keys))]
		action := protocol.Lock
		if rng.IntN(4) == 0 {
			action = protocol.TryLock
		}
		a, err := w.s.do(action, k, 0, time.Minute)
		if err != nil {
			w.unsure[k] = true // the server died while we waited
			return
		}
		switch {
		case a.Status == protocol.AnswerLocked && action == protocol.TryLock:
			continue
		case a.Status != protocol.AnswerOK:
			t.Errorf("%s: %v %q answered %q on a healthy disk", w.name, action, k, a.Status)
			return
		case a.Token == 0:
			t.Errorf("%s: %v %q answered '+' without a token", w.name, action, k)
		}
		w.holding = rec.grant(k, w.name, a.Token, time.Now())
		if n == stickAt {
			<-ctx.Done() // hold it across the crash
			return
		}
		if d := rng.IntN(500); d > 0 {
			time.Sleep(time.Duration(d) * time.Microsecond)
		}
		if ctx.Err() != nil {
			return
		}
		h := w.holding
		rec.release(h, time.Now())
		w.holding = nil
		a, err = w.s.do(protocol.Unlock, k, h.token, time.Minute)
		if err != nil {
			w.unsure[k] = true
			return
		}
		if a.Status != protocol.AnswerOK || a.Token != h.token {
			t.Errorf("%s: unlock of %q under token %d answered %q with token %d", w.name, k, h.token, a.Status, a.Token)
		}
	}
}

// cycles is the number of SIGKILLs of TestCrashRestart (with
// LC_CRASH_CYCLES, the flag wins).
var cycles = flag.Int("crash-cycles", 0, "SIGKILL cycles of TestCrashRestart (default LC_CRASH_CYCLES, else 12)")

// counts are what a run exercised, for its log line and its floor.
type counts struct {
	resumed, expired, compactions int
}

// cyclesAndSeed returns a crash test's number of cycles (its flag if set,
// else the environment variable env, else 12) and its random seed
// (LC_CRASH_SEED, else the clock), and logs both.
func cyclesAndSeed(t *testing.T, env string, flagged int) (int, uint64) {
	t.Helper()
	n := 12
	if v := os.Getenv(env); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a whole number of at least 1", env, v)
		}
	}
	if flagged > 0 {
		n = flagged
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LC_CRASH_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LC_CRASH_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (LC_CRASH_SEED replays the choices), %d cycles", seed, n)
	return n, seed
}

// TestCrashRestart kills the server with SIGKILL at random moments under
// concurrent v1 and session clients and restarts it. After every restart
// each key acknowledged and not released is held, by the same holder; a
// resumed session keeps its holds under their tokens, a session left alone
// loses them at its expiry, one TTL after the start; each key released is
// free. Over the whole run no key was ever granted to two holders at once,
// and the fencing tokens of every key only grew, over every restart and
// compaction.
func TestCrashRestart(t *testing.T) {
	n, seed := cyclesAndSeed(t, "LC_CRASH_CYCLES", *cycles)
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
	var ss []*sworker
	for i := range sessionWorkers {
		ss = append(ss, &sworker{name: fmt.Sprintf("s%d", i), resumer: i%2 == 0, sticky: i < 2, unsure: make(map[string]bool)})
	}
	// Churners lock and unlock keys of their own as fast as the log
	// allows, so that even a short run grows the log past the compaction
	// threshold a few times and the tokens are checked across compactions.
	for i := range 2 {
		ss = append(ss, &sworker{name: fmt.Sprintf("churn%d", i), keys: []string{fmt.Sprintf("churn/%d", i)}, unsure: make(map[string]bool)})
	}
	defer func() {
		for _, w := range ss {
			if w.s != nil {
				w.s.close()
			}
		}
	}()

	var seen counts
	srv := start(t, dataPath)
	size := fileSize(t, dataPath)
	for cycle := range n {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, w := range ws {
			c := client.New(srv.addr, client.WithSource(w.name))
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(cycle)))
			wg.Go(func() { w.run(ctx, t, c, rec, keys, wrng) })
		}
		for _, w := range ss {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(cycle)))
			wkeys := keys
			if w.keys != nil {
				wkeys = w.keys
			}
			wg.Go(func() { w.run(ctx, t, srv.addr, rec, wkeys, wrng) })
		}
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond) // the random moment
		srv.kill()
		cancel()
		wg.Wait()
		for _, w := range ss {
			if w.s != nil {
				w.s.close()
				w.s = nil
			}
		}
		if grown := fileSize(t, dataPath); grown < size {
			seen.compactions++ // the log shrank: it was compacted since the last look
		}

		srv = start(t, dataPath)
		verify(t, srv, ws, ss, keys, rec, cycle, &seen)
		size = fileSize(t, dataPath)
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
	grants, tokens := rec.check(t)
	t.Logf("%d cycles, %d acknowledged grants checked (%d with their token), %d session holds resumed after a restart, %d released at expiry, %d compactions seen, final log %d bytes",
		n, grants, tokens, seen.resumed, seen.expired, seen.compactions, fileSize(t, dataPath))
	if grants < n || tokens < n*keyCount {
		t.Errorf("only %d grants (%d tokens) in %d cycles: the test exercised little", grants, tokens, n)
	}
	if n >= 8 && (seen.resumed == 0 || seen.expired == 0) {
		t.Errorf("in %d cycles, %d resumed session holds and %d expired ones: the test exercised little", n, seen.resumed, seen.expired)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// verify checks the restarted server against what the clients were told,
// then brings every key back to free for the next cycle. Restored session
// holds are checked first: an expirer's must still be held, and must
// become free one TTL after the start without anyone releasing it.
func verify(t *testing.T, srv *server, ws []*worker, ss []*sworker, keys []string, rec *recorder, cycle int, seen *counts) {
	t.Helper()
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	checker := client.New(srv.addr, client.WithSource("checker"))
	probe := func(k string) error { // a v1 TryLock that gives back what it takes
		err := checker.TryLock(ctx, k)
		if err == nil {
			rec.release(rec.grant(k, "checker", 0, time.Now()), time.Now())
			if uerr := checker.Unlock(ctx, k); uerr != nil {
				t.Errorf("cycle %d: unlock %q: %v", cycle, k, uerr)
			}
		}
		return err
	}
	unsure := make(map[string]bool) // a v1 or resumer outcome unknown: reset
	for _, w := range ws {
		for k := range w.unsure {
			unsure[k] = true
		}
	}
	for _, w := range ss {
		if w.resumer {
			for k := range w.unsure {
				unsure[k] = true
			}
		}
	}

	// Expirers: their acknowledged holds are restored, held by their
	// disconnected session; keys they were unsure of may be too.
	expiring := make(map[string]bool) // keys to wait for
	held := make(map[string]*hold)    // those of acknowledged holds
	for _, w := range ss {
		if w.resumer {
			continue
		}
		if h := w.holding; h != nil {
			if err := probe(h.key); !errors.Is(err, client.ErrLocked) {
				t.Errorf("cycle %d: %q was granted to session %s and not released, but after restart TryLock gave %v", cycle, h.key, w.name, err)
			}
			// Others' unknown outcomes on this key do not matter: it
			// was held throughout, so none of them can have had it.
			expiring[h.key], held[h.key] = true, h
		}
		for k := range w.unsure {
			if !unsure[k] {
				expiring[k] = true
			}
		}
	}

	// Resumers: the session comes back with its hold, under its token.
	for _, w := range ss {
		if !w.resumer || w.id == 0 {
			continue
		}
		s, err := openSession(srv.addr, w.name, w.ttl(), w.id)
		switch {
		case w.holding != nil && err != nil:
			t.Errorf("cycle %d: session %s held %q but its resume after restart gave %v", cycle, w.name, w.holding.key, err)
		case w.holding == nil && len(w.unsure) == 0 && !errors.Is(err, errOpenRefused):
			t.Errorf("cycle %d: session %s held nothing, yet its resume gave %v (a session that held nothing is not restored)", cycle, w.name, err)
		}
		if err != nil {
			w.id, w.holding = 0, nil
			clear(w.unsure)
			continue
		}
		if s.ttl != w.ttl() {
			t.Errorf("cycle %d: session %s resumed with TTL %v, want its own %v", cycle, w.name, s.ttl, w.ttl())
		}
		w.s = s
		if h := w.holding; h != nil {
			if err := probe(h.key); !errors.Is(err, client.ErrLocked) {
				t.Errorf("cycle %d: resumed session %s should hold %q, but TryLock gave %v", cycle, w.name, h.key, err)
			}
			rec.release(h, time.Now())
			a, err := s.do(protocol.Unlock, h.key, h.token, 10*time.Second)
			if err != nil || a.Status != protocol.AnswerOK || a.Token != h.token {
				t.Errorf("cycle %d: resumed session %s: unlock %q under token %d gave %+v, %v", cycle, w.name, h.key, h.token, a, err)
			} else {
				seen.resumed++
			}
			w.holding = nil
		}
		for k := range w.unsure {
			// Held or not, both are allowed; give it back if held.
			if _, err := s.do(protocol.Unlock, k, 0, 10*time.Second); err != nil {
				t.Errorf("cycle %d: resumed session %s: unlock %q: %v", cycle, w.name, k, err)
			}
		}
		clear(w.unsure)
	}

	// Every other key, as v1 clients see it.
	for _, k := range keys {
		var holders []*worker
		for _, w := range ws {
			if w.holding != nil && w.holding.key == k {
				holders = append(holders, w)
			}
			delete(w.unsure, k)
		}
		switch {
		case expiring[k]:
			// Checked below, once its session has expired.
		case len(holders) > 1:
			t.Errorf("cycle %d: key %q acknowledged to %d workers at the crash", cycle, k, len(holders))
		case len(holders) == 1:
			w := holders[0]
			if err := probe(k); !errors.Is(err, client.ErrLocked) {
				t.Errorf("cycle %d: %q was granted to %s and not released, but after restart TryLock gave %v",
					cycle, k, w.name, err)
			}
			rec.release(w.holding, time.Now())
			w.holding = nil
			// Its holder can unlock it after the restart.
			if err := client.New(srv.addr, client.WithSource(w.name)).Unlock(ctx, k); err != nil {
				t.Errorf("cycle %d: %s could not unlock restored %q: %v", cycle, w.name, k, err)
			}
		case unsure[k]:
			// A lock or unlock was in flight: held or not, both are
			// allowed (held by nobody is the safe side). Clear it.
			if err := checker.ResetByKey(ctx, k); err != nil {
				t.Errorf("cycle %d: reset %q: %v", cycle, k, err)
			}
		default:
			if err := probe(k); err != nil {
				t.Errorf("cycle %d: %q was released before the crash, but after restart TryLock gave %v", cycle, k, err)
			}
		}
	}

	// The expirers' keys come free at their sessions' expiry, one TTL
	// after the start (within 250 ms), and not much before.
	deadline := started.Add(expirerTTL + time.Second)
	for k := range expiring {
		for {
			sent := time.Now()
			err := checker.TryLock(ctx, k)
			if err == nil {
				if h := held[k]; h != nil {
					rec.release(h, sent) // its session's expiry released it, before this '+'
				}
				rec.release(rec.grant(k, "checker", 0, time.Now()), time.Now())
				if uerr := checker.Unlock(ctx, k); uerr != nil {
					t.Errorf("cycle %d: unlock %q: %v", cycle, k, uerr)
				}
				if took := time.Since(started); held[k] != nil && took < expirerTTL/2 {
					t.Errorf("cycle %d: %q, held by an expiring session, came free %v after the start, before its TTL of %v", cycle, k, took, expirerTTL)
				}
				break
			}
			if !errors.Is(err, client.ErrLocked) || time.Now().After(deadline) {
				if h := held[k]; h != nil {
					rec.release(h, time.Now())
				}
				t.Errorf("cycle %d: %q, held by a session nobody resumed, still not free %v after the start (TTL %v): %v",
					cycle, k, time.Since(started), expirerTTL, err)
				if rerr := checker.ResetByKey(ctx, k); rerr != nil {
					t.Errorf("cycle %d: reset %q: %v", cycle, k, rerr)
				}
				break
			}
			time.Sleep(20 * time.Millisecond) // the expiry has no event a client can wait on
		}
	}
	for _, w := range ss {
		if w.resumer {
			continue
		}
		if h := w.holding; h != nil {
			if held[h.key] == h && !h.end.IsZero() {
				seen.expired++
				// Nothing but the expiry released it: the session is gone.
				if s, err := openSession(srv.addr, w.name, w.ttl(), w.id); err == nil {
					s.close()
					t.Errorf("cycle %d: session %s resumed after its expiry", cycle, w.name)
				}
			}
			w.holding = nil
		}
		w.id = 0
		clear(w.unsure)
	}

	// Every key is free now: a session takes each once, so that every
	// cycle adds a token per key to the history.
	s, err := openSession(srv.addr, "checker", resumerTTL, 0)
	if err != nil {
		t.Errorf("cycle %d: checker session: %v", cycle, err)
		return
	}
	defer s.close()
	for _, k := range keys {
		a, err := s.do(protocol.TryLock, k, 0, 10*time.Second)
		if err != nil || a.Status != protocol.AnswerOK || a.Token == 0 {
			t.Errorf("cycle %d: checker session TryLock %q: %+v, %v", cycle, k, a, err)
			continue
		}
		h := rec.grant(k, "checker-session", a.Token, time.Now())
		rec.release(h, time.Now())
		if a, err := s.do(protocol.Unlock, k, h.token, 10*time.Second); err != nil || a.Status != protocol.AnswerOK || a.Token != h.token {
			t.Errorf("cycle %d: checker session unlock %q: %+v, %v", cycle, k, a, err)
		}
	}
	if a, err := s.do(protocol.Close, "", 0, 10*time.Second); err != nil || a.Status != protocol.AnswerOK {
		t.Errorf("cycle %d: checker session close: %+v, %v", cycle, a, err)
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
	cmd := exec.Command(lctest.Binary(t))
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

// TestBinarySecondServerRefused: a second server on the DATA_PATH of a
// running one refuses to start, exit status non-zero, naming the lock file;
// once the first has stopped, it starts.
func TestBinarySecondServerRefused(t *testing.T) {
	dataPath := filepath.Join(t.TempDir(), "locks.wal")
	first := start(t, dataPath)
	cmd := exec.Command(lctest.Binary(t))
	cmd.Env = append(os.Environ(), "DATA_PATH="+dataPath, "BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=off")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		first.kill()
		t.Fatalf("a second server on the same DATA_PATH did not stop (%v):\n%s", err, out)
	}
	if !bytes.Contains(out, []byte(dataPath+".lock")) {
		t.Errorf("the refusal does not name the lock file %s.lock:\n%s", dataPath, out)
	}
	first.cmd.Process.Signal(syscall.SIGTERM)
	<-first.exited
	second := start(t, dataPath)
	second.kill()
}
