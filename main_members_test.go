package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"
)

// lockFrame is a v1 Lock of key.
func lockFrame(key string) []byte {
	b, _ := protocol.Frame{Action: protocol.Lock, Key: key}.Append(nil)
	return b
}

const testWebPassword = "a-web-password"

// webDo sends a request to a node's web port with WEB_PASSWORD and
// returns the status and body.
func webDo(t *testing.T, method, web, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+web+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", testWebPassword)
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// fullStatus is GET /api/v1/cluster with each node's suffrage.
type fullStatus struct {
	Node     string `json:"node"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Nodes    []struct {
		ID       string `json:"id"`
		Address  string `json:"address"`
		Suffrage string `json:"suffrage"`
		Leader   bool   `json:"leader"`
	} `json:"nodes"`
}

func getStatus(web string) (fullStatus, error) {
	var st fullStatus
	hc := http.Client{Timeout: time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+web+"/api/v1/cluster", nil)
	req.SetBasicAuth("admin", testWebPassword)
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

// members returns "id:suffrage" of every member, as web sees them.
func members(st fullStatus) string {
	var out []string
	for _, n := range st.Nodes {
		out = append(out, n.ID+":"+n.Suffrage)
	}
	return strings.Join(out, ",")
}

// awaitMembers waits until the node at web lists exactly want
// ("id:suffrage,…" in the configuration's order).
func awaitMembers(t *testing.T, web, want string, within time.Duration, logs func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got string
	for {
		st, err := getStatus(web)
		if err == nil {
			if got = members(st); got == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %q, want %q (%v)\n%s", got, want, err, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// joinNode starts a node that joins through the web port via.
func joinNode(t *testing.T, id, via string, env ...string) *clusterNode {
	nd := &clusterNode{id: id, raft: lctest.FreePort(t), dir: t.TempDir()}
	nd.process = spawnNode(t, append([]string{"NODE_ID=" + id, "RAFT_ADDRESS=" + nd.raft, "CLUSTER_JOIN=" + via,
		"CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + nd.dir}, env...)...)
	return nd
}

func allLogs(nodes ...*clusterNode) func() string {
	return func() string {
		var b bytes.Buffer
		for _, nd := range nodes {
			fmt.Fprintf(&b, "%s:\n%s\n", nd.id, nd.Logs())
		}
		return b.String()
	}
}

func TestClusterJoinTransferRemove(t *testing.T) {
	pw := "WEB_PASSWORD=" + testWebPassword
	nodes := startCluster(t, 3, nil, pw)
	leader := awaitLeader(t, nodes, 20*time.Second)
	var follower *clusterNode
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
			break
		}
	}
	// A fourth node joins through a follower's web port, with
	// CLUSTER_TOKEN (it does not know WEB_PASSWORD); it is added as a
	// non-voter and promoted once caught up.
	joinStart := time.Now()
	n4 := joinNode(t, "n4", follower.Web)
	logs := allLogs(append(nodes, n4)...)
	awaitMembers(t, leader.Web, "n1:voter,n2:voter,n3:voter,n4:voter", 30*time.Second, logs)
	t.Logf("start of a joining node → voter: %v", time.Since(joinStart).Round(time.Millisecond))
	if !strings.Contains(leader.Logs(), "added as a non-voter") || !strings.Contains(leader.Logs(), "promoted to voter") {
		t.Fatalf("the leader did not add n4 as a non-voter, then promote it\n%s", leader.Logs())
	}
	all := append(append([]*clusterNode{}, nodes...), n4)
	awaitLeader(t, all, 20*time.Second)

	// Without the password, or with a forged join proof, nothing changes.
	hc := http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Post("http://"+follower.Web+"/api/v1/cluster/transfer", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("transfer without the password: %s", resp.Status)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+follower.Web+"/api/v1/cluster/nodes", strings.NewReader(`{"id":"evil","address":"127.0.0.1:1"}`))
	req.Header.Set("X-LC-Cluster-Join", fmt.Sprintf("t=%d,mac=00", time.Now().Unix()))
	if resp, err = hc.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a join with a forged proof: %s", resp.Status)
	}

	// Hand leadership to n4, asked of a node that does not lead.
	var asked *clusterNode
	for _, nd := range nodes {
		if nd != leader {
			asked = nd
			break
		}
	}
	transferStart := time.Now()
	code, body := webDo(t, http.MethodPost, asked.Web, "/api/v1/cluster/transfer", `{"id":"n4"}`)
	t.Logf("transfer through a follower answered in %v", time.Since(transferStart).Round(time.Millisecond))
	if code != http.StatusOK || !strings.Contains(body, `"leader":"n4"`) {
		t.Fatalf("transfer to n4 through a follower: %d %s\n%s", code, body, logs())
	}
	if l := awaitLeader(t, all, 20*time.Second); l != n4 {
		t.Fatalf("after the transfer %s leads, not n4", l.id)
	}
	// Remove the old leader through another node; then one more. The
	// last removal, which would leave one voter, is refused.
	code, body = webDo(t, http.MethodDelete, asked.Web, "/api/v1/cluster/nodes/"+leader.id, "")
	if code != http.StatusOK {
		t.Fatalf("remove %s: %d %s", leader.id, code, body)
	}
	var rest []*clusterNode
	for _, nd := range all {
		if nd != leader {
			rest = append(rest, nd)
		}
	}
	awaitLeader(t, rest, 20*time.Second)
	code, body = webDo(t, http.MethodDelete, n4.Web, "/api/v1/cluster/nodes/"+asked.id, "")
	if code != http.StatusOK {
		t.Fatalf("remove %s: %d %s", asked.id, code, body)
	}
	var two []*clusterNode
	for _, nd := range rest {
		if nd != asked {
			two = append(two, nd)
		}
	}
	awaitLeader(t, two, 20*time.Second)
	code, body = webDo(t, http.MethodDelete, n4.Web, "/api/v1/cluster/nodes/"+two[0].id, "")
	if code != http.StatusConflict || !strings.Contains(body, "fewer than 2 voters") {
		t.Fatalf("a removal leaving one voter: %d %s", code, body)
	}
	code, body = webDo(t, http.MethodDelete, n4.Web, "/api/v1/cluster/nodes/nobody", "")
	if code != http.StatusNotFound {
		t.Fatalf("removal of an unknown node: %d %s", code, body)
	}
	// The two that remain still grant.
	if got := raw(t, two[0].Addr, lockFrame("after")); got != '+' {
		t.Fatalf("Lock on the shrunk cluster: %q\n%s", got, logs())
	}
}

// runHandover runs `locking-center handover` with the variables of node
// nd (its web port and password, its cluster variables) and returns its
// output and exit code.
func runHandover(t *testing.T, nd *clusterNode, peers string) (string, int) {
	t.Helper()
	cmd := exec.Command(serverBinary(t), "handover", "20s")
	cmd.Env = []string{"WEB_ADDRESS=" + nd.Web, "WEB_PASSWORD=" + testWebPassword, "NODE_ID=" + nd.id,
		"CLUSTER_PEERS=" + peers, "CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + nd.dir, "RAFT_ADDRESS=" + nd.raft}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func TestClusterHandoverCommand(t *testing.T) {
	nodes := startCluster(t, 3, nil, "WEB_PASSWORD="+testWebPassword)
	leader := awaitLeader(t, nodes, 20*time.Second)
	var peers []string
	var follower *clusterNode
	for _, nd := range nodes {
		peers = append(peers, nd.id+"="+nd.raft)
		if nd != leader {
			follower = nd
		}
	}
	// On a follower it changes nothing.
	out, code := runHandover(t, follower, strings.Join(peers, ","))
	if code != 0 || !strings.Contains(out, "does not lead") {
		t.Fatalf("handover on a follower: exit %d: %s", code, out)
	}
	if l := awaitLeader(t, nodes, 10*time.Second); l != leader {
		t.Fatalf("the leader moved from %s to %s", leader.id, l.id)
	}
	// On the leader it returns once another node leads.
	out, code = runHandover(t, leader, strings.Join(peers, ","))
	if code != 0 || !strings.Contains(out, "handed leadership to node") {
		t.Fatalf("handover on the leader: exit %d: %s\n%s", code, out, leader.Logs())
	}
	st, err := getStatus(leader.Web)
	if err != nil || st.State == "leader" || st.LeaderID == "" || st.LeaderID == leader.id {
		t.Fatalf("after the handover the old leader says %+v, %v", st, err)
	}
}

func TestClusterRaftDirBelongsToOneNode(t *testing.T) {
	nd := &clusterNode{id: "n1", raft: lctest.FreePort(t), dir: t.TempDir()}
	env := []string{"RAFT_ADDRESS=" + nd.raft, "CLUSTER_PEERS=n1=" + nd.raft,
		"CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + nd.dir}
	nd.process = spawnNode(t, append(env, "NODE_ID=n1")...)
	awaitLeader(t, []*clusterNode{nd}, 20*time.Second)
	// A second process on the same RAFT_DIR is refused while the first
	// runs.
	out, code := runOnce(t, append(env, "NODE_ID=n1")...)
	if code == 0 || !strings.Contains(out, "RAFT_DIR") || !strings.Contains(out, "in use") {
		t.Fatalf("a second process on the same RAFT_DIR: exit %d:\n%s", code, out)
	}
	if err := nd.Stop(); err != nil {
		t.Fatal(err)
	}
	// Another NODE_ID on that RAFT_DIR is refused.
	n9 := lctest.FreePort(t)
	out, code = runOnce(t, "RAFT_ADDRESS="+n9, "CLUSTER_PEERS=n1="+nd.raft+",n9="+n9,
		"CLUSTER_TOKEN="+testClusterToken, "RAFT_DIR="+nd.dir, "NODE_ID=n9")
	if code == 0 || !strings.Contains(out, `NODE_ID \"n9\"`) || !strings.Contains(out, `belongs to node \"n1\"`) {
		t.Fatalf("another NODE_ID on the RAFT_DIR: exit %d:\n%s", code, out)
	}
}

