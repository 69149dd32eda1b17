package locker

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable time for expiry tests.
type clock struct {
	mu sync.Mutex // guards now
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func open(t *testing.T, tb *Table, source string, ttl time.Duration) (*Link, *atomic.Int32) {
	t.Helper()
	var closed atomic.Int32
	l, err := tb.OpenSession(source, source+":9", ttl, func() { closed.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	return l, &closed
}

func sessionLock(t *testing.T, l *Link, key string) uint64 {
	t.Helper()
	o := newOutcome()
	if _, err := l.Lock(key, nextID(), o.done); err != nil {
		t.Fatal(err)
	}
	tok, err := o.wait(t)
	if err != nil {
		t.Fatalf("session Lock(%q): %v", key, err)
	}
	return tok
}

func TestSessionIDString(t *testing.T) {
	id := SessionID(0x00c0ffee12345678)
	if id.String() != "00c0ffee12345678" {
		t.Fatalf("String = %q", id.String())
	}
	back, err := ParseSessionID(id.String())
	if err != nil || back != id {
		t.Fatalf("ParseSessionID = %v, %v", back, err)
	}
	for _, bad := range []string{"", "123", "00000000000000000", "0000000000000000", "zzzzzzzzzzzzzzzz"} {
		if _, err := ParseSessionID(bad); err == nil {
			t.Errorf("ParseSessionID(%q) took it", bad)
		}
	}
}

func TestSessionHoldsAndUnlock(t *testing.T) {
	tb := New(Options{})
	a, _ := open(t, tb, "a", time.Minute)
	b, _ := open(t, tb, "b", time.Minute)
	if a.ID() == 0 || a.ID() == b.ID() {
		t.Fatalf("session ids %v, %v", a.ID(), b.ID())
	}
	tok := sessionLock(t, a, "k")
	ki, _ := tb.Key("k")
	if ki.Holder.Session != a.ID() || ki.Token != tok || ki.Holder.Source != "a" {
		t.Fatalf("Key = %+v", ki)
	}
	if _, err := a.TryLock("k", nextID()); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock of its own hold = %v, want ErrLocked", err)
	}
	// Another session cannot release it, by token or not.
	if _, err := b.Unlock("k", tok); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("b.Unlock(a's grant) = %v", err)
	}
	if _, err := b.Unlock("k", 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("b.Unlock(token 0) = %v", err)
	}
	if _, err := a.Unlock("k", tok+1); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock with a wrong token = %v", err)
	}
	if got, err := a.Unlock("k", tok); err != nil || got != tok {
		t.Fatalf("Unlock = %d, %v", got, err)
	}
	if _, err := a.Unlock("k", tok); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a grant already ended = %v", err)
	}
	tok2, _ := a.TryLock("k", nextID())
	if got, err := a.Unlock("k", 0); err != nil || got != tok2 {
		t.Fatalf("Unlock with token 0 = %d, %v", got, err)
	}
	info, ok := tb.SessionInfo(a.ID())
	if !ok || !info.Connected || info.Holds != 0 || info.TTL != time.Minute || info.Source != "a" {
		t.Fatalf("SessionInfo = %+v, %v", info, ok)
	}
	a.Close()
	b.Close()
	if tb.Stats().Sessions != 0 {
		t.Fatalf("sessions after Close: %d", tb.Stats().Sessions)
	}
	assertEmpty(t, tb)
}

// TestSessionWaitsForItself: a session that locks a key it holds waits,
// as with a non-reentrant mutex, until Cancel or its own Unlock.
func TestSessionWaitsForItself(t *testing.T) {
	tb := New(Options{})
	a, _ := open(t, tb, "a", time.Minute)
	tok := sessionLock(t, a, "k")
	o := newOutcome()
	p, _ := a.Lock("k", nextID(), o.done)
	if o.decided() {
		t.Fatal("a second Lock of a held key was decided at once")
	}
	if !p.Cancel() {
		t.Fatal("Cancel of the self-wait failed")
	}
	if _, err := o.wait(t); !errors.Is(err, ErrCanceled) {
		t.Fatalf("self-wait told %v", err)
	}
	o2 := newOutcome()
	a.Lock("k", nextID(), o2.done)
	a.Unlock("k", tok)
	if tok2, err := o2.wait(t); err != nil || tok2 <= tok {
		t.Fatalf("the session's second Lock after its Unlock: %d, %v", tok2, err)
	}
	a.Close()
	assertEmpty(t, tb)
}

