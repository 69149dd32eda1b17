package cluster

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// Figures are a node's raft figures for its metrics (SPEC §8.8).
type Figures struct {
	// Leader says whether this node leads now.
	Leader bool
	// Term, CommitIndex and AppliedIndex are raft's.
	Term, CommitIndex, AppliedIndex uint64
	// LastContact is how long ago this node last heard from a leader: 0
	// on the leader, the time since the node started when it never has.
	LastContact time.Duration
	// Voters and Nonvoters count the members of the configuration.
	Voters, Nonvoters int
}

// Figures returns the node's raft figures now.
func (n *Node) Figures() Figures {
	f := Figures{Leader: n.IsLeader(), Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex()}
	if !f.Leader {
		lc := n.raft.LastContact()
		if lc.IsZero() {
			lc = n.startedAt
		}
		f.LastContact = time.Since(lc)
	}
	if c := n.raft.GetConfiguration(); c.Error() == nil {
		for _, s := range c.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				f.Voters++
			} else {
				f.Nonvoters++
			}
		}
	}
	return f
}

// DialWeb connects to the web port of the node whose cluster port is at
// address, over the cluster port (authenticated both ways by
// CLUSTER_TOKEN): the connection then carries HTTP/1.1 to that node's web
// handler. A node needs no other node's web address.
func (n *Node) DialWeb(ctx context.Context, address string) (net.Conn, error) {
	return n.stream.dialWeb(ctx, address)
}

// LeaderChanges returns how many times the leader this node knows of
// changed to another node (or to this one) since the node started.
func (f *Frontend) LeaderChanges() uint64 { return f.leaderChanges.Load() }

// SessionTTLRestarts returns how many session TTLs this node restarted at
// its takeovers (SPEC §8.3) since it started.
func (f *Frontend) SessionTTLRestarts() uint64 { return f.ttlRestarts.Load() }

// Connections returns the client connections this node serves now: on the
// leader, those its engine serves (direct and forwarded in); on a
// follower, those it forwards. Connections held while no leader is known
// are not counted.
func (f *Frontend) Connections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.proxies)
	if f.eng != nil {
		n += f.eng.srv.Connections()
	}
	return n
}
