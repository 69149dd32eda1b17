package locker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func holder(name string) Holder { return Holder{Source: name, Remote: name + ":1"} }

// waitFor polls cond until it holds; it fails the test after a generous
// deadline instead of sleeping a guessed amount.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

// outcome collects what a LockFunc's done was told.
type outcome struct {
	mu    sync.Mutex // guards the fields below: done runs on other goroutines
	calls int
	token uint64
	err   error
	ch    chan struct{}
}

func newOutcome() *outcome { return &outcome{ch: make(chan struct{})} }

func (o *outcome) done(token uint64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	o.token, o.err = token, err
	if o.calls == 1 {
		close(o.ch)
	}
}

func (o *outcome) wait(t *testing.T) (uint64, error) {
	t.Helper()
	select {
	case <-o.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("done was never called")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls != 1 {
		t.Fatalf("done called %d times", o.calls)
	}
	return o.token, o.err
}

func (o *outcome) decided() bool {
	select {
	case <-o.ch:
		return true
	default:
		return false
	}
}

func mustLock(t *testing.T, tb *Table, key, who string) uint64 {
	t.Helper()
	token, err := tb.Lock(context.Background(), key, holder(who))
	if err != nil {
		t.Fatalf("Lock(%q) by %s: %v", key, who, err)
	}
	return token
}

func assertEmpty(t *testing.T, tb *Table) {
	t.Helper()
	waitFor(t, "table to drain", func() bool {
		s := tb.Stats()
		return s.Held == 0 && s.Waiting == 0
	})
	for i := range tb.shards {
		s := &tb.shards[i]
		s.mu.Lock()
		n := len(s.keys)
		s.mu.Unlock()
		if n != 0 {
			t.Fatalf("shard %d still has %d entries after everything was released", i, n)
		}
	}
}

func TestLockUnlockAndTokens(t *testing.T) {
	start := uint64(time.Now().UnixMicro())
	tb := New(Options{})
	t1 := mustLock(t, tb, "k", "a")
	if t1 < start {
		t.Fatalf("first token %d is below the start time in µs %d", t1, start)
	}
	ki, ok := tb.Key("k")
	if !ok || ki.Holder.Source != "a" || ki.Token != t1 || ki.Holder.Session != 0 || ki.Since.IsZero() {
		t.Fatalf("Key after Lock = %+v, %v", ki, ok)
	}
	if _, err := tb.TryLock("k", holder("b")); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock on a held key = %v, want ErrLocked", err)
	}
	if got, err := tb.Unlock("k"); err != nil || got != t1 {
		t.Fatalf("Unlock = %d, %v; want %d", got, err, t1)
	}
	if _, err := tb.Unlock("k"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	t2, err := tb.TryLock("k", holder("b"))
	if err != nil || t2 <= t1 {
		t.Fatalf("TryLock on a free key = %d, %v (previous token %d)", t2, err, t1)
	}
	if _, err := tb.Lock(context.Background(), "", holder("a")); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Lock of an empty key = %v", err)
	}
	if _, err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, tb)
}

func TestTokenFloor(t *testing.T) {
	floor := uint64(time.Now().Add(time.Hour).UnixMicro())
	tb := New(Options{TokenFloor: floor})
	if tok := mustLock(t, tb, "k", "a"); tok != floor+1 {
		t.Fatalf("first token %d, want floor+1 = %d", tok, floor+1)
	}
	tb.RaiseTokens(floor + 100)
	if tok, _ := tb.TryLock("j", holder("a")); tok != floor+101 {
		t.Fatalf("token after RaiseTokens = %d, want %d", tok, floor+101)
	}
	tb.RaiseTokens(5) // never lowers
	if tok, _ := tb.TryLock("i", holder("a")); tok != floor+102 {
		t.Fatalf("token after a lower RaiseTokens = %d", tok)
	}
}