func TestSessionEndReleasesInFIFOAndOneBatch(t *testing.T) {
	j := &recordingJournal{}
	tb := New(Options{Journal: j})
	a, closed := open(t, tb, "a", time.Minute)
	const n = 100
	for i := range n {
		sessionLock(t, a, fmt.Sprint("k", i))
	}
	// Two waiters per key, in order: first v1, then a session.
	b, _ := open(t, tb, "b", time.Minute)
	first := make([]*outcome, n)
	second := make([]*outcome, n)
	for i := range n {
		first[i], second[i] = newOutcome(), newOutcome()
		tb.LockFunc(fmt.Sprint("k", i), holder("v1"), first[i].done)
		b.Lock(fmt.Sprint("k", i), nextID(), second[i].done)
	}
	mine := newOutcome()
	tb.LockFunc("k0", holder("x"), func(uint64, error) {})
	a.Lock("k1", nextID(), mine.done) // a waits for itself on k1, behind the others
	j.take()
	res, err := tb.EndSession(a.ID())
	if err != nil || res.Released != n || res.Refused != 1 {
		t.Fatalf("EndSession = %+v, %v", res, err)
	}
	if _, err := mine.wait(t); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("the ended session's waiter told %v", err)
	}
	if closed.Load() != 1 {
		t.Fatalf("closer called %d times", closed.Load())
	}
	batches := j.take()
	if len(batches) != 1 || len(batches[0]) != 2*n {
		t.Fatalf("session end made %d batches (first of %d changes), want one of %d", len(batches), len(batches[0]), 2*n)
	}
	for i := range n {
		if _, err := first[i].wait(t); err != nil {
			t.Fatalf("key %d's first waiter: %v", i, err)
		}
		if second[i].decided() {
			t.Fatalf("key %d's second waiter overtook the first", i)
		}
	}
	if _, err := tb.EndSession(a.ID()); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("second EndSession = %v", err)
	}
	if _, err := a.TryLock("z", nextID()); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("TryLock through an ended session = %v", err)
	}
	tb.ResetBySource("v1")
	tb.ResetBySource("x")
	b.Close()
	tb.ResetBySource("x")
	assertEmpty(t, tb)
}

