package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Membership changes (SPEC §8.7). They run on the leader, one at a time;
// a follower forwards them to the leader over the cluster port (a call),
// which it can always reach by the address raft names it by, already
// authenticated both ways. A node is added as a non-voter and the leader
// promotes it once it has caught up (promote), as Consul's autopilot does:
// a voter that cannot yet vote usefully would only weaken the quorum.

// The refusals of a membership change. Each is also carried across a
// forwarded call by its code.
var (
	// ErrNoLeader: no leader is known to carry the change out.
	ErrNoLeader = errors.New("cluster: no leader is known")
	// ErrBusy: another membership change (or a leadership transfer) is
	// in progress; one at a time.
	ErrBusy = errors.New("cluster: another membership change is in progress")
	// ErrTooFewVoters: the removal would leave fewer than 2 voters.
	ErrTooFewVoters = errors.New("cluster: the change would leave fewer than 2 voters")
	// ErrUnknownNode: no member has that id.
	ErrUnknownNode = errors.New("cluster: no member has that id")
	// ErrConflict: the id or the address is a member's already, with
	// another address or id.
	ErrConflict = errors.New("cluster: the id or the address belongs to another member")
	// ErrBadRequest: an id or an address that is not valid.
	ErrBadRequest = errors.New("cluster: bad membership request")
	// ErrUnreachable: the leader could not reach the node to be added on
	// its cluster port, or another node answered there: it is not added.
	ErrUnreachable = errors.New("cluster: the leader cannot reach the node on its cluster port")
)

// errorCodes names the errors a forwarded call carries back.
var errorCodes = map[string]error{
	"no_leader": ErrNoLeader, "busy": ErrBusy, "too_few_voters": ErrTooFewVoters,
	"unknown_node": ErrUnknownNode, "conflict": ErrConflict, "bad_request": ErrBadRequest,
	"not_leader": ErrNotLeader, "unreachable": ErrUnreachable,
}

// changeTimeout bounds a membership change or a transfer: raft's enqueue
// and commit of the configuration entry.
const changeTimeout = 10 * time.Second

// members is a node's membership state.
type members struct {
	// change is held by the one change in progress (TryLock: a second
	// is refused with ErrBusy, not queued).
	change sync.Mutex
	// mu guards info: what each other node last told the leader of
	// itself, and when.
	mu   sync.Mutex
	info map[string]probed
}

type probed struct {
	info nodeInfo
	at   time.Time
	// caught counts the leader's consecutive rounds in which a non-voter
	// was caught up; two promote it.
	caught int
}

// checkID refuses an id NODE_ID would refuse.
func checkID(id string) error {
	if id == "" || len(id) > 128 || strings.ContainsAny(id, ",= \t\r\n/") {
		return fmt.Errorf("%w: id %q: want 1-128 characters without commas, '=', '/' or spaces", ErrBadRequest, id)
	}
	return nil
}

// AddNode adds a node as a non-voter; the leader promotes it to voter once
// it has caught up. Adding a member again under the same address changes
// nothing (a retried join).
func (n *Node) AddNode(id, address string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkHostPort(address); err != nil {
		return fmt.Errorf("%w: address: %w", ErrBadRequest, err)
	}
	return n.change(callRequest{Op: "add", ID: id, Address: address})
}

// RemoveNode removes a member; refused if fewer than 2 voters would remain.
func (n *Node) RemoveNode(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return n.change(callRequest{Op: "remove", ID: id})
}

// Transfer hands leadership over to the voter id, or to the most
// up-to-date voter when id is empty, and returns the leader after it.
func (n *Node) Transfer(id string) (string, error) {
	if id != "" {
		if err := checkID(id); err != nil {
			return "", err
		}
	}
	var leader string
	err := n.changeWith(callRequest{Op: "transfer", ID: id}, func(r callReply) { leader = r.Leader })
	return leader, err
}

func (n *Node) change(req callRequest) error { return n.changeWith(req, nil) }

// changeWith carries out req here when this node leads, else forwards it
// to the leader.
func (n *Node) changeWith(req callRequest, got func(callReply)) error {
	if n.IsLeader() {
		r := n.lead(req)
		if got != nil {
			got(r)
		}
		return replyErr(r)
	}
	id, addr := n.Leader()
	if id == "" {
		return ErrNoLeader
	}
	// The leader's own call to a node it adds comes first (up to two
	// heartbeat timeouts and a second), then the change.
	r, err := n.stream.callNode(addr, req, changeTimeout+2*n.cfg.HeartbeatTimeout+2*time.Second)
	if err != nil {
		return fmt.Errorf("%w: the leader %q could not be reached: %w", ErrNoLeader, id, err)
	}
	if got != nil {
		got(r)
	}
	return replyErr(r)
}

