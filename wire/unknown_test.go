package wire

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
)

// unknownJournal refuses every batch with an outcome not known while fail
// is set.
type unknownJournal struct{ fail atomic.Bool }

func (j *unknownJournal) Commit([]locker.Change) error {
	if j.fail.Load() {
		return fmt.Errorf("test: leadership lost: %w", locker.ErrOutcomeUnknown)
	}
	return nil
}

func TestOutcomeUnknownIsNeverAnswered(t *testing.T) {
	j := &unknownJournal{}
	ts := startServer(t, func(s *Server) { s.Table = locker.New(locker.Options{Journal: j}) })
	if got := ts.ask(t, protocol.Lock, "held", ""); got != protocol.AnswerOK {
		t.Fatalf("Lock: %q", got)
	}
	j.fail.Store(true)
	for _, a := range []protocol.Action{protocol.Lock, protocol.TryLock} {
		if got := ts.ask(t, a, "free", ""); got != 0 {
			t.Fatalf("%v with an outcome not known answered %q, want the connection closed", a, got)
		}
	}
	for _, a := range []protocol.Action{protocol.Unlock, protocol.ResetByKey} {
		if got := ts.ask(t, a, "held", ""); got != 0 {
			t.Fatalf("%v with an outcome not known answered %q, want the connection closed", a, got)
		}
	}
}

func TestUnconfirmedNegativeAnswerIsNotSent(t *testing.T) {
	var fail atomic.Bool
	ts := startServer(t, func(s *Server) {
		s.Confirm = func() error {
			if fail.Load() {
				return errors.New("test: not the leader")
			}
			return nil
		}
	})
	if got := ts.ask(t, protocol.Lock, "k", ""); got != protocol.AnswerOK {
		t.Fatalf("Lock: %q", got)
	}
	if got := ts.ask(t, protocol.TryLock, "k", ""); got != protocol.AnswerLocked {
		t.Fatalf("confirmed TryLock: %q, want '#'", got)
	}
	fail.Store(true)
	if got := ts.ask(t, protocol.TryLock, "k", ""); got != 0 {
		t.Fatalf("unconfirmed TryLock answered %q", got)
	}
	if got := ts.ask(t, protocol.Unlock, "free", ""); got != 0 {
		t.Fatalf("unconfirmed Unlock of a free key answered %q", got)
	}
	if got := ts.ask(t, protocol.Unlock, "k", ""); got != protocol.AnswerOK {
		t.Fatalf("Unlock of a held key (a change, no confirmation needed): %q", got)
	}
}
