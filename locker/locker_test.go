package locker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker/lockertest"
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

func queueLen(tb *Table, key string) int {
	ki, ok := tb.Key(key)
	if !ok {
		return -1
	}
	return ki.Waiters
}

// queueWaiters starts n Lock calls on key, each only after the previous one
// is queued, and returns a channel receiving each waiter's index when it is
// granted, plus one receiving every waiter's final error.
type waiterResult struct {
	i   int
	err error
}

func queueWaiters(t *testing.T, tb *Table, ctxs []context.Context, key string) (granted chan int, results chan waiterResult) {
	t.Helper()
	granted = make(chan int, len(ctxs))
	results = make(chan waiterResult, len(ctxs))
	base := lockertest.Parked()
	for i, ctx := range ctxs {
		go func() {
			err := tb.Lock(ctx, key, holder(fmt.Sprintf("w%d", i)))
			if err == nil {
				granted <- i
			}
			results <- waiterResult{i, err}
		}()
		// Parked, not only registered: the next waiter must queue behind.
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), func() bool {
			return queueLen(tb, key) == i+1 && lockertest.Parked() == base+i+1
		})
	}
	return granted, results
}

func background(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctxs[i] = context.Background()
	}
	return ctxs
}

func TestLockUnlock(t *testing.T) {
	tb := New(Options{})
	if err := tb.Lock(context.Background(), "k", holder("a")); err != nil {
		t.Fatalf("Lock on a free key: %v", err)
	}
	ki, ok := tb.Key("k")
	if !ok || ki.Holder.Source != "a" || ki.Holder.Remote != "a:1" || ki.Since.IsZero() {
		t.Fatalf("Key after Lock = %+v, %v", ki, ok)
	}
	if err := tb.TryLock("k", holder("b")); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock on a held key = %v, want ErrLocked", err)
	}
	if err := tb.Unlock("k"); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := tb.Unlock("k"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	if err := tb.TryLock("k", holder("b")); err != nil {
		t.Fatalf("TryLock on a free key: %v", err)
	}
	if s := tb.Stats(); s.Held != 1 || s.Waiting != 0 {
		t.Fatalf("Stats = %+v", s)
	}
	if err := tb.Lock(context.Background(), "", holder("a")); !errors.Is(err, ErrEmptyKey) {
		t.Fatalf("Lock with an empty key = %v", err)
	}
}

func TestFIFOFiftyWaiters(t *testing.T) {
	tb := New(Options{})
	if err := tb.Lock(context.Background(), "k", holder("first")); err != nil {
		t.Fatal(err)
	}
	const n = 50
	granted, _ := queueWaiters(t, tb, background(n), "k")
	ki, _ := tb.Key("k")
	for i, w := range ki.Queue {
		if want := fmt.Sprintf("w%d", i); w.Source != want {
			t.Fatalf("queue[%d] = %s, want %s", i, w.Source, want)
		}
	}
	for want := range n {
		if err := tb.Unlock("k"); err != nil {
			t.Fatalf("Unlock %d: %v", want, err)
		}
		if got := <-granted; got != want {
			t.Fatalf("grant %d went to waiter %d", want, got)
		}
	}
	if err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, tb)
}

func TestCancelledWaiterNeverGranted(t *testing.T) {
	tb := New(Options{})
	if err := tb.Lock(context.Background(), "k", holder("first")); err != nil {
		t.Fatal(err)
	}
	const n = 10
	ctxs := background(n)
	cancels := map[int]context.CancelFunc{}
	for _, i := range []int{0, 4, 5, 9} {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
	}
	granted, results := queueWaiters(t, tb, ctxs, "k")
	for _, cancel := range cancels {
		cancel()
	}
	waitFor(t, "cancelled waiters to leave", func() bool { return queueLen(tb, "k") == n-len(cancels) })
	for _, want := range []int{1, 2, 3, 6, 7, 8} {
		if err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
		if got := <-granted; got != want {
			t.Fatalf("grant went to %d, want %d", got, want)
		}
	}
	if err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	for range n {
		r := <-results
		if _, cancelled := cancels[r.i]; cancelled != errors.Is(r.err, context.Canceled) {
			t.Fatalf("waiter %d: err = %v", r.i, r.err)
		}
	}
	assertEmpty(t, tb)
}