func TestFIFOFiftyWaitersAndTokensGrow(t *testing.T) {
	tb := New(Options{})
	last := mustLock(t, tb, "k", "first")
	var outs []*outcome
	for i := range 50 {
		o := newOutcome()
		if _, err := tb.LockFunc("k", holder(fmt.Sprint("w", i)), o.done); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
	}
	if ki, _ := tb.Key("k"); ki.Waiters != 50 || len(ki.Queue) != 50 || ki.Queue[0].Source != "w0" || ki.Queue[49].Source != "w49" {
		t.Fatalf("queue = %d waiters, %+v", ki.Waiters, ki.Queue)
	}
	for i, o := range outs {
		if _, err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
		token, err := o.wait(t)
		if err != nil || token <= last {
			t.Fatalf("waiter %d: token %d (previous %d), %v", i, token, last, err)
		}
		for _, later := range outs[i+1:] {
			if later.decided() {
				t.Fatalf("a later waiter was decided before waiter %d", i)
			}
		}
		last = token
	}
	tb.Unlock("k")
	assertEmpty(t, tb)
}

func TestCancel(t *testing.T) {
	tb := New(Options{})
	mustLock(t, tb, "k", "h")
	a, b := newOutcome(), newOutcome()
	pa, _ := tb.LockFunc("k", holder("a"), a.done)
	pb, _ := tb.LockFunc("k", holder("b"), b.done)
	if !pa.Cancel() {
		t.Fatal("Cancel of a queued waiter reported false")
	}
	if _, err := a.wait(t); !errors.Is(err, ErrCanceled) {
		t.Fatalf("cancelled waiter told %v", err)
	}
	if pa.Cancel() {
		t.Fatal("second Cancel reported true")
	}
	tb.Unlock("k")
	if tok, err := b.wait(t); err != nil || tok == 0 {
		t.Fatalf("b after the cancelled a: %d, %v", tok, err)
	}
	if pb.Cancel() {
		t.Fatal("Cancel after the grant reported true")
	}
	if ki, _ := tb.Key("k"); ki.Holder.Source != "b" {
		t.Fatalf("holder %q, want b (a Cancel after the grant changes nothing)", ki.Holder.Source)
	}
	tb.Unlock("k")
	assertEmpty(t, tb)
}

// TestLockContextRacingGrant cancels a blocking Lock at the instant of the
// release, many times: whichever comes first, the key ends with the second
// waiter, never held by the one that left.
func TestLockContextRacingGrant(t *testing.T) {
	tb := New(Options{})
	bg := context.Background()
	for range 300 {
		mustLock(t, tb, "k", "h")
		ctx, cancel := context.WithCancel(bg)
		ghost := make(chan error, 1)
		go func() { _, err := tb.Lock(ctx, "k", holder("ghost")); ghost <- err }()
		waitFor(t, "ghost queued", func() bool { ki, _ := tb.Key("k"); return ki.Waiters == 1 })
		live := newOutcome()
		tb.LockFunc("k", holder("live"), live.done)
		go cancel()
		if _, err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
		if err := <-ghost; err == nil {
			tb.Unlock("k") // it won before the cancel: a real holder
		}
		if _, err := live.wait(t); err != nil {
			t.Fatal(err)
		}
		if ki, _ := tb.Key("k"); ki.Holder.Source != "live" {
			t.Fatalf("holder = %q, want live", ki.Holder.Source)
		}
		tb.Unlock("k")
	}
	assertEmpty(t, tb)
}

func TestReleaseByTokenNeverFreesAnother(t *testing.T) {
	tb := New(Options{})
	first := mustLock(t, tb, "deploy/prod", "first")
	// An operator resets the key; a second client takes it.
	if res, err := tb.ResetByKey("deploy/prod"); err != nil || res.Released != 1 {
		t.Fatalf("ResetByKey = %+v, %v", res, err)
	}
	second := mustLock(t, tb, "deploy/prod", "second")
	// The first client's late release, by its token, frees nothing.
	if err := tb.Release("deploy/prod", first); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("stale Release = %v, want ErrNotHeld", err)
	}
	if ki, _ := tb.Key("deploy/prod"); ki.Token != second {
		t.Fatalf("after a stale release the key has token %d, want the second holder's %d", ki.Token, second)
	}
	if err := tb.Release("deploy/prod", second); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, tb)
}

