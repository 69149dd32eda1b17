package cluster

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/locking-center/locking-center/locker"
)

// Journal is the lock table's journal on the leader (a locker.Journal):
// Commit proposes the batch as one raft entry planned in the term of the
// leadership the engine was built for, and returns once raft has committed
// it on a majority and applied it here. Raft gathers concurrent entries
// into one disk write and one AppendEntries: the cluster's group commit.
// It has no lock of its own; Commit is called concurrently, for different
// keys.
type Journal struct {
	raft *raft.Raft
	term uint64
	// enqueue bounds the wait for raft to take the entry; an entry it
	// did not take was never appended.
	enqueue time.Duration
	// applied, if set, is told how long each applied entry took
	// (Config.OnApply).
	applied func(time.Duration)
}

// NewJournal returns a Journal for an engine planning in term on r.
func NewJournal(r *raft.Raft, term uint64, enqueue time.Duration) *Journal {
	return &Journal{raft: r, term: term, enqueue: enqueue}
}

// Term returns the term the Journal's entries are planned in.
func (j *Journal) Term() uint64 { return j.term }

// Commit proposes batch and waits for its outcome. nil: committed and
// applied. An error wrapping ErrNotApplied (ErrNotLeader, ErrStaleTerm, or
// a contradiction): nothing changed. An error wrapping ErrOutcomeUnknown:
// the entry may still commit; the caller must not say that nothing changed.
func (j *Journal) Commit(batch []locker.Change) error {
	return j.Propose(&Entry{Kind: KindBatch, Changes: batch})
}

// OpenSession proposes the open of session id.
func (j *Journal) OpenSession(id locker.SessionID, source, remote string, ttl time.Duration) error {
	return j.Propose(&Entry{Kind: KindOpen, Session: id, Source: source, Remote: remote, TTL: ttl})
}

// ResumeSession proposes that session id now speaks from remote.
func (j *Journal) ResumeSession(id locker.SessionID, remote string) error {
	return j.Propose(&Entry{Kind: KindResume, Session: id, Remote: remote})
}

// EndSession proposes the end of session id with batch, its releases and
// the grants they hand over, as one entry.
func (j *Journal) EndSession(id locker.SessionID, batch []locker.Change) error {
	return j.Propose(&Entry{Kind: KindEnd, Session: id, Changes: batch})
}

// Propose stamps e with the Journal's term, proposes it and maps its
// outcome as Commit says.
func (j *Journal) Propose(e *Entry) error {
	e.Term = j.term
	// A quick refusal: raft has moved past the engine's term, so the
	// entry would only be skipped. (The FSM's check is the one that
	// counts: the term can change after this line.)
	if t := j.raft.CurrentTerm(); t != j.term {
		return fmt.Errorf("%w: engine of term %d, raft at term %d", ErrStaleTerm, j.term, t)
	}
	start := time.Now()
	f := j.raft.Apply(Encode(e), j.enqueue)
	if err := f.Error(); err != nil {
		return outcome(err)
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err // the FSM's refusals all wrap ErrNotApplied
	}
	if j.applied != nil {
		j.applied(time.Since(start))
	}
	return nil
}

// outcome maps raft's error for an entry to the Journal's (SPEC §8.5).
func outcome(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		// Raft did not take it: never appended, but this node may still
		// lead, over a backlog (SPEC §8.1: rebuild or hand over).
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	default:
		// ErrLeadershipLost, ErrRaftShutdown, ErrAbortedByRestore: the
		// entry may be in a log that a later leader commits.
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
}
