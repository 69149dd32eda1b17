package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/internal/lctest"
	"github.com/locking-center/locking-center/locker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testToken = "a-cluster-token-of-some-length"

// freeAddr returns a 127.0.0.1 address no one listens on just now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testNode is a node with the leadership reports it made.
type testNode struct {
	cfg  Config
	node *Node
	logs *lctest.SyncBuffer

	mu   sync.Mutex // guards last
	last Leadership
}

func (n *testNode) leadership() Leadership {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

func (n *testNode) start(t *testing.T) {
	t.Helper()
	cfg := n.cfg
	cfg.OnLeadership = func(l Leadership) {
		n.mu.Lock()
		n.last = l
		n.mu.Unlock()
	}
	node, err := Start(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.NodeID, err)
	}
	n.node = node
}

func (n *testNode) stop(t *testing.T) {
	t.Helper()
	if n.node == nil {
		return
	}
	if err := n.node.Close(); err != nil {
		t.Errorf("close %s: %v", n.cfg.NodeID, err)
	}
	n.node = nil
}

// newCluster starts size nodes bootstrapping the same CLUSTER_PEERS; token
// gives each node's CLUSTER_TOKEN ("" for testToken).
func newCluster(t *testing.T, size int, token func(i int) string) []*testNode {
	t.Helper()
	var peers []string
	addrs := make([]string, size)
	for i := range addrs {
		addrs[i] = freeAddr(t)
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, addrs[i]))
	}
	nodes := make([]*testNode, size)
	for i := range nodes {
		tok := testToken
		if token != nil && token(i) != "" {
			tok = token(i)
		}
		logs := &lctest.SyncBuffer{}
		nodes[i] = &testNode{logs: logs, cfg: Config{
			NodeID: fmt.Sprintf("n%d", i+1), RaftAddress: addrs[i], Peers: strings.Join(peers, ","),
			Token: tok, RaftDir: t.TempDir(),
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		}}
	}
	for _, n := range nodes {
		n.start(t)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(t)
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("logs of %s:\n%s", n.cfg.NodeID, n.logs.String())
			}
		}
	})
	return nodes
}

// leader waits for exactly one running node to lead and to have reported
// it (after its barrier), and returns it.
func leader(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var l *testNode
	waitFor(t, 15*time.Second, "one leader, reported", func() bool {
		l = nil
		count := 0
		for _, n := range nodes {
			if n.node != nil && n.node.Raft().State() == raft.Leader {
				count++
				l = n
			}
		}
		return count == 1 && l.leadership().Leading && l.leadership().Term == l.node.Raft().CurrentTerm()
	})
	return l
}

// converged waits until every running node's state is the leader's, at
// the leader's applied index.
func converged(t *testing.T, nodes []*testNode, l *testNode) table {
	t.Helper()
	want, at := dump(l.node.FSM())
	waitFor(t, 10*time.Second, "every node applies what the leader applied", func() bool {
		for _, n := range nodes {
			if n.node == nil {
				continue
			}
			got, applied := dump(n.node.FSM())
			if applied < at || !reflect.DeepEqual(got, want) {
				return false
			}
		}
		return true
	})
	return want
}