func TestResetByKeyRefusesEveryWaiter(t *testing.T) {
	tb := New(Options{})
	if err := tb.Lock(context.Background(), "k", holder("h")); err != nil {
		t.Fatal(err)
	}
	const n = 5
	_, results := queueWaiters(t, tb, background(n), "k")
	res, err := tb.ResetByKey("k")
	if err != nil || res.Released != 1 || res.Refused != n {
		t.Fatalf("ResetByKey = %+v, %v; want 1 released, %d refused", res, err, n)
	}
	for range n {
		if r := <-results; !errors.Is(r.err, ErrReset) {
			t.Fatalf("waiter %d: %v, want ErrReset", r.i, r.err)
		}
	}
	// Idempotent, and the key is usable again.
	if res, err := tb.ResetByKey("k"); err != nil || res != (ResetResult{}) {
		t.Fatalf("second ResetByKey = %+v, %v", res, err)
	}
	if err := tb.TryLock("k", holder("x")); err != nil {
		t.Fatalf("TryLock after reset: %v", err)
	}
	if err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, tb)
}

func TestResetBySource(t *testing.T) {
	tb := New(Options{})
	ctx := context.Background()
	// bad holds k1; on k2, held by other, bad waits ahead of good.
	for _, kv := range [][2]string{{"k1", "bad"}, {"k2", "other"}} {
		if err := tb.Lock(ctx, kv[0], holder(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	k1 := make(chan error, 1)
	go func() { k1 <- tb.Lock(ctx, "k1", holder("good")) }()
	waitFor(t, "good queued on k1", func() bool { return queueLen(tb, "k1") == 1 && lockertest.Parked() == 1 })
	k2bad := make(chan error, 1)
	go func() { k2bad <- tb.Lock(ctx, "k2", holder("bad")) }()
	waitFor(t, "bad queued on k2", func() bool { return queueLen(tb, "k2") == 1 && lockertest.Parked() == 2 })
	k2good := make(chan error, 1)
	go func() { k2good <- tb.Lock(ctx, "k2", holder("good")) }()
	waitFor(t, "good queued on k2", func() bool { return queueLen(tb, "k2") == 2 && lockertest.Parked() == 3 })

	res, err := tb.ResetBySource("bad")
	if err != nil || res.Released != 1 || res.Refused != 1 {
		t.Fatalf("ResetBySource = %+v, %v", res, err)
	}
	if err := <-k1; err != nil {
		t.Fatalf("good on k1 should be granted after bad's release: %v", err)
	}
	if err := <-k2bad; !errors.Is(err, ErrSourceReset) {
		t.Fatalf("bad's waiter on k2: %v, want ErrSourceReset", err)
	}
	// bad's waiter was withdrawn, so releasing k2 goes to good.
	if err := tb.Unlock("k2"); err != nil {
		t.Fatal(err)
	}
	if err := <-k2good; err != nil {
		t.Fatal(err)
	}
	if ki, _ := tb.Key("k1"); ki.Holder.Source != "good" {
		t.Fatalf("k1 holder = %q", ki.Holder.Source)
	}
	for _, k := range []string{"k1", "k2"} {
		if err := tb.Unlock(k); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, tb)
}

// TestTryLockDuringHandover checks ordering strictly: with the thief only
// trying (never unlocking), the waiter always ends up the holder.
func TestTryLockDuringHandover(t *testing.T) {
	tb := New(Options{})
	ctx := context.Background()
	for range 300 {
		if err := tb.Lock(ctx, "k", holder("h")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- tb.Lock(ctx, "k", holder("w")) }()
		waitFor(t, "waiter queued", func() bool { return queueLen(tb, "k") == 1 })
		won := make(chan bool, 1)
		go func() {
			for range 1000 {
				if tb.TryLock("k", holder("thief")) == nil {
					won <- true
					return
				}
			}
			won <- false
		}()
		if err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if <-won {
			t.Fatal("a TryLock won the key while a waiter was queued for it")
		}
		if ki, _ := tb.Key("k"); ki.Holder.Source != "w" {
			t.Fatalf("holder = %q, want the waiter", ki.Holder.Source)
		}
		if err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, tb)
}

// TestContention mixes lockers, resets, cancellations and try-locks on a few
// keys: nothing may deadlock, and everything must be reclaimed.
func TestContention(t *testing.T) {
	tb := New(Options{})
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				k := (g + i) % len(keys)
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%5)*time.Millisecond+time.Millisecond)
				var err error
				if i%7 == 0 {
					err = tb.TryLock(keys[k], holder(fmt.Sprint("g", g)))
				} else {
					err = tb.Lock(ctx, keys[k], holder(fmt.Sprint("g", g)))
				}
				cancel()
				if err != nil {
					continue
				}
				// A reset or another Unlock may have released it already.
				_ = tb.Unlock(keys[k])
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			_, _ = tb.ResetByKey(keys[i%len(keys)])
			_, _ = tb.ResetBySource(fmt.Sprint("g", i%16))
		}
	})
	wg.Wait()
	// Mutual exclusion cannot be asserted strictly here because resets and
	// foreign unlocks release keys under their holders by design; what
	// must hold is that the table drains completely.
	for _, k := range keys {
		_, _ = tb.ResetByKey(k)
	}
	assertEmpty(t, tb)
}

