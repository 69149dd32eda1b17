package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	lctest.RemoveBinaries()
	httpc.CloseIdleConnections()
	adminc.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "faulttest: goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runsOf is LC_CLUSTER_FAULT_RUNS (make cluster-soak sets it), else def.
func runsOf(t *testing.T, def int) int {
	if v := os.Getenv("LC_CLUSTER_FAULT_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LC_CLUSTER_FAULT_RUNS=%q: want a whole number of at least 1", v)
		}
		return n
	}
	return def
}

// fault is one kind of fault: inject does it and undoes it (restarts
// what it killed, heals what it cut), logging what it measured in f.
type fault struct {
	name   string
	inject func(f *faultRun)
	// safe picks the node the witnesses and the checker's sessions use: one
	// the fault leaves alone (the default: a follower).
	safe func(c *cluster, leader *node) *node
}

// faultRun is one run of a fault, as inject sees it.
type faultRun struct {
	t      *testing.T
	c      *cluster
	r      *run
	leader *node // the leader when the fault began
	rng    *rand.Rand
	notes  []string // figures measured, for the log
	extra  map[string][]time.Duration
}

// note logs a figure of the run.
func (f *faultRun) note(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

// measure adds a duration to the named figure of the table.
func (f *faultRun) measure(name string, d time.Duration) {
	if f.extra == nil {
		f.extra = map[string][]time.Duration{}
	}
	f.extra[name] = append(f.extra[name], d)
}

// awaitLeaderOf waits for a leader agreed on by live and returns it with
// the time it took; a failure fails the run.
func (f *faultRun) awaitLeaderOf(live []*node, within time.Duration) (*node, time.Duration) {
	f.t.Helper()
	start := time.Now()
	nd, err := f.c.leaderWithin(live, within)
	if err != nil {
		f.t.Fatalf("%v", err)
	}
	return nd, time.Since(start)
}

// tally is a fault's row of the table.
type tally struct {
	name                                            string
	runs, ops, grants, unknown                      int
	double, lost, order, minority, sessions, expiry int
	porcupineFailed                                 int
	figures                                         map[string][]time.Duration
}

func (ty *tally) add(v verdict, f *faultRun) {
	ty.runs++
	ty.ops += v.ops
	ty.grants += v.grants
	ty.unknown += v.unknown
	ty.double += v.doubleGrants
	ty.lost += v.lostGrants
	ty.order += v.tokenOrder
	ty.minority += v.minorityOK
	ty.sessions += v.sessionsLost
	ty.expiry += v.expiry
	if v.porcupine != "ok" {
		ty.porcupineFailed++
	}
	if ty.figures == nil {
		ty.figures = map[string][]time.Duration{}
	}
	for k, ds := range f.extra {
		ty.figures[k] = append(ty.figures[k], ds...)
	}
}

// table formats the rows.
func table(rows []*tally) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-22s %5s %7s %6s %6s %7s %5s %6s %8s %8s %6s %-10s\n", "fault", "runs", "ops", "grants", "unkn", "double", "lost",
		"order", "minority", "sessions", "expiry", "porcupine")
	for _, ty := range rows {
		if ty.runs == 0 {
			continue // not run (-run)
		}
		p := "ok"
		if ty.porcupineFailed > 0 {
			p = fmt.Sprintf("%d FAILED", ty.porcupineFailed)
		}
		fmt.Fprintf(&b, "%-22s %5d %7d %6d %6d %7d %5d %6d %8d %8d %6d %-10s\n", ty.name, ty.runs, ty.ops, ty.grants, ty.unknown,
			ty.double, ty.lost, ty.order, ty.minority, ty.sessions, ty.expiry, p)
	}
	for _, ty := range rows {
		var names []string
		for k := range ty.figures {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			ds := slices.Clone(ty.figures[k])
			slices.Sort(ds)
			fmt.Fprintf(&b, "  %s: %s min %v, median %v, max %v (%d)\n", ty.name, k,
				ds[0].Round(time.Millisecond), ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond), len(ds))
		}
	}
	return b.String()
}

