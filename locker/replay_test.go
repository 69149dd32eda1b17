package locker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestTableIsAFunctionOfItsJournal drives a journaled table with every
// kind of change at once — v1 and session lockers that give up, TryLocks,
// releases by token and v1 Unlocks of whoever holds, resets by key and by
// source, sessions that close, are ended from outside, expire or stay open
// — and then folds the journal's batches, in the order the journal got
// them, into a table of its own. The journal must read as a history that could have
// happened (no grant of a key already held, no release of a grant that is
// not the key's current one, tokens growing per key and never given twice),
// and folding it must give exactly the table's holders: key, token, holder,
// session and since. That is what lets the same batches rebuild the table
// after a restart, or on another machine.
func TestTableIsAFunctionOfItsJournal(t *testing.T) {
	t.Run("every batch recorded", func(t *testing.T) { churnAndFold(t, 0) })
	// A journal that refuses a batch now and then: whatever it refused
	// must have changed nothing.
	t.Run("one batch in eight refused", func(t *testing.T) { churnAndFold(t, 8) })
}

// refusingJournal records batches as recordingJournal does, but refuses
// each with a chance of one in every (never when every is 0 or off is set).
type refusingJournal struct {
	recordingJournal
	every   int
	off     atomic.Bool
	refused atomic.Int64
}

func (j *refusingJournal) Commit(b []Change) error {
	if j.every > 0 && !j.off.Load() && rand.IntN(j.every) == 0 {
		j.refused.Add(1)
		return errors.New("refused, for the test")
	}
	return j.recordingJournal.Commit(b)
}