// replyErr turns a reply back into its error.
func replyErr(r callReply) error {
	if r.Code == "" && r.Error == "" {
		return nil
	}
	if e, ok := errorCodes[r.Code]; ok {
		return fmt.Errorf("%w: %s", e, r.Error)
	}
	return errors.New(r.Error)
}

// replyOf turns an error into a reply.
func replyOf(err error) callReply {
	if err == nil {
		return callReply{}
	}
	for code, e := range errorCodes {
		if errors.Is(err, e) {
			return callReply{Code: code, Error: err.Error()}
		}
	}
	return callReply{Code: "failed", Error: err.Error()}
}

// serveCall answers a call from another node.
func (n *Node) serveCall(req callRequest) callReply {
	if !n.started.Load() {
		return callReply{Code: "failed", Error: fmt.Sprintf("node %q is starting", n.cfg.NodeID)}
	}
	switch req.Op {
	case "info":
		return callReply{Info: n.selfInfo()}
	case "add", "remove", "transfer":
		if !n.IsLeader() {
			// No second hop: the caller's hint was stale.
			return replyOf(fmt.Errorf("%w: node %q does not lead", ErrNotLeader, n.cfg.NodeID))
		}
		return n.lead(req)
	}
	return callReply{Code: "bad_request", Error: fmt.Sprintf("unknown call %q", req.Op)}
}

func (n *Node) selfInfo() *nodeInfo {
	in := &nodeInfo{ID: n.cfg.NodeID, Term: n.raft.CurrentTerm(), LastIndex: n.raft.LastIndex(),
		AppliedIndex: n.raft.AppliedIndex(), LastContactMS: -1}
	if n.IsLeader() {
		in.LastContactMS = 0
	} else if lc := n.raft.LastContact(); !lc.IsZero() {
		in.LastContactMS = time.Since(lc).Milliseconds()
	}
	return in
}

