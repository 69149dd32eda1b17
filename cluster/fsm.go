package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/locking-center/locking-center/locker"
)

// Errors of the FSM's Apply, returned as the ApplyFuture's Response, and of
// the Journal. Compare with errors.Is.
var (
	// ErrNotApplied is wrapped by every outcome in which the entry changed
	// nothing on any node: the caller may answer that nothing changed.
	ErrNotApplied = errors.New("cluster: entry not applied, nothing changed")
	// ErrStaleTerm: the entry was planned in a term other than the one raft
	// stored it under (an engine of an earlier term), and was skipped.
	ErrStaleTerm = fmt.Errorf("%w: planned in another term", ErrNotApplied)
	// ErrNotLeader: the entry was never appended, because this node does
	// not lead (or could not take it in time).
	ErrNotLeader = fmt.Errorf("%w: not the leader", ErrNotApplied)
	// ErrOutcomeUnknown: the entry may commit later, or may not (leadership
	// lost while committing, shutdown). The caller must not answer that
	// nothing changed: it closes the connection instead.
	// It wraps locker.ErrOutcomeUnknown, which the wire layer checks.
	ErrOutcomeUnknown = fmt.Errorf("cluster: %w", locker.ErrOutcomeUnknown)
)

// FSM is the cluster's state machine (a raft.FSM): a locker.State to which
// every committed entry is applied, the same function a single node's log
// is folded with. Readers on any node read it through View.
type FSM struct {
	log *slog.Logger
	// mu guards state and applied: raft calls Apply, Snapshot and Restore
	// from its own goroutines while the server's readers read.
	mu      sync.RWMutex
	state   *locker.State
	applied uint64
}

// NewFSM returns an FSM with an empty state; log reports the entries it
// refuses.
func NewFSM(log *slog.Logger) *FSM {
	if log == nil {
		log = slog.Default()
	}
	return &FSM{log: log, state: locker.NewState(0)}
}

// View calls fn with the state and the index of the last entry applied to
// it, under the FSM's read lock: fn must be quick and must not change or
// keep the state.
func (f *FSM) View(fn func(s *locker.State, applied uint64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state, f.applied)
}

// HighToken returns the highest token applied.
func (f *FSM) HighToken() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.HighToken()
}

// Apply applies one committed log entry. Its response is nil when the
// entry was applied, or an error: wrapping ErrStaleTerm when it was
// planned in another term than raft's, or wrapping both ErrNotApplied and
// locker.ErrContradiction when it contradicts the state (a bug: logged
// loudly) or cannot be decoded. A refused entry changes nothing, on every
// node alike.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	e, err := Decode(l.Data)
	if err != nil {
		err = fmt.Errorf("%w: %w: entry %d: %w", ErrNotApplied, locker.ErrContradiction, l.Index, err)
		f.log.Error("cluster: refused a raft entry", "index", l.Index, "term", l.Term, "err", err)
		return err
	}
	if e.Term != l.Term {
		// Not a bug: a leader deposed and elected again may still hold
		// an engine of its earlier term. Nothing of it gets in.
		f.log.Warn("cluster: skipped an entry planned in another term", "index", l.Index, "term", l.Term, "planned", e.Term, "kind", e.Kind)
		return fmt.Errorf("%w: entry %d planned in term %d, stored in term %d", ErrStaleTerm, l.Index, e.Term, l.Term)
	}
	if err := apply(f.state, e); err != nil {
		err = fmt.Errorf("%w: %w", ErrNotApplied, err)
		f.log.Error("cluster: refused a raft entry that contradicts the table", "index", l.Index, "term", l.Term, "kind", e.Kind, "err", err)
		return err
	}
	return nil
}