func churnAndFold(t *testing.T, refuseEvery int) {
	j := &refusingJournal{every: refuseEvery}
	c := newClock()
	tb := New(Options{Journal: j, Now: c.now})
	// tolerable are the errors an operation may meet: refusals by the
	// journal too when it refuses some batches.
	tolerable := func(err error, also ...error) bool {
		if err == nil || (refuseEvery > 0 && errors.Is(err, ErrJournal)) {
			return true
		}
		for _, a := range also {
			if errors.Is(err, a) {
				return true
			}
		}
		return false
	}
	const keys = 5
	key := func(r *rand.Rand) string { return fmt.Sprint("key", r.IntN(keys)) }
	iters := 300
	if raceEnabled {
		iters = 120
	}
	var sessionsMu sync.Mutex // guards ended
	ended := make(map[SessionID]bool)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 11))
			source := fmt.Sprint("w", g)
			var l *Link
			if g%2 == 0 {
				var err error
				if l, err = tb.OpenSession(source, "r", time.Minute, nil); err != nil {
					t.Error(err)
					return
				}
			}
			for range iters {
				switch op := r.IntN(20); {
				case op == 0:
					if _, err := tb.ResetByKey(key(r)); !tolerable(err) {
						t.Error(err)
						return
					}
				case op == 1:
					if _, err := tb.ResetBySource(fmt.Sprint("w", r.IntN(8))); !tolerable(err) {
						t.Error(err)
						return
					}
				case op == 2:
					if _, err := tb.Unlock(key(r)); !tolerable(err, ErrNotHeld) {
						t.Error(err) // v1's Unlock: whoever holds the key
						return
					}
				case l != nil && op == 3:
					if _, err := l.TryLock(key(r), nextID()); !tolerable(err, ErrLocked) {
						t.Error(err)
						return
					}
				case l != nil:
					k := key(r)
					got := make(chan struct{})
					var token uint64
					var lockErr error
					p, err := l.Lock(k, nextID(), func(tok uint64, err error) { token, lockErr = tok, err; close(got) })
					if err != nil {
						if !tolerable(err) {
							t.Error(err)
							return
						}
						continue // a grant of a free key, refused
					}
					give := time.AfterFunc(time.Duration(r.IntN(300))*time.Microsecond, func() { p.Cancel() })
					<-got
					give.Stop()
					if lockErr != nil {
						continue
					}
					switch r.IntN(3) {
					case 0:
						_, err = l.Unlock(k, token)
					case 1:
						_, err = l.Unlock(k, 0)
					} // else the session keeps the hold, for its end or a reset
					if !tolerable(err, ErrNotHeld) {
						t.Error(err)
						return
					}
				case op == 3:
					if _, err := tb.TryLock(key(r), holder(source)); !tolerable(err, ErrLocked) {
						t.Error(err)
						return
					}
				default:
					k := key(r)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(300))*time.Microsecond)
					token, err := tb.Lock(ctx, k, holder(source))
					cancel()
					if err != nil {
						continue
					}
					if r.IntN(4) > 0 { // else held until a reset or a v1 Unlock
						if err := tb.Release(k, token); !tolerable(err, ErrNotHeld) {
							t.Error(err)
							return
						}
					}
				}
			}
			if l == nil {
				return
			}
			var err error
			switch g % 3 {
			case 0:
				_, err = l.Close()
			case 1:
				_, err = tb.EndSession(l.ID())
			default:
				return // stays open, holding what it holds
			}
			if err != nil {
				// An end whose releases were refused leaves the keys held by
				// the ended session, for a reset to free.
				if !tolerable(err) {
					t.Error(err)
				}
				return
			}
			sessionsMu.Lock()
			ended[l.ID()] = true
			sessionsMu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	j.off.Store(true)
	// Holds of each kind at the end, whatever the churn left: a v1 hold, a
	// session's, and one a session got by a handover.
	mustLock(t, tb, "end-v1", "v")
	l, _ := open(t, tb, "end", time.Minute)
	sessionLock(t, l, "end-session")
	first := mustLock(t, tb, "end-handover", "v")
	o := newOutcome()
	if _, err := l.Lock("end-handover", nextID(), o.done); err != nil {
		t.Fatal(err)
	}
	if err := tb.Release("end-handover", first); err != nil {
		t.Fatal(err)
	}
	if _, err := o.wait(t); err != nil {
		t.Fatal(err)
	}
	// And a session that falls silent past its TTL: its expiry's releases
	// are journaled like any other end's.
	silent, _ := open(t, tb, "silent", 5*time.Second)
	sessionLock(t, silent, "end-expired")
	sessionLock(t, silent, "end-expired-too")
	c.advance(6 * time.Second)
	if n := tb.ExpireSessions(); n != 1 {
		t.Fatalf("ExpireSessions ended %d sessions, want the silent one", n)
	}
	ended[silent.ID()] = true

	// Fold the journal with the State, the one function that says what a
	// change means: it refuses a grant of a held key and a release of a
	// grant that is not the key's current one. Tokens must also grow per
	// key and never be given twice.
	state := NewState(0)
	lastToken := make(map[string]uint64)
	given := make(map[uint64]string)
	grants, releases := 0, 0
	batches := j.take()
	for i, batch := range batches {
		for _, c := range batch {
			if err := state.Apply(c); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
			if !c.Grant {
				releases++
				continue
			}
			grants++
			if c.Token <= lastToken[c.Key] {
				t.Fatalf("batch %d grants %q token %d after %d", i, c.Key, c.Token, lastToken[c.Key])
			}
			if k, dup := given[c.Token]; dup {
				t.Fatalf("token %d given to %q and to %q", c.Token, k, c.Key)
			}
			lastToken[c.Key], given[c.Token] = c.Token, c.Key
		}
	}
	held := make(map[string]Grant)
	state.Each(func(k string, g Grant) bool { held[k] = g; return true })
	for _, k := range []string{"end-expired", "end-expired-too"} {
		if g, ok := held[k]; ok {
			t.Fatalf("the journal ends with %q held by %v, whose session expired", k, g.Holder.Session)
		}
	}
	if refuseEvery > 0 && j.refused.Load() < 10 {
		t.Fatalf("the journal refused only %d batches", j.refused.Load())
	}
	if grants < 100 || releases < 50 || len(held) < 3 {
		t.Fatalf("the journal has only %d grants and %d releases, %d keys held at its end", grants, releases, len(held))
	}

	// The table holds exactly what the journal says.
	live := 0
	tb.Each(func(ki KeyInfo) bool {
		live++
		c, ok := held[ki.Key]
		switch {
		case !ok:
			t.Errorf("%q is held (token %d) but the journal ends with it free", ki.Key, ki.Token)
		case c.Token != ki.Token || c.Holder != ki.Holder || !c.Since.Equal(ki.Since):
			t.Errorf("%q: table %d %+v since %v; journal %d %+v since %v", ki.Key, ki.Token, ki.Holder, ki.Since, c.Token, c.Holder, c.Since)
		case ended[ki.Holder.Session]:
			t.Errorf("%q is held by session %v, which ended", ki.Key, ki.Holder.Session)
		}
		if ki.Waiters != 0 {
			t.Errorf("%q has %d waiters after every locker left", ki.Key, ki.Waiters)
		}
		return true
	})
	if live != len(held) {
		t.Errorf("the table holds %d keys, the journal %d", live, len(held))
	}
	t.Logf("%d batches folded (%d refused): %d grants, %d releases; %d keys held at the end", len(batches), j.refused.Load(), grants, releases, len(held))
}
