package cluster

import (
	"sync"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// Replica is a read-only lock table made from this node's applied state
// (the FSM), for a follower's web port (SPEC §8.4): the holds with their
// tokens and sessions as of an applied index. Nothing ever changes it, it
// has no journal and runs no expiry; it has no wait queues (they are the
// leader's) and knows neither whether a session is connected nor when it
// expires (the leader's clocks).
type Replica struct {
	fsm *FSM
	// raftApplied is raft's applied index, which also counts the
	// entries that do not reach the FSM (configurations, barriers).
	raftApplied func() uint64

	// mu guards the fields below and serializes builds.
	mu    sync.Mutex
	table *locker.Table
	index uint64
	built time.Time
	took  time.Duration
}

// NewReplica returns a Replica of the node's FSM.
func NewReplica(n *Node) *Replica { return &Replica{fsm: n.fsm, raftApplied: n.raft.AppliedIndex} }

// replicaMaxAge bounds how long a replica is kept while entries are being
// applied: a build may cost at most about a tenth of one processor, and
// the table shown is never older than this.
const replicaMaxAge = 5 * time.Second

// Table returns the replica's table and the applied index it shows: the
// last entry raft applied when the table is current (entries that are not
// commands change no state), else the last command it holds. It
// rebuilds it when entries were applied since, unless the last build is
// younger than ten times what it took (so that a large table under a
// stream of writes is rebuilt at most every so often, never more than
// replicaMaxAge apart).
func (r *Replica) Table() (*locker.Table, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Raft's index is read first: a command applied up to it has reached
	// the FSM by then, so when the FSM's last command is still the
	// table's, the table is the state as of raft's index too.
	ra := r.raftApplied()
	var applied uint64
	r.fsm.View(func(_ *locker.State, a uint64) { applied = a })
	if r.table != nil && applied == r.index {
		return r.table, max(ra, r.index)
	}
	if r.table != nil && time.Since(r.built) < min(10*r.took, replicaMaxAge) {
		return r.table, r.index
	}
	start := time.Now()
	type hold struct {
		key string
		g   locker.Grant
	}
	var holds []hold
	var sessions []struct {
		id locker.SessionID
		r  locker.SessionRecord
	}
	// Copied under the FSM's read lock, built after it: raft's applies
	// wait for the copy only.
	r.fsm.View(func(s *locker.State, a uint64) {
		applied = a
		holds = make([]hold, 0, s.Len())
		s.Each(func(key string, g locker.Grant) bool {
			holds = append(holds, hold{key, g})
			return true
		})
		s.EachSession(func(id locker.SessionID, rec locker.SessionRecord) bool {
			sessions = append(sessions, struct {
				id locker.SessionID
				r  locker.SessionRecord
			}{id, rec})
			return true
		})
	})
	t := locker.New(locker.Options{})
	for _, h := range holds {
		// The FSM refused every contradiction: a key is held once.
		_, _ = t.Restore(h.key, h.g.Holder, h.g.Token, h.g.Since, h.g.TTL)
	}
	for _, s := range sessions {
		t.RestoreSession(s.id, s.r.Source, s.r.Remote, s.r.TTL, 0)
	}
	r.table, r.index, r.built, r.took = t, applied, time.Now(), time.Since(start)
	if ra >= applied {
		// No command between the two readings: ra's state is this one.
		return r.table, ra
	}
	return r.table, r.index
}
