package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"
)

const testClusterToken = "a-cluster-token-for-tests"

// clusterNode is one node of a test cluster, started from the binary.
type clusterNode struct {
	*process
	id   string
	raft string
	dir  string
}

// startCluster starts n nodes on free loopback ports with their own
// RAFT_DIR; tokens[i], if given, replaces node i's CLUSTER_TOKEN. It does
// not wait for them: see awaitLeader.
func startCluster(t *testing.T, n int, tokens map[int]string, env ...string) []*clusterNode {
	t.Helper()
	return startClusterEach(t, n, func(i int) []string {
		if tk, ok := tokens[i]; ok {
			return []string{"CLUSTER_TOKEN=" + tk}
		}
		return nil
	}, env...)
}

// startClusterEach is startCluster with each node's own variables,
// perNode(i), after the others.
func startClusterEach(t *testing.T, n int, perNode func(i int) []string, env ...string) []*clusterNode {
	t.Helper()
	nodes := make([]*clusterNode, n)
	var peers []string
	for i := range nodes {
		nodes[i] = &clusterNode{id: fmt.Sprintf("n%d", i+1), raft: lctest.FreePort(t), dir: t.TempDir()}
		peers = append(peers, nodes[i].id+"="+nodes[i].raft)
	}
	for i, nd := range nodes {
		e := append([]string{"NODE_ID=" + nd.id, "RAFT_ADDRESS=" + nd.raft,
			"CLUSTER_PEERS=" + strings.Join(peers, ","), "CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + nd.dir}, env...)
		nd.process = spawnNode(t, append(e, perNode(i)...)...)
	}
	return nodes
}

// kill sends SIGKILL and waits for the process to end.
func (nd *clusterNode) kill(t *testing.T) {
	t.Helper()
	if err := nd.Kill(); err != nil && !isKilled(err) {
		t.Fatal(err)
	}
}

// spawnNode runs the binary without waiting for /readyz (a node is ready
// only once a quorum has elected a leader). It is stopped at cleanup.
func spawnNode(t *testing.T, env ...string) *process { return startBinary(t, env...) }

func isKilled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// status is what GET /api/v1/cluster answers.
type status struct {
	Node     string `json:"node"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     uint64 `json:"term"`
	Nodes    []struct {
		ID string `json:"id"`
	} `json:"nodes"`
}

func clusterStatus(web string) (status, error) {
	var st status
	hc := http.Client{Timeout: time.Second}
	req, err := http.NewRequest(http.MethodGet, "http://"+web+"/api/v1/cluster", nil)
	if err != nil {
		return st, err
	}
	req.SetBasicAuth("admin", testWebPassword) // for the clusters with WEB_PASSWORD; ignored without
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func isReady(web string) bool {
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + web + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// awaitLeader waits until every node of live is ready and they agree on a
// leader among them, and returns it.
func awaitLeader(t *testing.T, live []*clusterNode, within time.Duration) *clusterNode {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var leader *clusterNode
		agreed := true
		var lead string
		for _, nd := range live {
			st, err := clusterStatus(nd.Web)
			if err != nil || !isReady(nd.Web) || st.LeaderID == "" || (lead != "" && st.LeaderID != lead) {
				agreed = false
				break
			}
			lead = st.LeaderID
			if st.State == "leader" {
				leader = nd
			}
		}
		if agreed && leader != nil {
			return leader
		}
		if time.Now().After(deadline) {
			var logs []string
			for _, nd := range live {
				logs = append(logs, nd.id+":\n"+nd.Logs())
			}
			t.Fatalf("no leader agreed on within %v\n%s", within, strings.Join(logs, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grants checks that no key is ever granted to two holders at once.
type grants struct {
	mu   sync.Mutex // guards held
	held map[string]string
	errs []string
}

func (g *grants) grant(key, who string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.held[key]; ok && h != who {
		g.errs = append(g.errs, fmt.Sprintf("%s granted to %s while %s holds it", key, who, h))
	}
	g.held[key] = who
}

func (g *grants) releasing(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, key)
}

func TestClusterFailoverThroughFollowers(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	leader := awaitLeader(t, nodes, 20*time.Second)
	var followers []*clusterNode
	for _, nd := range nodes {
		if nd != leader {
			followers = append(followers, nd)
		}
	}
	f1, f2 := followers[0], followers[1]

	// v1 through a follower: Lock, TryLock through the other, Unlock.
	lockFrame := func(a protocol.Action, key string) []byte {
		b, _ := protocol.Frame{Action: a, Key: key}.Append(nil)
		return b
	}
	if got := raw(t, f1.Addr, lockFrame(protocol.Lock, "v1")); got != '+' {
		t.Fatalf("v1 Lock through a follower: %q\n%s", got, f1.Logs())
	}
	if got := raw(t, f2.Addr, lockFrame(protocol.TryLock, "v1")); got != '#' {
		t.Fatalf("v1 TryLock of a held key through the other follower: %q", got)
	}
	if got := raw(t, f2.Addr, lockFrame(protocol.Unlock, "v1")); got != '+' {
		t.Fatalf("v1 Unlock through a follower: %q", got)
	}

	// A session through a follower holds 10 keys.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s1, err := client.NewSession(ctx, f1.Addr, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("session through a follower: %v", err)
	}
	defer s1.Close(context.Background())
	g := &grants{held: map[string]string{}}
	tokens := map[string]uint64{}
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		tok, err := s1.Lock(ctx, key)
		if err != nil {
			t.Fatalf("Lock %s: %v", key, err)
		}
		g.grant(key, "s1")
		tokens[key] = tok
	}
	// A second session through the other follower waits for k0.
	s2, err := client.NewSession(ctx, f2.Addr, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	type result struct {
		token uint64
		err   error
	}
	waited := make(chan result, 1)
	go func() {
		tok, err := s2.Lock(ctx, "k0")
		if err == nil {
			g.grant("k0", "s2")
		}
		waited <- result{tok, err}
	}()
	waitLeaderQueue(t, leader.Web, "k0", 1)

	// kill -9 of the leader.
	killed := time.Now()
	leader.kill(t)
	// The session works again once a new leader serves: a probe key.
	var back time.Duration
	for i := 0; ; i++ {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		key := fmt.Sprintf("probe%d", i)
		tok, err := s1.TryLock(pctx, key)
		pcancel()
		if err == nil {
			back = time.Since(killed)
			if err := s1.Unlock(ctx, key, tok); err != nil {
				t.Fatalf("Unlock of the probe: %v", err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the session did not work again after the leader's kill: %v\n%s\n%s", err, f1.Logs(), f2.Logs())
		}
	}
	t.Logf("kill -9 of the leader → the session works again: %v", back.Round(time.Millisecond))
	newLeader := awaitLeader(t, followers, 10*time.Second)
	t.Logf("new leader %s", newLeader.id)

	select {
	case r := <-waited:
		t.Fatalf("the waiter for k0 was answered while s1 holds it: %+v", r)
	default:
	}
	// Every hold is still s1's, under its token: k1..k9 are released by
	// token ('+' only for that grant), k0 last, which hands it to s2.
	for i := 1; i < 10; i++ {
		key := fmt.Sprintf("k%d", i)
		g.releasing(key)
		if err := s1.Unlock(ctx, key, tokens[key]); err != nil {
			t.Fatalf("Unlock %s by its token after the failover: %v", key, err)
		}
	}
	g.releasing("k0")
	if err := s1.Unlock(ctx, "k0", tokens["k0"]); err != nil {
		t.Fatalf("Unlock k0 by its token after the failover: %v", err)
	}
	select {
	case r := <-waited:
		if r.err != nil {
			t.Fatalf("the waiter for k0: %v\n%s", r.err, newLeader.Logs())
		}
		if r.token <= tokens["k0"] {
			t.Fatalf("k0 granted after the failover under token %d, not above the old grant's %d", r.token, tokens["k0"])
		}
	case <-ctx.Done():
		t.Fatalf("the waiter for k0 was not granted after its release\n%s", newLeader.Logs())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.errs) > 0 {
		t.Fatalf("double grants: %v", g.errs)
	}
}

// waitLeaderQueue waits until key has n waiters on the leader's table.
func waitLeaderQueue(t *testing.T, web, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := queueLen(web, key)
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue of %s: %d, %v; want %d", key, got, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClusterWrongTokenDoesNotJoin(t *testing.T) {
	nodes := startCluster(t, 3, map[int]string{2: "another-token-entirely"})
	awaitLeader(t, nodes[:2], 20*time.Second)
	stranger := nodes[2]
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stranger.Logs()+nodes[0].Logs()+nodes[1].Logs(), "CLUSTER_TOKEN handshake") {
		if time.Now().After(deadline) {
			t.Fatalf("no handshake refusal logged\n%s", stranger.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := clusterStatus(stranger.Web)
	if err != nil {
		t.Fatal(err)
	}
	if st.LeaderID != "" || st.State == "leader" || isReady(stranger.Web) {
		t.Fatalf("the node with the wrong token joined: %+v", st)
	}
}

func TestClusterConfigErrorsNameTheVariable(t *testing.T) {
	bin := serverBinary(t)
	peers := "CLUSTER_PEERS=n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3"
	dir := "RAFT_DIR=" + t.TempDir()
	token := "CLUSTER_TOKEN=" + testClusterToken
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"RAFT_DIR", []string{peers, "NODE_ID=n1", token}},
		{"CLUSTER_TOKEN", []string{peers, "NODE_ID=n1", dir}},
		{"CLUSTER_TOKEN", []string{peers, "NODE_ID=n1", dir, "CLUSTER_TOKEN=short"}},
		{"CLUSTER_JOIN", []string{peers, "NODE_ID=n1", dir, token, "CLUSTER_JOIN=127.0.0.1:22120"}},
		{"RAFT_DIR", []string{"CLUSTER_JOIN=127.0.0.1:22120"}},
		{"CLUSTER_JOIN", []string{"CLUSTER_JOIN=nowhere", dir, token}},
		{"DATA_PATH", []string{"CLUSTER_JOIN=127.0.0.1:22120", dir, token, "DATA_PATH=" + t.TempDir() + "/wal"}},
		{"RAFT_TLS_KEY", []string{peers, "NODE_ID=n1", dir, token, "RAFT_TLS_CERT=/x.crt"}},
		{"RAFT_TLS_CA", []string{peers, "NODE_ID=n1", dir, token, "RAFT_TLS_CERT=/x.crt", "RAFT_TLS_KEY=/x.key"}},
		{"RAFT_TLS_CERT", []string{peers, "NODE_ID=n1", dir, token, "RAFT_TLS_CERT=/nonexistent.crt", "RAFT_TLS_KEY=/x.key", "RAFT_TLS_CA=/x.pem"}},
		{"RAFT_TLS_CA", []string{"RAFT_TLS_CA=/x.pem"}},
		{"DATA_PATH", []string{peers, "NODE_ID=n1", dir, token, "DATA_PATH=" + t.TempDir() + "/wal"}},
		{"NODE_ID", []string{peers, "NODE_ID=n9", dir, token, "RAFT_ADDRESS=" + lctest.FreePort(t)}},
		{"RAFT_HEARTBEAT_TIMEOUT", []string{peers, "NODE_ID=n1", dir, token, "RAFT_HEARTBEAT_TIMEOUT=50ms"}},
		{"LEADER_WAIT", []string{peers, "NODE_ID=n1", dir, token, "LEADER_WAIT=soon"}},
		{"RAFT_SNAPSHOT_THRESHOLD", []string{peers, "NODE_ID=n1", dir, token, "RAFT_SNAPSHOT_THRESHOLD=0"}},
	} {
		cmd := exec.Command(bin)
		cmd.Env = append([]string{"BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=off"}, c.env...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%v: exit %v, want non-zero", c.env, err)
		}
		if !strings.Contains(string(out), c.name) {
			t.Errorf("%v: message does not name %s: %s", c.env, c.name, out)
		}
	}
}
