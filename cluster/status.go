package cluster

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Leader returns the id and cluster-port address of the leader this node
// knows of; both are empty when it knows none.
func (n *Node) Leader() (id, address string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// IsLeader reports whether raft says this node leads now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// HeartbeatTimeout returns RAFT_HEARTBEAT_TIMEOUT.
func (n *Node) HeartbeatTimeout() time.Duration { return n.cfg.HeartbeatTimeout }

// HeardFromLeader reports whether this node leads, or a leader is known
// and was heard from within a heartbeat timeout.
func (n *Node) HeardFromLeader() bool {
	if n.IsLeader() {
		return true
	}
	id, _ := n.Leader()
	return id != "" && time.Since(n.raft.LastContact()) <= n.cfg.HeartbeatTimeout
}

// DialForward connects to the node at address (a cluster port) to carry a
// client connection from remote, the client's own address.
func (n *Node) DialForward(address, remote string) (net.Conn, error) {
	return n.stream.dialForward(address, remote, 2*n.cfg.HeartbeatTimeout+time.Second)
}

// OnLeaderChange calls fn, in a goroutine the Node owns, each time the
// leader this node knows of changes (to none included), until Close.
func (n *Node) OnLeaderChange(fn func()) {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.raft.DeregisterObserver(obs)
		for {
			select {
			case <-n.done:
				return
			case <-ch:
				fn()
			}
		}
	}()
}

// VerifyLeader confirms that this node still leads, by a round of raft's
// VerifyLeader begun after the call: callers that arrive while a round is
// in flight share the next one, so many answers cost one round.
func (n *Node) VerifyLeader() error { return n.verify.verify() }

// verifier runs shared VerifyLeader rounds.
type verifier struct {
	node *Node
	// mu guards next and running: next is the round that callers join,
	// begun only when the round in flight (running) has ended.
	mu      sync.Mutex
	next    *round
	running bool
}

type round struct {
	done chan struct{}
	err  error
}

func (v *verifier) verify() error {
	v.mu.Lock()
	r := v.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		v.next = r
		if !v.running {
			v.launch()
		}
	}
	v.mu.Unlock()
	<-r.done
	return r.err
}

// launch begins the next round in a goroutine that ends with the round
// (raft answers a VerifyLeader within its lease, or fails it at shutdown).
// v.mu must be held.
func (v *verifier) launch() {
	r := v.next
	v.next, v.running = nil, true
	go func() {
		r.err = v.node.raft.VerifyLeader().Error()
		if r.err != nil {
			r.err = fmt.Errorf("%w: %w", ErrNotLeader, r.err)
		}
		close(r.done)
		v.mu.Lock()
		v.running = false
		if v.next != nil {
			v.launch()
		}
		v.mu.Unlock()
	}()
}

// Status is this node's view of the cluster (GET /api/v1/cluster).
type Status struct {
	Node         string       `json:"node"`
	State        string       `json:"state"`
	Leader       string       `json:"leader"`
	LeaderID     string       `json:"leader_id"`
	Term         uint64       `json:"term"`
	CommitIndex  uint64       `json:"commit_index"`
	AppliedIndex uint64       `json:"applied_index"`
	LastIndex    uint64       `json:"last_index"`
	Nodes        []NodeStatus `json:"nodes"`
}

// NodeStatus is one member as this node sees it. LastContactMS and
// AppliedIndex are known for this node (0 and its applied index); on a
// follower, the leader's last contact; on the leader, what each other node
// said of itself in the leader's last round of calls (its applied index,
// and how long ago it heard from the leader); nil when not known.
type NodeStatus struct {
	ID            string  `json:"id"`
	Address       string  `json:"address"`
	Suffrage      string  `json:"suffrage"`
	Leader        bool    `json:"leader"`
	LastContactMS *int64  `json:"last_contact_ms"`
	AppliedIndex  *uint64 `json:"applied_index"`
}

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	st := n.raft.Stats()
	num := func(k string) uint64 {
		v, _ := strconv.ParseUint(st[k], 10, 64)
		return v
	}
	leaderID, leaderAddr := n.Leader()
	s := Status{Node: n.cfg.NodeID, Leader: leaderAddr, LeaderID: leaderID, Term: num("term"),
		CommitIndex: num("commit_index"), AppliedIndex: num("applied_index"), LastIndex: num("last_log_index"),
		Nodes: []NodeStatus{}}
	switch n.raft.State() {
	case raft.Leader:
		s.State = "leader"
	case raft.Candidate:
		s.State = "candidate"
	default:
		s.State = "follower"
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			ns := NodeStatus{ID: string(srv.ID), Address: string(srv.Address), Leader: string(srv.ID) == leaderID,
				Suffrage: "voter"}
			if srv.Suffrage != raft.Voter {
				ns.Suffrage = "nonvoter"
			}
			switch {
			case string(srv.ID) == n.cfg.NodeID:
				zero, applied := int64(0), s.AppliedIndex
				ns.LastContactMS, ns.AppliedIndex = &zero, &applied
			case ns.Leader:
				if lc := n.raft.LastContact(); !lc.IsZero() {
					ms := time.Since(lc).Milliseconds()
					ns.LastContactMS = &ms
				}
			case s.State == "leader":
				// What the node told the leader's last round (members.go).
				if in, ok := n.peerInfo(ns.ID); ok {
					applied := in.AppliedIndex
					ns.AppliedIndex = &applied
					if in.LastContactMS >= 0 {
						ms := in.LastContactMS
						ns.LastContactMS = &ms
					}
				}
			}
			s.Nodes = append(s.Nodes, ns)
		}
	}
	return s
}
