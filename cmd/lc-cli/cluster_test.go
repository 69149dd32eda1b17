package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/lctest"
)

// clusterOf3 starts a 3-node cluster of the real server and returns its
// nodes once one of them leads.
func clusterOf3(t *testing.T) []*lctest.Server {
	t.Helper()
	raft := []string{lctest.FreePort(t), lctest.FreePort(t), lctest.FreePort(t)}
	peers := fmt.Sprintf("n1=%s,n2=%s,n3=%s", raft[0], raft[1], raft[2])
	nodes := make([]*lctest.Server, 3)
	for i := range nodes {
		nodes[i] = lctest.Start(t, fmt.Sprintf("NODE_ID=n%d", i+1), "RAFT_ADDRESS="+raft[i], "CLUSTER_PEERS="+peers,
			"CLUSTER_TOKEN=a-cluster-token-for-lc-cli-tests", "RAFT_DIR="+t.TempDir())
	}
	leaderOf(t, nodes)
	return nodes
}

// leaderOf waits until one of nodes says it leads and every other one
// names it, and returns it.
func leaderOf(t *testing.T, nodes []*lctest.Server) *lctest.Server {
	t.Helper()
	hc := http.Client{Timeout: time.Second}
	var leader *lctest.Server
	eventually(t, "a leader that every live node knows", func() bool {
		leader = nil
		ids := map[string]bool{}
		for _, nd := range nodes {
			resp, err := hc.Get("http://" + nd.Web + "/api/v1/cluster")
			if err != nil {
				return false
			}
			var st struct {
				State    string `json:"state"`
				LeaderID string `json:"leader_id"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || st.LeaderID == "" {
				return false
			}
			ids[st.LeaderID] = true
			if st.State == "leader" {
				leader = nd
			}
		}
		return leader != nil && len(ids) == 1
	})
	return leader
}

// TestClusterAddressList: lc-cli given a cluster's nodes, a dead address
// first, through --address, --server, LC_ADDRESS and LC_SERVER: lock,
// trylock, unlock and keys work (the JSON API is asked node after node),
// and `lock KEY -- CMD` keeps its key through a kill -9 of the leader.
func TestClusterAddressList(t *testing.T) {
	nodes := clusterOf3(t)
	dead, deadWeb := lctest.FreePort(t), lctest.FreePort(t)
	addrs := []string{dead}
	webs := []string{deadWeb}
	for _, nd := range nodes {
		addrs = append(addrs, nd.Addr)
		webs = append(webs, nd.Web)
	}
	list, webList := strings.Join(addrs, ","), strings.Join(webs, ",")
	base := []string{"PATH=" + os.Getenv("PATH"), "LC_WEB_ADDRESS=" + webList}

	for _, how := range []struct {
		env  []string
		args []string
	}{
		{[]string{"LC_ADDRESS=" + list}, nil},
		{[]string{"LC_SERVER=" + list}, nil},
		{nil, []string{"--address", list}},
		{nil, []string{"--server", list}},
	} {
		env := append(append([]string(nil), base...), how.env...)
		args := func(a ...string) []string { return append(append([]string(nil), how.args...), a...) }
		if code, _, stderr := run(t, env, args("lock", "v1-key")...); code != 0 {
			t.Fatalf("%v lock: exit %d: %s", how, code, stderr)
		}
		if code, _, stderr := run(t, env, args("trylock", "v1-key")...); code != 1 {
			t.Fatalf("%v trylock of a held key: exit %d, want 1: %s", how, code, stderr)
		}
		code, stdout, stderr := run(t, env, args("keys", "--json")...)
		if code != 0 || !strings.Contains(stdout, `"v1-key"`) {
			t.Fatalf("%v keys: exit %d: %s %s", how, code, stdout, stderr)
		}
		if code, _, stderr := run(t, env, args("unlock", "v1-key")...); code != 0 {
			t.Fatalf("%v unlock: exit %d: %s", how, code, stderr)
		}
		code, stdout, stderr = run(t, env, args("lock", "cmd-key", "--", "sh", "-c", "echo $LC_FENCING_TOKEN")...)
		if tok, err := strconv.ParseUint(strings.TrimSpace(stdout), 10, 64); code != 0 || err != nil || tok == 0 {
			t.Fatalf("%v lock -- CMD: exit %d, out %q: %s", how, code, stdout, stderr)
		}
	}

	// lock KEY -- CMD while the leader is killed: CMD runs on, the session
	// resumes through another node, and lc-cli releases the key and exits
	// with CMD's status.
	leader := leaderOf(t, nodes)
	gate := filepath.Join(t.TempDir(), "go-on")
	env := append(append([]string(nil), base...), "LC_ADDRESS="+list)
	cmd, _, stderr := cli(env, "lock", "--ttl", "10s", "failover-key", "--", "sh", "-c",
		fmt.Sprintf("while [ ! -e %s ]; do sleep 0.05; done", gate))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "failover-key held", func() bool {
		code, stdout, _ := run(t, env, "keys", "--json")
		return code == 0 && strings.Contains(stdout, `"failover-key"`)
	}, stderr.String)
	_ = leader.Kill() // its error is the "signal: killed" of the wait
	var live []*lctest.Server
	for _, nd := range nodes {
		if nd != leader {
			live = append(live, nd)
		}
	}
	newLeader := leaderOf(t, live)
	// The hold survived the failover, under the same session.
	code, stdout, _ := run(t, env, "keys", "--json")
	if code != 0 || !strings.Contains(stdout, `"failover-key"`) {
		t.Fatalf("after the failover, keys: exit %d %s\n%s", code, stdout, newLeader.Logs())
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := wait(t, cmd); code != 0 {
		t.Fatalf("lock -- CMD across the failover: exit %d: %s", code, stderr)
	}
	code, stdout, _ = run(t, env, "keys", "--json")
	if code != 0 || strings.Contains(stdout, `"failover-key"`) {
		t.Fatalf("after CMD ended, keys: exit %d %s", code, stdout)
	}
}