func TestClusterRecoverFromPeersJSON(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	leader := awaitLeader(t, nodes, 20*time.Second)
	if got := raw(t, leader.Addr, lockFrame("kept")); got != '+' {
		t.Fatalf("Lock: %q", got)
	}
	token := keyToken(t, leader.Web, "kept")
	// Two nodes are lost for good; the quorum with them.
	survivor := nodes[0]
	for _, nd := range nodes[1:] {
		nd.kill(t)
	}
	if err := survivor.Stop(); err != nil {
		t.Fatal(err)
	}
	peers := fmt.Sprintf(`[{"id":"n1","address":%q,"non_voter":false}]`, survivor.raft)
	if err := os.WriteFile(filepath.Join(survivor.dir, "peers.json"), []byte(peers), 0o600); err != nil {
		t.Fatal(err)
	}
	survivor.Restart(t)
	awaitLeader(t, []*clusterNode{survivor}, 20*time.Second)
	if !strings.Contains(survivor.Logs(), "recovered from peers.json") {
		t.Fatalf("no recovery logged\n%s", survivor.Logs())
	}
	if _, err := os.Stat(filepath.Join(survivor.dir, "peers.json")); !os.IsNotExist(err) {
		t.Fatalf("peers.json is still there: %v", err)
	}
	if got := keyToken(t, survivor.Web, "kept"); got != token {
		t.Fatalf("the hold's token after the recovery: %d, want %d", got, token)
	}
	if got := raw(t, survivor.Addr, lockFrame("after")); got != '+' {
		t.Fatalf("Lock after the recovery: %q", got)
	}
}
