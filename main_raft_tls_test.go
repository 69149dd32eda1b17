package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/internal/lctest"
	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

// peerTLSEnv writes a node certificate signed by ca (for 127.0.0.1, both
// server and client) and returns the RAFT_TLS_* variables for it.
func peerTLSEnv(t *testing.T, ca *tlstest.CA, name string) []string {
	dir := t.TempDir()
	cert, key := ca.Issue(t, tlstest.Options{CommonName: name, Peer: true}).WriteFiles(t, dir, name)
	return []string{"RAFT_TLS_CERT=" + cert, "RAFT_TLS_KEY=" + key, "RAFT_TLS_CA=" + ca.WriteFile(t, dir, "ca.pem")}
}

func TestClusterMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster CA")
	nodes := startClusterEach(t, 3, func(i int) []string { return peerTLSEnv(t, ca, nodes3[i]) })
	leader := awaitLeader(t, nodes, 20*time.Second)
	if !strings.Contains(leader.Logs(), "raft_tls=true") {
		t.Fatalf("the start line does not say the cluster port speaks TLS\n%s", leader.Logs())
	}
	var follower *clusterNode
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
		}
	}
	// Served through a follower: a forwarded connection over TLS.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.NewSession(ctx, follower.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Lock(ctx, "over-tls"); err != nil {
		t.Fatalf("Lock through a follower over mTLS: %v", err)
	}

	// A node whose certificate another CA signed is not added: the
	// leader cannot reach it, and says why.
	other := tlstest.NewCA(t, "another CA")
	stranger := joinNode(t, "n4", follower.Web, peerTLSEnv(t, other, "n4")...)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stranger.Logs(), "join failed") || !strings.Contains(stranger.Logs(), "cannot reach the node") {
		if time.Now().After(deadline) {
			t.Fatalf("the stranger's join was not refused\n%s\n%s", stranger.Logs(), leader.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(leader.Logs()+stranger.Logs(), "TLS handshake") {
		t.Fatalf("no TLS refusal logged\n%s\n%s", leader.Logs(), stranger.Logs())
	}
	st, err := getStatus(leader.Web)
	if err != nil {
		t.Fatal(err)
	}
	if got := members(st); got != "n1:voter,n2:voter,n3:voter" {
		t.Fatalf("members %s", got)
	}
	if isReady(stranger.Web) {
		t.Fatal("the stranger is ready")
	}
	code, body := webDo(t, http.MethodGet, stranger.Web, "/api/v1/cluster", "")
	if code != http.StatusOK || strings.Contains(body, `"leader_id":"n`) {
		t.Fatalf("the stranger knows a leader: %d %s", code, body)
	}
}

var nodes3 = []string{"n1", "n2", "n3"}

func TestClusterJoinOverHTTPS(t *testing.T) {
	ca := tlstest.NewCA(t, "web CA")
	cert, key := ca.Issue(t, tlstest.Options{}).WriteFiles(t, t.TempDir(), "web")
	webTLS := []string{"TLS_CERT=" + cert, "TLS_KEY=" + key}
	n1 := &clusterNode{id: "n1", raft: lctest.FreePort(t), dir: t.TempDir()}
	n1.process = spawnNode(t, append([]string{"NODE_ID=n1", "RAFT_ADDRESS=" + n1.raft, "CLUSTER_PEERS=n1=" + n1.raft,
		"CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + n1.dir}, webTLS...)...)
	n2 := joinNode(t, "n2", "https://"+n1.Web, webTLS...)
	hc := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	deadline := time.Now().Add(40 * time.Second)
	for {
		var st fullStatus
		resp, err := hc.Get("https://" + n1.Web + "/api/v1/cluster")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && members(st) == "n1:voter,n2:voter" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("n2 did not join over https: %v %+v\n%s", err, st, allLogs(n1, n2)())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