func TestStateReclaimed(t *testing.T) {
	tb := New(Options{})
	ctx := context.Background()
	for i := range 10000 {
		k := fmt.Sprint("key-", i)
		if err := tb.Lock(ctx, k, holder("a")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10000 {
		if err := tb.Unlock(fmt.Sprint("key-", i)); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, tb)
	for i := range tb.shards {
		if p := tb.shards[i].peak; p > 1024 {
			t.Fatalf("shard %d peak %d: map not rebuilt after shrinking", i, p)
		}
	}
}

func TestGrantRacingCancellationIsHandedOn(t *testing.T) {
	// Cancel the head waiter at the same instant as the release, many
	// times: whichever exit its select takes, the key must end up with
	// the second waiter, never left held by the departed one.
	tb := New(Options{})
	bg := context.Background()
	for range 500 {
		if err := tb.Lock(bg, "k", holder("h")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(bg)
		ghost := make(chan error, 1)
		go func() { ghost <- tb.Lock(ctx, "k", holder("ghost")) }()
		waitFor(t, "ghost queued", func() bool { return queueLen(tb, "k") == 1 && lockertest.Parked() == 1 })
		live := make(chan error, 1)
		go func() { live <- tb.Lock(bg, "k", holder("live")) }()
		waitFor(t, "live queued", func() bool { return queueLen(tb, "k") == 2 && lockertest.Parked() == 2 })
		go cancel()
		if err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
		gerr := <-ghost
		if gerr == nil {
			// The ghost's grant won the race before the cancel: it is a
			// real holder; release it as its owner would.
			if err := tb.Unlock("k"); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-live; err != nil {
			t.Fatal(err)
		}
		if ki, _ := tb.Key("k"); ki.Holder.Source != "live" {
			t.Fatalf("holder = %q, want live", ki.Holder.Source)
		}
		if err := tb.Unlock("k"); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, tb)
}

type refusingJournal struct {
	failAcquire, failRelease atomic.Bool
	acquires, releases       atomic.Int32
}

func (j *refusingJournal) Acquire(string, Holder, time.Time) error {
	j.acquires.Add(1)
	if j.failAcquire.Load() {
		return errors.New("disk on fire")
	}
	return nil
}

func (j *refusingJournal) Release(string) error {
	j.releases.Add(1)
	if j.failRelease.Load() {
		return errors.New("disk on fire")
	}
	return nil
}

func TestJournalRefusals(t *testing.T) {
	j := &refusingJournal{}
	tb := New(Options{Journal: j})
	ctx := context.Background()

	j.failAcquire.Store(true)
	if err := tb.Lock(ctx, "k", holder("a")); !errors.Is(err, ErrJournal) {
		t.Fatalf("Lock with a refusing journal = %v, want ErrJournal", err)
	}
	if err := tb.TryLock("k", holder("a")); !errors.Is(err, ErrJournal) {
		t.Fatalf("TryLock with a refusing journal = %v, want ErrJournal", err)
	}
	assertEmpty(t, tb)

	// A refused acquire hands the key on to the next waiter.
	j.failAcquire.Store(false)
	if err := tb.Lock(ctx, "k", holder("a")); err != nil {
		t.Fatal(err)
	}
	j.failRelease.Store(true)
	if err := tb.Unlock("k"); !errors.Is(err, ErrJournal) {
		t.Fatalf("Unlock with a refusing journal = %v", err)
	}
	if _, ok := tb.Key("k"); !ok {
		t.Fatal("a release that was not recorded took effect")
	}
	if _, err := tb.ResetByKey("k"); !errors.Is(err, ErrJournal) {
		t.Fatalf("ResetByKey with a refusing journal = %v", err)
	}
	if _, err := tb.ResetBySource("a"); !errors.Is(err, ErrJournal) {
		t.Fatalf("ResetBySource with a refusing journal = %v", err)
	}
	if _, ok := tb.Key("k"); !ok {
		t.Fatal("a reset that was not recorded took effect")
	}
	j.failRelease.Store(false)
	if err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	if a, r := j.acquires.Load(), j.releases.Load(); a != 3 || r != 4 {
		t.Fatalf("journal saw %d acquires and %d releases, want 3 and 4", a, r)
	}
	assertEmpty(t, tb)
}

func TestRestoreAndHooks(t *testing.T) {
	var grants, releases atomic.Int32
	tb := New(Options{
		OnGrant:   func(time.Duration) { grants.Add(1) },
		OnRelease: func(time.Duration) { releases.Add(1) },
	})
	since := time.Now().Add(-time.Hour)
	if err := tb.Restore("k", holder("old"), since); err != nil {
		t.Fatal(err)
	}
	if err := tb.Restore("k", holder("old"), since); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Restore = %v", err)
	}
	ki, ok := tb.Key("k")
	if !ok || !ki.Since.Equal(since) || ki.Holder.Source != "old" {
		t.Fatalf("restored key = %+v", ki)
	}
	if err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	if err := tb.Lock(context.Background(), "k", holder("new")); err != nil {
		t.Fatal(err)
	}
	if g, r := grants.Load(), releases.Load(); g != 1 || r != 1 {
		t.Fatalf("hooks saw %d grants, %d releases", g, r)
	}
	n := 0
	tb.Each(func(ki KeyInfo) bool { n++; return true })
	if n != 1 {
		t.Fatalf("Each visited %d keys", n)
	}
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

// TestRegisteredWaiterIsNotOvertaken covers the stretch between a waiter
// registering and parking on the channel: the key may be free then (its
// holder just let go), and a TryLock must not take it from under the
// waiter, which the registry already shows as queued.
func TestRegisteredWaiterIsNotOvertaken(t *testing.T) {
	tb := New(Options{})
	e := tb.ref("k")
	r := &request{id: tb.nextID.Add(1), Holder: holder("early"), cancel: make(chan struct{})}
	e.mu.Lock()
	e.reset = make(chan struct{})
	e.waiters = map[uint64]*request{r.id: r}
	tb.waiting.Add(1)
	e.mu.Unlock()

	for range 100 {
		if err := tb.TryLock("k", holder("thief")); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryLock while a waiter is registered = %v, want ErrLocked", err)
		}
	}
	// The waiter parks now and, the key being free, wins it at once.
	e.slot <- r
	e.mu.Lock()
	if err := tb.acknowledge(context.Background(), e, r, nil, r.since); err != nil {
		t.Fatal(err)
	}
	if ki, _ := tb.Key("k"); ki.Holder.Source != "early" || ki.Waiters != 0 {
		t.Fatalf("after the waiter's grant: %+v", ki)
	}
	if err := tb.Unlock("k"); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, tb)
}