// runFaults runs each fault runs times on c, each run with its own keys,
// load, witnesses and a silent session, and checks it; the table of
// counts is logged at the end.
func runFaults(t *testing.T, c *cluster, runs int, faults []fault) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LC_CLUSTER_FAULT_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (LC_CLUSTER_FAULT_SEED replays the choices), %d runs of each fault", seed, runs)
	rng := rand.New(rand.NewPCG(seed, 7))
	var rows []*tally
	for _, ft := range faults {
		ty := &tally{name: ft.name}
		rows = append(rows, ty)
		t.Run(ft.name, func(t *testing.T) {
			for i := range runs {
				oneRun(t, c, ft, i, rng.Uint64())
				if t.Failed() {
					t.Logf("%s run %d failed: stopping this fault", ft.name, i)
					return
				}
			}
		})
		ty.fill(ft.name)
	}
	t.Log(table(rows))
}

// results holds the tallies by fault name while runFaults runs: oneRun
// adds to them (a subtest cannot return values).
var (
	resultsMu sync.Mutex // guards results
	results   = map[string]*tally{}
)

func (ty *tally) fill(name string) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if got := results[name]; got != nil {
		*ty = *got
		delete(results, name)
	}
}

func record(name string, v verdict, f *faultRun) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	ty := results[name]
	if ty == nil {
		ty = &tally{name: name}
		results[name] = ty
	}
	ty.add(v, f)
}

// heal brings the cluster back whole after whatever a failed run left:
// every node running and not paused, no drop rule.
func (c *cluster) heal(t *testing.T) {
	c.net.heal()
	for _, nd := range c.nodes {
		if nd.running() {
			nd.signal(syscall.SIGCONT)
		} else {
			nd.start(t)
		}
	}
}

// witness is a hold taken before the fault by a session of the Go client,
// to be found after it with the same token.
type witness struct {
	s     *client.Session
	key   string
	token uint64
}