func TestResets(t *testing.T) {
	tb := New(Options{})
	mustLock(t, tb, "k1", "svc")
	mustLock(t, tb, "k2", "svc")
	mustLock(t, tb, "k3", "other")
	w1, w2, w3 := newOutcome(), newOutcome(), newOutcome()
	tb.LockFunc("k1", holder("other"), w1.done)
	tb.LockFunc("k3", holder("svc"), w2.done)
	tb.LockFunc("k1", holder("third"), w3.done)

	res, err := tb.ResetBySource("svc")
	if err != nil || res.Released != 2 || res.Refused != 1 {
		t.Fatalf("ResetBySource = %+v, %v", res, err)
	}
	if _, err := w2.wait(t); !errors.Is(err, ErrSourceReset) {
		t.Fatalf("svc's waiter told %v", err)
	}
	if _, err := w1.wait(t); err != nil {
		t.Fatalf("k1's next waiter: %v", err)
	}
	if _, ok := tb.Key("k2"); ok {
		t.Fatal("k2 still held after its source's reset")
	}
	res, err = tb.ResetByKey("k1")
	if err != nil || res.Released != 1 || res.Refused != 1 {
		t.Fatalf("ResetByKey = %+v, %v", res, err)
	}
	if _, err := w3.wait(t); !errors.Is(err, ErrReset) {
		t.Fatalf("k1's waiter told %v", err)
	}
	if res, err := tb.ResetByKey("k1"); err != nil || res != (ResetResult{}) {
		t.Fatalf("reset of a free key = %+v, %v", res, err)
	}
	tb.Unlock("k3")
	assertEmpty(t, tb)
}

// recordingJournal keeps every batch, and refuses them while fail is set.
type recordingJournal struct {
	mu      sync.Mutex // guards batches
	batches [][]Change
	fail    atomic.Bool
}