// lead carries out a change on the leader.
func (n *Node) lead(req callRequest) callReply {
	if !n.members.change.TryLock() {
		return replyOf(ErrBusy)
	}
	defer n.members.change.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return replyOf(fmt.Errorf("%w: %w", ErrNotLeader, err))
	}
	conf, index := f.Configuration(), f.Index()
	var target *raft.Server
	voters := 0
	for i, s := range conf.Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
		if string(s.ID) == req.ID {
			target = &conf.Servers[i]
		}
	}
	log := n.cfg.Logger
	switch req.Op {
	case "add":
		for _, s := range conf.Servers {
			if string(s.Address) == req.Address && string(s.ID) != req.ID {
				return replyOf(fmt.Errorf("%w: address %s is node %q's", ErrConflict, req.Address, s.ID))
			}
		}
		if target != nil {
			if string(target.Address) != req.Address {
				return replyOf(fmt.Errorf("%w: node %q is a member at %s; remove it first", ErrConflict, req.ID, target.Address))
			}
			return callReply{} // already a member: a retried join
		}
		// A node the leader cannot reach (a wrong token, a certificate of
		// another CA, a wrong address) is not added: it would sit in the
		// configuration and never catch up.
		r, err := n.stream.callNode(req.Address, callRequest{Op: "info"}, 2*n.cfg.HeartbeatTimeout+time.Second)
		if err != nil {
			return replyOf(fmt.Errorf("%w: %s: %w", ErrUnreachable, req.Address, err))
		}
		if r.Info == nil || r.Info.ID != req.ID {
			got := ""
			if r.Info != nil {
				got = r.Info.ID
			}
			return replyOf(fmt.Errorf("%w: node %q answers at %s, not %q", ErrUnreachable, got, req.Address, req.ID))
		}
		if err := n.raft.AddNonvoter(raft.ServerID(req.ID), raft.ServerAddress(req.Address), index, changeTimeout).Error(); err != nil {
			return replyOf(fmt.Errorf("add node %q: %w", req.ID, err))
		}
		log.Info("cluster: node added as a non-voter; it is promoted once caught up", "node", req.ID, "address", req.Address)
		return callReply{}
	case "remove":
		if target == nil {
			return replyOf(fmt.Errorf("%w: %q", ErrUnknownNode, req.ID))
		}
		if target.Suffrage == raft.Voter && voters-1 < 2 {
			return replyOf(fmt.Errorf("%w: the cluster has %d voters", ErrTooFewVoters, voters))
		}
		if err := n.raft.RemoveServer(target.ID, index, changeTimeout).Error(); err != nil {
			return replyOf(fmt.Errorf("remove node %q: %w", req.ID, err))
		}
		log.Info("cluster: node removed", "node", req.ID)
		return callReply{}
	case "transfer":
		var fut raft.Future
		switch {
		case req.ID == "":
			fut = n.raft.LeadershipTransfer()
		case target == nil:
			return replyOf(fmt.Errorf("%w: %q", ErrUnknownNode, req.ID))
		case target.Suffrage != raft.Voter:
			return replyOf(fmt.Errorf("%w: node %q is not a voter", ErrBadRequest, req.ID))
		case string(target.ID) == n.cfg.NodeID:
			return callReply{Leader: n.cfg.NodeID} // it leads already
		default:
			fut = n.raft.LeadershipTransferToServer(target.ID, target.Address)
		}
		if err := fut.Error(); err != nil {
			return replyOf(fmt.Errorf("leadership transfer: %w", err))
		}
		// The transfer ends when this node steps down; the new leader is
		// known once it has been heard from.
		deadline := time.Now().Add(2 * n.cfg.HeartbeatTimeout)
		for {
			id, _ := n.Leader()
			if (id != "" && id != n.cfg.NodeID) || time.Now().After(deadline) {
				log.Info("cluster: leadership handed over", "from", n.cfg.NodeID, "to", id)
				return callReply{Leader: id}
			}
			select {
			case <-n.done:
				return callReply{Leader: id}
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return replyOf(fmt.Errorf("%w: unknown change %q", ErrBadRequest, req.Op))
}

// promote runs on every node until Close: while this node leads, each
// round asks every other member how far it is, and promotes a non-voter
// that has been caught up (its log reaches the leader's commit index and
// it heard from the leader within a heartbeat timeout) for two rounds in a
// row.
func (n *Node) promote() {
	defer n.wg.Done()
	every := max(n.cfg.HeartbeatTimeout, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-tick.C:
		}
		if !n.IsLeader() {
			continue
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		commit := n.raft.CommitIndex()
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == n.cfg.NodeID {
				continue
			}
			r, err := n.stream.callNode(string(s.Address), callRequest{Op: "info"}, every)
			n.members.mu.Lock()
			p := n.members.info[string(s.ID)]
			if err != nil || r.Info == nil || r.Info.ID != string(s.ID) {
				p.caught = 0
				n.members.info[string(s.ID)] = p
				n.members.mu.Unlock()
				continue
			}
			p.info, p.at = *r.Info, time.Now()
			caughtUp := p.info.LastIndex >= commit && p.info.LastContactMS >= 0 &&
				p.info.LastContactMS <= n.cfg.HeartbeatTimeout.Milliseconds()
			if caughtUp {
				p.caught++
			} else {
				p.caught = 0
			}
			n.members.info[string(s.ID)] = p
			n.members.mu.Unlock()
			if s.Suffrage == raft.Nonvoter && p.caught >= 2 {
				n.promoteOne(s)
			}
		}
	}
}

func (n *Node) promoteOne(s raft.Server) {
	if !n.members.change.TryLock() {
		return // another change first; the next round tries again
	}
	defer n.members.change.Unlock()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	if err := n.raft.AddVoter(s.ID, s.Address, f.Index(), changeTimeout).Error(); err != nil {
		n.cfg.Logger.Warn("cluster: promotion to voter failed; tried again", "node", s.ID, "err", err)
		return
	}
	n.cfg.Logger.Info("cluster: node caught up and promoted to voter", "node", s.ID)
}

// peerInfo returns what node id last told the leader of itself, when it
// is recent (three rounds).
func (n *Node) peerInfo(id string) (nodeInfo, bool) {
	n.members.mu.Lock()
	defer n.members.mu.Unlock()
	p, ok := n.members.info[id]
	if !ok || p.at.IsZero() || time.Since(p.at) > 3*max(n.cfg.HeartbeatTimeout, time.Second) {
		return nodeInfo{}, false
	}
	return p.info, true
}

// Member reports whether this node is in the cluster's configuration as
// it knows it (a joining node: once the leader has added it and reached
// it).
func (n *Node) Member() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.cfg.NodeID {
			return true
		}
	}
	return false
}

// HadState reports whether the node started from raft state of its own
// (a node with none and no CLUSTER_PEERS waits to be added: CLUSTER_JOIN).
func (n *Node) HadState() bool { return n.hadState }