func TestSessionDetachResumeExpire(t *testing.T) {
	c := newClock()
	tb := New(Options{Now: c.now})
	a, _ := open(t, tb, "a", 10*time.Second)
	tok := sessionLock(t, a, "held")
	mustLock(t, tb, "busy", "other")
	w := newOutcome()
	a.Lock("busy", nextID(), w.done)

	a.Detach()
	if _, err := w.wait(t); !errors.Is(err, ErrDetached) {
		t.Fatalf("a detached session's waiter told %v", err)
	}
	if _, err := a.TryLock("x", nextID()); !errors.Is(err, ErrDetached) {
		t.Fatalf("TryLock through a detached link = %v", err)
	}
	info, _ := tb.SessionInfo(a.ID())
	if info.Connected || info.Holds != 1 || info.Waiting != 0 {
		t.Fatalf("detached SessionInfo = %+v", info)
	}
	c.advance(6 * time.Second)
	if info, _ := tb.SessionInfo(a.ID()); info.ExpiresIn != 4*time.Second {
		t.Fatalf("ExpiresIn = %v, want 4s", info.ExpiresIn)
	}
	if tb.ExpireSessions() != 0 {
		t.Fatal("expired before its TTL")
	}

	// Resume keeps the hold and restarts the TTL.
	var closedA2 atomic.Int32
	a2, err := tb.ResumeSession(a.ID(), "a:10", func() { closedA2.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if ki, _ := tb.Key("held"); ki.Token != tok || ki.Holder.Session != a.ID() {
		t.Fatalf("after resume: %+v", ki)
	}
	if got, err := a2.Unlock("held", tok); err != nil || got != tok {
		t.Fatalf("Unlock after resume = %d, %v", got, err)
	}
	tok = sessionLock(t, a2, "held")
	// A resume while connected takes over: the old link is closed.
	a3, err := tb.ResumeSession(a.ID(), "a:11", nil)
	if err != nil || closedA2.Load() != 1 {
		t.Fatalf("resume over a live link: %v, old closer called %d times", err, closedA2.Load())
	}
	if _, err := a2.TryLock("y", nextID()); !errors.Is(err, ErrDetached) {
		t.Fatalf("the taken-over link still works: %v", err)
	}
	a2.Detach() // the old connection's teardown: must not detach a3
	if info, _ := tb.SessionInfo(a.ID()); !info.Connected || info.Remote != "a:11" {
		t.Fatalf("an old link's Detach detached the new one: %+v", info)
	}

	// Expiry counts from the last frame, connected or not.
	w2 := newOutcome()
	tb.LockFunc("held", holder("next"), w2.done)
	c.advance(9 * time.Second)
	a3.Touch()
	c.advance(9 * time.Second)
	if tb.ExpireSessions() != 0 {
		t.Fatal("Touch did not restart the TTL")
	}
	c.advance(time.Second)
	if tb.ExpireSessions() != 1 {
		t.Fatal("the session did not expire one TTL after its last frame")
	}
	if tok2, err := w2.wait(t); err != nil || tok2 <= tok {
		t.Fatalf("the next waiter after expiry: %d, %v", tok2, err)
	}
	if _, err := tb.ResumeSession(a.ID(), "a:12", nil); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("resume after expiry = %v", err)
	}
	if st := tb.Stats(); st.Sessions != 0 || st.SessionExpirations != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	tb.Unlock("held")
	tb.Unlock("busy")
	assertEmpty(t, tb)
}

func TestResumeRefusesAnExpiredSession(t *testing.T) {
	c := newClock()
	tb := New(Options{Now: c.now})
	a, closed := open(t, tb, "a", time.Second)
	sessionLock(t, a, "k")
	c.advance(time.Second)
	// Not yet reaped, but past its TTL: a resume must not revive it.
	if _, err := tb.ResumeSession(a.ID(), "x", nil); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("resume past the TTL = %v", err)
	}
	if _, ok := tb.Key("k"); ok || closed.Load() != 1 {
		t.Fatalf("the expired session's hold survives (closer called %d)", closed.Load())
	}
	if _, err := tb.ResumeSession(12345, "x", nil); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("resume of an unknown id = %v", err)
	}
	assertEmpty(t, tb)
}

func TestRestoredSessionExpires(t *testing.T) {
	c := newClock()
	tb := New(Options{Now: c.now})
	id := SessionID(0xabcdef)
	h := Holder{Source: "svc", Remote: "10.0.0.1:5", Session: id}
	tb.Restore("k1", h, 0, c.now(), 5*time.Second)
	tb.Restore("k2", h, 0, c.now(), 5*time.Second)
	info, ok := tb.SessionInfo(id)
	if !ok || info.Connected || info.Holds != 2 || info.TTL != 5*time.Second {
		t.Fatalf("restored session = %+v, %v", info, ok)
	}
	c.advance(5 * time.Second)
	tb.ExpireSessions()
	if tb.Stats().Held != 0 {
		t.Fatal("a restored session's holds outlived its TTL")
	}
	assertEmpty(t, tb)
}

