package cluster

import (
	"errors"
	"testing"
	"time"
)

func TestMembershipRefusalsThroughAFollower(t *testing.T) {
	nodes := newCluster(t, 3, nil)
	l := leader(t, nodes)
	var f *testNode
	for _, n := range nodes {
		if n != l {
			f = n
			break
		}
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"bad id", f.node.AddNode("a b", "127.0.0.1:1"), ErrBadRequest},
		{"bad address", f.node.AddNode("n9", "nowhere"), ErrBadRequest},
		{"unreachable", f.node.AddNode("n9", freeAddr(t)), ErrUnreachable},
		{"an address of another member", f.node.AddNode("n9", l.node.Address()), ErrConflict},
		{"a member under another address", f.node.AddNode(l.cfg.NodeID, freeAddr(t)), ErrConflict},
		{"unknown", f.node.RemoveNode("nobody"), ErrUnknownNode},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	// A member added again under its own address: nothing changes.
	if err := f.node.AddNode(f.cfg.NodeID, f.node.Address()); err != nil {
		t.Fatalf("adding a member again: %v", err)
	}
	// 3 → 2 voters is allowed, 2 → 1 is not.
	var victim *testNode
	for _, n := range nodes {
		if n != l && n != f {
			victim = n
		}
	}
	if err := f.node.RemoveNode(victim.cfg.NodeID); err != nil {
		t.Fatalf("remove %s: %v", victim.cfg.NodeID, err)
	}
	victim.stop(t)
	if err := f.node.RemoveNode(l.cfg.NodeID); !errors.Is(err, ErrTooFewVoters) {
		t.Fatalf("a removal leaving one voter: %v", err)
	}
	// The leader hands over to the other voter, asked through it.
	got, err := f.node.Transfer(f.cfg.NodeID)
	if err != nil || got != f.cfg.NodeID {
		t.Fatalf("transfer to %s: %q, %v", f.cfg.NodeID, got, err)
	}
	waitFor(t, 10*time.Second, "the follower leads", f.node.IsLeader)
}

func TestJoinProof(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"n4","address":"10.0.0.4:22121"}`)
	proof := SignJoin(testToken, body, now)
	if !VerifyJoin(testToken, proof, body, now.Add(time.Minute)) {
		t.Fatal("a good proof is refused")
	}
	for name, ok := range map[string]bool{
		"another token":   VerifyJoin("another-token-of-16+", proof, body, now),
		"another body":    VerifyJoin(testToken, proof, []byte(`{"id":"evil","address":"10.0.0.4:22121"}`), now),
		"too old":         VerifyJoin(testToken, proof, body, now.Add(JoinWindow+time.Second)),
		"from the future": VerifyJoin(testToken, proof, body, now.Add(-JoinWindow-time.Second)),
		"garbage":         VerifyJoin(testToken, "t=x,mac=zz", body, now),
		"empty":           VerifyJoin(testToken, "", body, now),
	} {
		if ok {
			t.Errorf("%s: accepted", name)
		}
	}
}