func (j *recordingJournal) Commit(b []Change) error {
	if j.fail.Load() {
		return errors.New("disk on fire")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.batches = append(j.batches, append([]Change(nil), b...))
	return nil
}

func (j *recordingJournal) take() [][]Change {
	j.mu.Lock()
	defer j.mu.Unlock()
	b := j.batches
	j.batches = nil
	return b
}

func TestJournalBatches(t *testing.T) {
	j := &recordingJournal{}
	tb := New(Options{Journal: j})
	t1 := mustLock(t, tb, "k", "a")
	w := newOutcome()
	tb.LockFunc("k", holder("b"), w.done)
	if got := j.take(); len(got) != 1 || len(got[0]) != 1 || !got[0][0].Grant || got[0][0].Token != t1 {
		t.Fatalf("a grant's batches: %+v", got)
	}
	tb.Unlock("k")
	t2, _ := w.wait(t)
	got := j.take()
	if len(got) != 1 || len(got[0]) != 2 || got[0][0].Grant || got[0][0].Token != t1 || !got[0][1].Grant || got[0][1].Token != t2 || got[0][1].Holder.Source != "b" {
		t.Fatalf("a handover is one batch of release+grant; got %+v", got)
	}

	// Refusals change nothing.
	j.fail.Store(true)
	if _, err := tb.TryLock("x", holder("a")); !errors.Is(err, ErrJournal) {
		t.Fatalf("TryLock with a refusing journal = %v", err)
	}
	if _, err := tb.Lock(context.Background(), "x", holder("a")); !errors.Is(err, ErrJournal) {
		t.Fatalf("Lock with a refusing journal = %v", err)
	}
	w2 := newOutcome()
	tb.LockFunc("k", holder("c"), w2.done)
	if _, err := tb.Unlock("k"); !errors.Is(err, ErrJournal) {
		t.Fatalf("Unlock with a refusing journal = %v", err)
	}
	if _, err := tb.ResetByKey("k"); !errors.Is(err, ErrJournal) {
		t.Fatalf("ResetByKey with a refusing journal = %v", err)
	}
	if _, err := tb.ResetBySource("b"); !errors.Is(err, ErrJournal) {
		t.Fatalf("ResetBySource with a refusing journal = %v", err)
	}
	if ki, ok := tb.Key("k"); !ok || ki.Token != t2 || ki.Waiters != 1 || w2.decided() {
		t.Fatalf("after refused releases: %+v, %v, waiter decided %v", ki, ok, w2.decided())
	}
	j.fail.Store(false)

	// Multi-key releases are one batch.
	tb.Unlock("k")
	w2.wait(t)
	for i := range 5 {
		mustLock(t, tb, fmt.Sprint("m", i), "many")
	}
	j.take()
	if res, err := tb.ResetBySource("many"); err != nil || res.Released != 5 {
		t.Fatalf("ResetBySource = %+v, %v", res, err)
	}
	if got := j.take(); len(got) != 1 || len(got[0]) != 5 {
		t.Fatalf("ResetBySource of 5 keys made batches %+v, want one of 5", got)
	}
	tb.Unlock("k")
	assertEmpty(t, tb)
}

func TestRestoreAndHooks(t *testing.T) {
	var grants, releases atomic.Int32
	tb := New(Options{
		OnGrant:   func(time.Duration) { grants.Add(1) },
		OnRelease: func(time.Duration) { releases.Add(1) },
	})
	since := time.Now().Add(-time.Hour)
	high := uint64(time.Now().Add(time.Hour).UnixMicro())
	if tok, err := tb.Restore("k", holder("old"), high, since, 0); err != nil || tok != high {
		t.Fatalf("Restore = %d, %v", tok, err)
	}
	if _, err := tb.Restore("k", holder("old"), 0, since, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Restore = %v", err)
	}
	ki, ok := tb.Key("k")
	if !ok || !ki.Since.Equal(since) || ki.Holder.Source != "old" || ki.Token != high {
		t.Fatalf("restored key = %+v", ki)
	}
	tok0, err := tb.Restore("j", holder("older"), 0, since, 0)
	if err != nil || tok0 <= high {
		t.Fatalf("Restore without a token gave %d (restored high %d), %v", tok0, high, err)
	}
	tb.Unlock("k")
	tb.Unlock("j")
	if tok := mustLock(t, tb, "k", "new"); tok <= tok0 {
		t.Fatalf("token after restores %d, want > %d", tok, tok0)
	}
	if g, r := grants.Load(), releases.Load(); g != 1 || r != 2 {
		t.Fatalf("hooks saw %d grants, %d releases", g, r)
	}
	n := 0
	tb.Each(func(KeyInfo) bool { n++; return true })
	if n != 1 {
		t.Fatalf("Each visited %d keys", n)
	}
}

// TestMutualExclusionUnderChurn runs v1 lockers that give up, session
// lockers that cancel, on a few keys at once and checks that no two holders ever
// overlap on a key and that tokens only grow per key.
func TestMutualExclusionUnderChurn(t *testing.T) {
	tb := New(Options{})
	const keys = 4
	var inside [keys]atomic.Int32
	var lastToken [keys]atomic.Uint64
	check := func(k int, token uint64) {
		if inside[k].Add(1) != 1 {
			t.Errorf("two holders of key %d at once", k)
		}
		for {
			last := lastToken[k].Load()
			if token <= last {
				t.Errorf("key %d: token %d after %d", k, token, last)
				break
			}
			if lastToken[k].CompareAndSwap(last, token) {
				break
			}
		}
	}
	leave := func(k int) { inside[k].Add(-1) }
	iters := 400
	if raceEnabled {
		iters = 150
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			var l *Link
			if g%2 == 0 {
				var err error
				if l, err = tb.OpenSession(fmt.Sprint("s", g), "r", time.Minute, nil); err != nil {
					t.Error(err)
					return
				}
			}
			for range iters {
				k := r.IntN(keys)
				key := fmt.Sprint("key", k)
				switch {
				case l != nil:
					o := newOutcome()
					p, err := l.Lock(key, nextID(), o.done)
					if err != nil {
						t.Error(err)
						return
					}
					if r.IntN(4) == 0 {
						p.Cancel()
					}
					token, err := o.wait(t)
					if err != nil {
						continue
					}
					check(k, token)
					leave(k)
					if _, err := l.Unlock(key, token); err != nil && !errors.Is(err, ErrNotHeld) {
						t.Error(err)
					}
				default:
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(200))*time.Microsecond)
					token, err := tb.Lock(ctx, key, holder(fmt.Sprint("v", g)))
					cancel()
					if err != nil {
						continue
					}
					check(k, token)
					leave(k)
					if err := tb.Release(key, token); err != nil && !errors.Is(err, ErrNotHeld) {
						t.Error(err)
					}
				}
			}
			if l != nil {
				l.Close()
			}
		})
	}
	wg.Wait()
	assertEmpty(t, tb)
}