func TestMaxSessions(t *testing.T) {
	tb := New(Options{MaxSessions: 2})
	a, _ := open(t, tb, "a", time.Minute)
	open(t, tb, "b", time.Minute)
	if _, err := tb.OpenSession("c", "c", time.Minute, nil); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("third session = %v", err)
	}
	a.Close()
	open(t, tb, "c", time.Minute)
}

// TestEndWaitsForGrantsInFlight ends a session while a grant to it is
// being recorded (the journal is held): the grant must not escape the
// release.
func TestEndWaitsForGrantsInFlight(t *testing.T) {
	gate := &gatedJournal{entered: make(chan struct{}, 1), release: make(chan struct{})}
	tb := New(Options{Journal: gate})
	a, _ := open(t, tb, "a", time.Minute)
	gate.hold.Store(true)
	locked := make(chan uint64, 1)
	go func() {
		tok, _ := a.TryLock("k", nextID())
		locked <- tok
	}()
	<-gate.entered // the grant is in the journal
	gate.hold.Store(false)
	ended := make(chan ResetResult, 1)
	go func() {
		res, _ := tb.EndSession(a.ID())
		ended <- res
	}()
	waitFor(t, "the end to have begun", func() bool {
		a.s.mu.Lock()
		defer a.s.mu.Unlock()
		return a.s.ended
	})
	close(gate.release)
	if tok := <-locked; tok == 0 {
		t.Fatal("the grant in flight failed")
	}
	if res := <-ended; res.Released != 1 {
		t.Fatalf("EndSession released %d keys, want the grant that was in flight", res.Released)
	}
	assertEmpty(t, tb)
}

// gatedJournal blocks the batches that arrive while hold is set until
// release is closed.
type gatedJournal struct {
	hold    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedJournal) Commit([]Change) error {
	if g.hold.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return nil
}

// TestStalledSessionDoesNotExpire holds a session's connection back past
// its TTL: the TTL must not run while it is stalled, and must run again,
// from where it stood, once it is not.
func TestStalledSessionDoesNotExpire(t *testing.T) {
	c := newClock()
	tb := New(Options{Now: c.now})
	a, _ := open(t, tb, "a", time.Second)
	sessionLock(t, a, "k")
	c.advance(600 * time.Millisecond)
	a.Stall()
	c.advance(5 * time.Second)
	if n := tb.ExpireSessions(); n != 0 {
		t.Fatalf("a stalled session expired (%d)", n)
	}
	a.Unstall()
	c.advance(300 * time.Millisecond)
	if n := tb.ExpireSessions(); n != 0 {
		t.Fatal("the stalled time counted against the TTL")
	}
	c.advance(100 * time.Millisecond)
	if n := tb.ExpireSessions(); n != 1 {
		t.Fatalf("the TTL did not run again after the stall (%d expired)", n)
	}
	assertEmpty(t, tb)
}