// apply applies e to s, all or nothing; a refusal wraps
// locker.ErrContradiction.
func apply(s *locker.State, e *Entry) error {
	switch e.Kind {
	case KindBatch:
		if err := checkBatch(s, e.Changes); err != nil {
			return err
		}
		return s.ApplyBatch(e.Changes, 0)
	case KindEnd:
		if e.Session == 0 {
			return fmt.Errorf("%w: end of session 0", locker.ErrContradiction)
		}
		if err := checkBatch(s, e.Changes); err != nil {
			return err
		}
		return s.ApplyBatch(e.Changes, e.Session)
	case KindOpen:
		return s.OpenSession(e.Session, e.Source, e.Remote, e.TTL)
	case KindResume:
		return s.ResumeSession(e.Session, e.Remote)
	case KindImport:
		if s.Len() != 0 || s.Sessions() != 0 {
			return fmt.Errorf("%w: import into a table that holds %d keys and %d sessions", locker.ErrContradiction, s.Len(), s.Sessions())
		}
		n, err := imported(e, true)
		if err != nil {
			return err
		}
		*s = *n
		return nil
	}
	return fmt.Errorf("%w: unknown kind %d", locker.ErrContradiction, e.Kind)
}

// checkBatch refuses what a cluster's batch must never hold, though a
// single node's log may: a release that names no token (a release applies
// only while the grant it names is current), and a grant to a session that
// is not open (a cluster's log records every open).
func checkBatch(s *locker.State, batch []locker.Change) error {
	for i, c := range batch {
		if !c.Grant && c.Token == 0 {
			return fmt.Errorf("%w: change %d releases key %q naming no token", locker.ErrContradiction, i+1, c.Key)
		}
		if c.Grant && c.Holder.Session != 0 {
			if r, ok := s.Session(c.Holder.Session); !ok || !r.Open {
				return fmt.Errorf("%w: change %d grants key %q to session %s, which is not open", locker.ErrContradiction, i+1, c.Key, c.Holder.Session)
			}
		}
	}
	return nil
}

// imported builds a State from an import entry or a snapshot: its
// sessions, then its holds, then its floor. strict refuses a hold of a
// session the entry does not list, as checkBatch does.
func imported(e *Entry, strict bool) (*locker.State, error) {
	s := locker.NewState(len(e.Holds))
	if err := s.Raise(e.Floor); err != nil {
		return nil, err
	}
	for _, ss := range e.Sessions {
		if err := s.OpenSession(ss.ID, ss.Source, ss.Remote, ss.TTL); err != nil {
			return nil, err
		}
	}
	batch := make([]locker.Change, len(e.Holds))
	for i, h := range e.Holds {
		batch[i] = locker.Change{Key: h.Key, Token: h.Grant.Token, Grant: true, Holder: h.Grant.Holder, Since: h.Grant.Since, TTL: h.Grant.TTL}
	}
	if strict {
		if err := checkBatch(s, batch); err != nil {
			return nil, err
		}
	}
	if err := s.ApplyBatch(batch, 0); err != nil {
		return nil, err
	}
	return s, nil
}

// exported is the state as an import entry: what a snapshot holds.
// Sessions known only by their holds are not listed: the holds bring them
// back.
func exported(s *locker.State) *Entry {
	e := &Entry{Kind: KindImport, Floor: s.HighToken()}
	s.EachSession(func(id locker.SessionID, r locker.SessionRecord) bool {
		if r.Open {
			e.Sessions = append(e.Sessions, ImportSession{ID: id, Source: r.Source, Remote: r.Remote, TTL: r.TTL})
		}
		return true
	})
	e.Holds = make([]ImportHold, 0, s.Len())
	s.Each(func(k string, g locker.Grant) bool {
		e.Holds = append(e.Holds, ImportHold{Key: k, Grant: g})
		return true
	})
	return e
}

// Snapshot encodes the state at once, under the lock: raft applies nothing
// meanwhile, and Persist then only writes bytes while Apply goes on. A
// snapshot is the index of the last entry applied, then the state as an
// import entry.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b := binary.AppendUvarint(nil, f.applied)
	return snapshot(append(b, Encode(exported(f.state))...)), nil
}

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("cluster: read snapshot: %w", err)
	}
	applied, n := binary.Uvarint(b)
	if n <= 0 {
		return fmt.Errorf("cluster: snapshot: %w: bad index", ErrBadEntry)
	}
	e, err := Decode(b[n:])
	if err != nil {
		return fmt.Errorf("cluster: snapshot: %w", err)
	}
	if e.Kind != KindImport {
		return fmt.Errorf("cluster: snapshot: %w: kind %d", ErrBadEntry, e.Kind)
	}
	s, err := imported(e, false)
	if err != nil {
		return fmt.Errorf("cluster: snapshot: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s
	f.applied = applied
	return nil
}

// snapshot is an encoded state waiting to be written.
type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}