func TestClusterReplicatesAndFailsOver(t *testing.T) {
	nodes := newCluster(t, 3, nil)
	l := leader(t, nodes)
	lead := l.leadership()
	j := lead.Journal
	if lead.HighToken != 0 || j.Term() != lead.Term {
		t.Fatalf("first leadership: %+v", lead)
	}
	first := FirstToken(lead.HighToken, time.Now())
	if err := j.OpenSession(7, "svc", "10.0.0.1:1", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit([]locker.Change{grant("a", first, 0), grant("b", first+1, 7)}); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit([]locker.Change{{Key: "a", Token: first}, grant("a", first+2, 7)}); err != nil {
		t.Fatal(err)
	}
	st := converged(t, nodes, l)
	if st.Holds["a"].Token != first+2 || st.Holds["b"].Token != first+1 || st.Sessions[7].Holds != 2 || st.High != first+2 {
		t.Fatalf("replicated state: %+v", st)
	}

	// A follower's journal is refused before anything is appended.
	for _, n := range nodes {
		if n == l {
			continue
		}
		fj := NewJournal(n.node.Raft(), n.node.Raft().CurrentTerm(), time.Second)
		if err := fj.Commit([]locker.Change{grant("f", first+10, 0)}); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotApplied) {
			t.Fatalf("Commit on follower %s = %v; want ErrNotLeader", n.cfg.NodeID, err)
		}
	}

	// A contradiction is refused on every node alike and changes nothing.
	if err := j.Commit([]locker.Change{grant("c", first+3, 0), grant("b", first+4, 0)}); !errors.Is(err, locker.ErrContradiction) || !errors.Is(err, ErrNotApplied) {
		t.Fatalf("contradicting Commit = %v", err)
	}
	// An entry planned in another term reaches the log, and is skipped.
	f := l.node.Raft().Apply(Encode(&Entry{Kind: KindBatch, Term: lead.Term - 1, Changes: []locker.Change{grant("c", first+5, 0)}}), time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if err, _ := f.Response().(error); !errors.Is(err, ErrStaleTerm) {
		t.Fatalf("entry of an earlier term: response %v; want ErrStaleTerm", err)
	}
	if after := converged(t, nodes, l); !reflect.DeepEqual(after, st) {
		t.Fatalf("refused entries changed the state:\n%+v\n%+v", st, after)
	}

	// The leader goes; another is elected with the state, and tokens go on
	// from its high token.
	l.stop(t)
	if err := j.Commit([]locker.Change{grant("x", first+6, 0)}); !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrNotApplied) {
		t.Fatalf("Commit on a shut-down node = %v", err)
	}
	l2 := leader(t, nodes)
	lead2 := l2.leadership()
	if lead2.Term <= lead.Term || lead2.HighToken != st.High {
		t.Fatalf("new leadership %+v after term %d with high %d", lead2, lead.Term, st.High)
	}
	if got, _ := dump(l2.node.FSM()); !reflect.DeepEqual(got, st) {
		t.Fatalf("new leader's state:\n%+v\nwant\n%+v", got, st)
	}
	// The old term's journal, on the new leader's raft, gets nothing in.
	if err := NewJournal(l2.node.Raft(), lead.Term, time.Second).Commit([]locker.Change{grant("y", first+7, 0)}); !errors.Is(err, ErrStaleTerm) {
		t.Fatalf("Commit of an old term's engine = %v; want ErrStaleTerm", err)
	}
	next := FirstToken(lead2.HighToken, time.Now())
	if next <= st.High {
		t.Fatalf("FirstToken %d not above %d", next, st.High)
	}
	if err := lead2.Journal.EndSession(7, []locker.Change{{Key: "a", Token: first + 2}, {Key: "b", Token: first + 1}}); err != nil {
		t.Fatal(err)
	}
	if err := lead2.Journal.Commit([]locker.Change{grant("z", next, 0)}); err != nil {
		t.Fatal(err)
	}
	st2 := converged(t, nodes, l2)
	if len(st2.Holds) != 1 || st2.Holds["z"].Token != next || len(st2.Sessions) != 0 {
		t.Fatalf("state after the failover: %+v", st2)
	}

	// The old leader comes back on its RAFT_DIR, with its state, and
	// catches up as a follower.
	if !strings.Contains(l.logs.String(), `level=ERROR msg="cluster: refused a raft entry that contradicts`) {
		t.Errorf("the contradiction was not logged loudly")
	}
	l.start(t)
	converged(t, nodes, l2)
}