func TestMaxSessionsPerPeer(t *testing.T) {
	tb := New(Options{MaxSessionsPerPeer: 2})
	a, err := tb.OpenSession("a", "10.0.0.1:1000", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.OpenSession("b", "10.0.0.1:1001", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.OpenSession("c", "10.0.0.1:1002", time.Minute, nil); !errors.Is(err, ErrTooManyFromPeer) {
		t.Fatalf("third session from one address = %v", err)
	}
	if _, err := tb.OpenSession("d", "[::1]:1002", time.Minute, nil); err != nil {
		t.Fatalf("a session from another address = %v", err)
	}
	if _, err := tb.ResumeSession(a.ID(), "10.0.0.1:1003", nil); err != nil {
		t.Fatalf("resume from a full address = %v", err)
	}
	if _, err := tb.EndSession(a.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.OpenSession("e", "10.0.0.1:1004", time.Minute, nil); err != nil {
		t.Fatalf("after one ended, a session from that address = %v", err)
	}
}

// testIDs gives each test request an id of its own, as a client does:
// a request that reused the id of the grant its session holds would be
// a Reissue.
var testIDs atomic.Uint32

func nextID() uint32 { return testIDs.Add(1) }

// TestReissueFindsTheGrant sends a Lock and a TryLock again with the ids
// of the requests whose grants the session holds, as a client does after
// a lost answer: each gets its grant back at once, while another id, the
// other action, another session or a released grant does not.
func TestReissueFindsTheGrant(t *testing.T) {
	tb := New(Options{})
	a, _ := open(t, tb, "a", time.Minute)
	b, _ := open(t, tb, "b", time.Minute)

	o := newOutcome()
	if _, err := a.Lock("k", 7, o.done); err != nil {
		t.Fatal(err)
	}
	tok, _ := o.wait(t)
	// The same Lock again: its grant, at once, and still one hold.
	again := newOutcome()
	if _, err := a.Lock("k", 7, again.done); err != nil || !again.decided() {
		t.Fatalf("reissued Lock: %v, decided %v", err, again.decided())
	}
	if tok2, err := again.wait(t); err != nil || tok2 != tok {
		t.Fatalf("reissued Lock = %d, %v; want the grant %d", tok2, err, tok)
	}
	if n := tb.Stats().Held; n != 1 {
		t.Fatalf("%d keys held after the reissue", n)
	}
	// A TryLock with that id is another request: the key is held.
	if _, err := a.TryLock("k", 7); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock with the id of a Lock = %v; want ErrLocked", err)
	}
	// Another session with that id waits like anyone else.
	other := newOutcome()
	p, _ := b.Lock("k", 7, other.done)
	if other.decided() {
		t.Fatal("another session's Lock with the same id was granted")
	}
	p.Cancel()

	tt, err := a.TryLock("t", 9)
	if err != nil {
		t.Fatal(err)
	}
	if tt2, err := a.TryLock("t", 9); err != nil || tt2 != tt {
		t.Fatalf("reissued TryLock = %d, %v; want %d", tt2, err, tt)
	}
	if _, err := a.TryLock("t", 10); !errors.Is(err, ErrLocked) {
		t.Fatalf("TryLock with another id = %v", err)
	}
	// Once released, the id names no grant: the request is a new one.
	if _, err := a.Unlock("t", tt); err != nil {
		t.Fatal(err)
	}
	if tt3, err := a.TryLock("t", 9); err != nil || tt3 <= tt {
		t.Fatalf("TryLock after the release = %d, %v; want a new grant", tt3, err)
	}
	// Through a stale link (a resume took the session), nothing is found.
	a2, err := tb.ResumeSession(a.ID(), "a:10", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lock("k", 7, newOutcome().done); !errors.Is(err, ErrDetached) {
		t.Fatalf("reissue through a stale link = %v", err)
	}
	// Through the resumed link, the grant is found (and survives a restore).
	back := newOutcome()
	if _, err := a2.Lock("k", 7, back.done); err != nil {
		t.Fatal(err)
	}
	if tok3, _ := back.wait(t); tok3 != tok {
		t.Fatalf("reissue after the resume = %d; want %d", tok3, tok)
	}
	a2.Close()
	b.Close()
	assertEmpty(t, tb)
}

// TestReissueAfterRestore restores a session hold with the request that
// made it, as a replay does: the request sent again finds it.
func TestReissueAfterRestore(t *testing.T) {
	tb := New(Options{})
	id := SessionID(0xabc)
	h := Holder{Source: "svc", Remote: "10.0.0.1:5", Session: id, Origin: Origin{OriginLock, 42}}
	tok, err := tb.Restore("k", h, 1234, time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tb.ResumeSession(id, "10.0.0.1:6", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := newOutcome()
	if _, err := l.Lock("k", 42, o.done); err != nil {
		t.Fatal(err)
	}
	if got, _ := o.wait(t); got != tok {
		t.Fatalf("reissue of a restored grant = %d; want %d", got, tok)
	}
	l.Close()
	assertEmpty(t, tb)
}