// oneRun is one run of ft: load, witnesses and a silent session, the
// fault, the recovery, then the checks.
func oneRun(t *testing.T, c *cluster, ft fault, idx int, seed uint64) {
	began := time.Now()
	c.heal(t)
	leader, err := c.leaderWithin(c.nodes, 30*time.Second)
	if err != nil {
		t.Fatalf("before %s run %d: %v", ft.name, idx, err)
	}
	safe := c.others(leader)[0]
	if ft.safe != nil {
		safe = ft.safe(c, leader)
	}
	prefix := fmt.Sprintf("%s.%d", ft.name, idx)
	r := newRun(c, prefix)
	f := &faultRun{t: t, c: c, r: r, leader: leader, rng: rand.New(rand.NewPCG(seed, 1))}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The checker's session, and two witnesses, on the safe node.
	checker, err := client.NewSession(ctx, safe.client(), client.WithTTL(loadTTL), client.WithSource("checker"))
	if err != nil {
		t.Fatalf("checker session through %s: %v", safe.id, err)
	}
	defer checker.Close(context.Background())
	var wits []witness
	for i := range 2 {
		s, err := client.NewSession(ctx, safe.client(), client.WithTTL(loadTTL), client.WithSource(fmt.Sprintf("witness%d", i)))
		if err != nil {
			t.Fatalf("witness session: %v", err)
		}
		defer s.Close(context.Background())
		key := fmt.Sprintf("%s/w%d", prefix, i)
		tok, err := s.Lock(ctx, key)
		if err != nil {
			t.Fatalf("witness Lock %s: %v", key, err)
		}
		wits = append(wits, witness{s: s, key: key, token: tok})
	}
	silent := startSilent(t, r, safe, prefix+"/silent", checker)

	stop := r.startLoad(seed)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	sleepCtx(ctx, 500*time.Millisecond) // the load under way before the fault
	faultAt := time.Now()
	ft.inject(f)
	r.endMinorities()
	// The cluster whole again, the load must get grants again.
	if _, err := c.leaderWithin(c.nodes, 30*time.Second); err != nil {
		t.Fatalf("after %s: %v", ft.name, err)
	}
	healed := time.Now()
	grantsBefore := countGrantsAfter(r, healed)
	deadline := time.Now().Add(20 * time.Second)
	for countGrantsAfter(r, healed) < grantsBefore+5 && time.Now().Before(deadline) {
		sleepCtx(ctx, 50*time.Millisecond)
	}
	sleepCtx(ctx, 300*time.Millisecond)
	stop()
	stopped = true
	if n := countGrantsAfter(r, healed); n < 5 {
		t.Errorf("%s run %d: only %d grants in the load after the cluster was whole again", ft.name, idx, n)
	}

	// Witnesses: held with the same token, by a session never lost.
	for _, w := range wits {
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := checker.TryLock(wctx, w.key)
		if !errors.Is(err, client.ErrLocked) {
			r.problem("lost", "witness %s (token %d) not held after the fault: the checker's TryLock gave %v", w.key, w.token, err)
		}
		switch err := w.s.Unlock(wctx, w.key, w.token); {
		case errors.Is(err, client.ErrOutcomeUnknown):
			// The answer was lost (the connection dropped): not known,
			// and the client settles it by the token itself. The TryLock
			// above has shown the hold.
			f.note("witness %s: its Unlock's answer was lost (%v)", w.key, err)
		case err != nil:
			r.problem("lost", "witness %s: Unlock by its token %d after the fault: %v", w.key, w.token, err)
		}
		wcancel()
		if err := w.s.Err(); err != nil {
			r.problem("session", "witness session of %s: %v", w.key, err)
		}
	}
	if err := checker.Err(); err != nil {
		r.problem("session", "checker session: %v", err)
	}
	silent.wait()

	v := r.check()
	f.measure("fault→whole again", healed.Sub(faultAt))
	record(ft.name, v, f)
	t.Logf("%s run %d (%v): %d ops (%d grants, %d unknown), porcupine %s; %s", ft.name, idx, time.Since(began).Round(time.Millisecond),
		v.ops, v.grants, v.unknown, v.porcupine, strings.Join(f.notes, "; "))
	if v.failed() {
		var logs strings.Builder
		for _, nd := range c.nodes {
			fmt.Fprintf(&logs, "--- %s, the last lines of its log:\n%s\n", nd.id, tail(nd.log.String(), 60))
		}
		t.Errorf("%s run %d:\n%s\nthe run's operations: %s\n%s", ft.name, idx, strings.Join(v.problems, "\n"), dumpOps(r.rec.Ops()), logs.String())
	}
}

// countGrantsAfter counts the grants whose call was made after at.
func countGrantsAfter(r *run, at time.Time) int {
	n := 0
	for _, op := range r.rec.Ops() {
		if isGrant(op) && op.Call.After(at) {
			n++
		}
	}
	return n
}

// silentSession is a session that takes a key and then says nothing:
// it must not be released sooner than its TTL after its last frame.
type silentSession struct {
	done chan struct{}
}

// silentTTL is the silent session's TTL, short so that it expires during
// the run.
const silentTTL = 2 * time.Second

func startSilent(t *testing.T, r *run, safe *node, key string, checker *client.Session) *silentSession {
	t.Helper()
	s, err := openRaw(safe.client(), safe.i, "silent", silentTTL, 0)
	if err != nil {
		t.Fatalf("silent session: %v", err)
	}
	id, err := s.send(protocol.Lock, key, 0)
	if err == nil {
		_, err = s.await(id, answerTimeout)
	}
	if err != nil {
		s.close()
		t.Fatalf("silent session's Lock: %v", err)
	}
	last := s.sent
	ss := &silentSession{done: make(chan struct{})}
	go func() { // ends when the key is granted to the checker, or after a minute
		defer close(ss.done)
		defer s.close()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
			tok, err := checker.TryLock(ctx, key)
			cancel()
			if err == nil {
				got := time.Now()
				if d := got.Sub(last); d < silentTTL {
					r.problem("expiry", "the silent session's %s was granted to another %v after its last frame, before its TTL %v", key, d, silentTTL)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = checker.Unlock(ctx, key, tok)
				cancel()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		r.problem("expiry", "the silent session's %s was not released within a minute", key)
	}()
	return ss
}

// wait waits for the check of the silent session to end.
func (ss *silentSession) wait() { <-ss.done }
