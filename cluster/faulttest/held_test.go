package faulttest

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// v1Once sends one v1 frame to addr and reads the answer within wait; 0
// for no answer.
func v1Once(t *testing.T, addr string, f protocol.Frame, wait time.Duration) byte {
	t.Helper()
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var a [1]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		return 0
	}
	return a[0]
}

// TestHeldConnectionOfAClientThatLeftIsNotForwarded: a follower that
// knows no leader holds a new connection for one (LEADER_WAIT). A v1
// client that gives up meanwhile, hangs up and resets its own source
// must not find its Lock granted later, when the follower finds the
// leader again and forwards what the client sent before it left: the
// reset was meant to settle that Lock (SPEC §8.5), and the client that
// left is withdrawn and gets nothing (SPEC §1). The fault harness found
// it under a one-way cut.
func TestHeldConnectionOfAClientThatLeftIsNotForwarded(t *testing.T) {
	c := startCluster(t, "h3", 33, 3)
	leader := c.awaitLeader(c.nodes, 30*time.Second)
	f := c.others(leader)[0]
	c.net.isolate(f.i)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := f.status()
		if err == nil && st.LeaderID == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the isolated follower still names a leader: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	const key, who = "held/k", "gone"
	if a := v1Once(t, f.client(), protocol.Frame{Action: protocol.Lock, Key: key, Source: who}, 300*time.Millisecond); a != 0 {
		t.Fatalf("the follower without a leader answered %q at once", a)
	}
	// The client hung up; it settles its Lock by a reset of its source.
	if a := v1Once(t, leader.client(), protocol.Frame{Action: protocol.ResetBySource, Source: who}, 5*time.Second); a != '+' {
		t.Fatalf("ResetBySource through the leader: %q", a)
	}
	c.net.heal()
	c.awaitLeader(c.nodes, 30*time.Second)
	time.Sleep(time.Second) // the follower has found the leader: whatever it forwards has arrived
	if a := v1Once(t, leader.client(), protocol.Frame{Action: protocol.TryLock, Key: key, Source: "other"}, 5*time.Second); a != '+' {
		t.Fatalf("TryLock of %s after the client that asked for it left and reset its source: %q, want '+' (the follower forwarded the Lock of a client that had left)\n%s",
			key, a, tail(f.log.String(), 30))
	}
}

// TestForwardedBytesOfAClosedProxyAreNotDeliveredLater: a follower that
// loses contact with the leader closes the connections it forwards to it
// (SPEC §8.4); what their clients sent that the leader has not received
// must then be dropped, not left to TCP's retransmission, which would
// deliver it once the network heals, long after the client was told
// nothing and settled its request. A v1 Unlock delivered so released
// another client's grant in the fault harness (isolate-follower); here a
// session's ResetByKey of another's hold.
func TestForwardedBytesOfAClosedProxyAreNotDeliveredLater(t *testing.T) {
	c := startCluster(t, "p3", 34, 3)
	leader := c.awaitLeader(c.nodes, 30*time.Second)
	f := c.others(leader)[0]
	const key = "proxied/k"
	if a := v1Once(t, leader.client(), protocol.Frame{Action: protocol.TryLock, Key: key, Source: "holder"}, 5*time.Second); a != '+' {
		t.Fatalf("TryLock through the leader: %q", a)
	}
	// A session through the follower (its open answered: the follower
	// forwards it); the follower is cut off; only then does the session
	// send a ResetByKey of the key (a v1 frame, one per connection, gives
	// no sign that the follower has forwarded it).
	s, err := openRaw(f.client(), f.i, "late", 30*time.Second, 0)
	if err != nil {
		t.Fatalf("session through the follower: %v", err)
	}
	defer s.close()
	c.net.isolate(f.i)
	id, err := s.send(protocol.ResetByKey, key, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := s.await(id, 10*time.Second); err == nil {
		t.Fatalf("the cut-off follower answered %+v", a)
	}
	// Told nothing: the session's reset is not known. The network heals;
	// whatever TCP still held would arrive within a few retransmissions.
	c.net.heal()
	c.awaitLeader(c.nodes, 30*time.Second)
	if a := heldThroughout(t, leader, key, 8*time.Second); a != '#' {
		t.Fatalf("after the heal, TryLock of %s held by another answered %q: the reset sent through the cut-off follower, which closed the connection, was delivered late", key, a)
	}
}

// TestAClientThatLeftWhileTheLeaderWasDialledIsNotForwarded: a follower
// forwards a new connection once it has dialled the leader, which takes
// seconds when the link is bad. A v1 client that gives up meanwhile and
// resets its connection has been told nothing, and may settle its request
// with a reset of its source; what it sent must not reach the leader once
// the dial succeeds (a v1 Unlock so delivered released a session's grant
// in the fault harness, under lossy-leader-20%).
func TestAClientThatLeftWhileTheLeaderWasDialledIsNotForwarded(t *testing.T) {
	c := startCluster(t, "d3", 36, 3)
	leader := c.awaitLeader(c.nodes, 30*time.Second)
	f := c.others(leader)[0]
	const key = "dialled/k"
	if a := v1Once(t, leader.client(), protocol.Frame{Action: protocol.TryLock, Key: key, Source: "holder"}, 5*time.Second); a != '+' {
		t.Fatalf("TryLock through the leader: %q", a)
	}
	// The follower's packets to the leader dropped: it still hears the
	// leader's heartbeats and names it, but its dial waits for a SYN to
	// get through.
	c.net.cut(f.i, leader.i)
	b, err := protocol.Frame{Action: protocol.Unlock, Key: key, Source: "gone"}.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", f.client(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var ans [1]byte
	if n, _ := conn.Read(ans[:]); n > 0 {
		t.Fatalf("the follower cut off from the leader answered %q", ans[0])
	}
	conn.Close() // a reset: the client gave up, told nothing
	c.net.heal() // the dial's next SYN, a second after the first, gets through
	if a := heldThroughout(t, leader, key, 5*time.Second); a != '#' {
		t.Fatalf("TryLock of %s, held by another, answered %q: the Unlock of a client that had left was forwarded once the dial succeeded\n%s",
			key, a, tail(f.log.String(), 30))
	}
}

// heldThroughout asks the leader every 250 ms, for d, whether key is still
// held by another (a TryLock answered '#'); it returns the first other
// answer, or '#'.
func heldThroughout(t *testing.T, leader *node, key string, d time.Duration) byte {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if a := v1Once(t, leader.client(), protocol.Frame{Action: protocol.TryLock, Key: key, Source: "prober"}, 5*time.Second); a != '#' {
			return a
		}
	}
	return '#'
}