func TestClusterSnapshotAndRestart(t *testing.T) {
	nodes := newCluster(t, 3, nil)
	l := leader(t, nodes)
	j := l.leadership().Journal
	tok := FirstToken(0, time.Now())
	for i := range 20 {
		if err := j.Commit([]locker.Change{grant(fmt.Sprintf("k%d", i), tok+uint64(i), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	want := converged(t, nodes, l)
	// A follower snapshots, is stopped, and comes back from its snapshot
	// (and the log after it).
	var f *testNode
	for _, n := range nodes {
		if n != l {
			f = n
			break
		}
	}
	if err := f.node.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	f.stop(t)
	if err := j.Commit([]locker.Change{{Key: "k0", Token: tok}}); err != nil {
		t.Fatal(err)
	}
	delete(want.Holds, "k0")
	f.start(t)
	got := converged(t, nodes, l)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after the restart:\n%+v\nwant\n%+v", got, want)
	}
	// Every node restarted at once comes back with the same state.
	for _, n := range nodes {
		n.stop(t)
	}
	for _, n := range nodes {
		n.start(t)
	}
	l = leader(t, nodes)
	if got := converged(t, nodes, l); !reflect.DeepEqual(got, want) {
		t.Fatalf("after restarting all:\n%+v\nwant\n%+v", got, want)
	}
	if h := l.leadership().HighToken; h != tok+19 {
		t.Fatalf("high token after restarting all: %d, want %d", h, tok+19)
	}
}

func TestClusterWrongTokenNeverJoins(t *testing.T) {
	nodes := newCluster(t, 3, func(i int) string {
		if i == 2 {
			return "not-the-cluster-token"
		}
		return ""
	})
	l := leader(t, nodes)
	if l == nodes[2] {
		t.Fatal("the node with the wrong token leads")
	}
	if err := l.leadership().Journal.Commit([]locker.Change{grant("a", 1, 0)}); err != nil {
		t.Fatal(err)
	}
	converged(t, nodes[:2], l)
	// The outsider has heard from no one: no leader, nothing applied.
	waitFor(t, 5*time.Second, "the leader logs its refusal", func() bool {
		return strings.Contains(l.logs.String(), "refused a cluster-port connection")
	})
	out := nodes[2].node
	if addr, _ := out.Raft().LeaderWithID(); addr != "" {
		t.Fatalf("the outsider knows a leader: %s", addr)
	}
	if st, applied := dump(out.FSM()); applied != 0 || len(st.Holds) != 0 {
		t.Fatalf("the outsider applied %d: %+v", applied, st)
	}
	if !strings.Contains(nodes[2].logs.String(), "refused a cluster-port connection") {
		t.Errorf("the outsider did not log the refusal of the others")
	}
	// Raft's own logs reach slog, with their level.
	if !strings.Contains(l.logs.String(), `level=INFO msg="raft: entering leader state"`) {
		t.Errorf("raft's logs did not reach slog:\n%s", l.logs.String())
	}
}

func TestStreamHandshake(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	addr := freeAddr(t)
	s, err := newStreamLayer(addr, addr, []byte(testToken), log, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	accepted := make(chan net.Conn, 1)
	go func() { // ends when s is closed
		if c, err := s.Accept(); err == nil {
			accepted <- c
		}
	}()
	bad := &streamLayer{token: []byte("another-token-of-16+"), dialed: map[net.Conn]bool{}}
	if _, err := bad.Dial(raft.ServerAddress(addr), time.Second); !errors.Is(err, ErrAuth) {
		t.Fatalf("dial with a wrong token: %v", err)
	}
	// Raw bytes that are no hello are read no further than the hello.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte(strings.Repeat("x", 40)))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("a junk hello got %d bytes back, %v", n, err)
	}
	c.Close()
	good, err := s.Dial(raft.ServerAddress(addr), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	select {
	case a := <-accepted:
		good.Write([]byte("ping"))
		b := make([]byte, 4)
		a.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := a.Read(b); err != nil || string(b) != "ping" {
			t.Fatalf("after the handshake: %q %v", b, err)
		}
		a.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the authenticated connection was not accepted")
	}
}

func TestStartRefuses(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cfg := Config{NodeID: "n1", RaftAddress: addr, Peers: "n1=" + addr, Token: testToken, RaftDir: dir, Logger: quietLog()}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a one-node cluster leads", func() bool { return n.Raft().State() == raft.Leader })

	second := cfg
	second.RaftAddress = freeAddr(t)
	second.Peers = ""
	second.RaftAdvertise = second.RaftAddress
	begin := time.Now()
	if _, err := Start(second); err == nil || !strings.Contains(err.Error(), "RAFT_DIR") || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Start on the same RAFT_DIR: %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("the refusal took %v", d)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	other := cfg
	other.NodeID = "n2"
	other.Peers = "n2=" + addr
	if _, err := Start(other); err == nil || !strings.Contains(err.Error(), "NODE_ID") {
		t.Fatalf("restart with another NODE_ID: %v", err)
	}
	unlisted := cfg
	unlisted.RaftDir = t.TempDir()
	unlisted.Peers = "n2=" + addr + ",n3=127.0.0.1:1"
	unlisted.RaftAdvertise = addr
	if _, err := Start(unlisted); err == nil || !strings.Contains(err.Error(), "NODE_ID") || !strings.Contains(err.Error(), "CLUSTER_PEERS") {
		t.Fatalf("a node with no state missing from CLUSTER_PEERS: %v", err)
	}
	// The same node restarts on its RAFT_DIR.
	n, err = Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}

func TestConfigNamesTheVariable(t *testing.T) {
	ok := Config{NodeID: "n1", RaftAddress: "127.0.0.1:22121", Peers: "n1=127.0.0.1:22121,n2=h2:22121", Token: testToken, RaftDir: "/tmp/x"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		variable string
		mod      func(*Config)
	}{
		{"NODE_ID", func(c *Config) { c.NodeID = "" }},
		{"NODE_ID", func(c *Config) { c.NodeID = "a,b" }},
		{"RAFT_DIR", func(c *Config) { c.RaftDir = "" }},
		{"CLUSTER_TOKEN", func(c *Config) { c.Token = "short" }},
		{"CLUSTER_TOKEN", func(c *Config) { c.Token = strings.Repeat("t", 128) }},
		{"CLUSTER_PEERS", func(c *Config) { c.Peers = "n1" }},
		{"CLUSTER_PEERS", func(c *Config) { c.Peers = "n1=h:0" }},
		{"CLUSTER_PEERS", func(c *Config) { c.Peers = "n1=h:1,n1=h:2" }},
		{"CLUSTER_PEERS", func(c *Config) { c.Peers = "n1=:1" }},
		{"RAFT_HEARTBEAT_TIMEOUT", func(c *Config) { c.HeartbeatTimeout = 50 * time.Millisecond }},
		{"RAFT_HEARTBEAT_TIMEOUT", func(c *Config) { c.HeartbeatTimeout = time.Minute }},
		{"RAFT_ADDRESS", func(c *Config) { c.RaftAddress = "nope" }},
		{"RAFT_ADVERTISE", func(c *Config) { c.RaftAdvertise = "127.0.0.1:9999" }},
	} {
		c := ok
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.variable) {
			t.Errorf("%+v: Validate = %v; want it to name %s", c, err, tc.variable)
		}
	}
	c, _, err := ok.validated()
	if err != nil || c.HeartbeatTimeout != DefaultHeartbeatTimeout || c.SnapshotThreshold != DefaultSnapshotThreshold || c.RaftAdvertise != "127.0.0.1:22121" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}
