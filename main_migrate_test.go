package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"
)

// keyToken reads a held key's token off a node's web port.
func keyToken(t *testing.T, web, key string) uint64 {
	t.Helper()
	code, body := webDo(t, http.MethodGet, web, "/api/v1/keys/"+key, "")
	if code != http.StatusOK {
		t.Fatalf("GET key %s on %s: %d %s", key, web, code, body)
	}
	var k struct {
		Token uint64 `json:"token"`
	}
	if err := json.Unmarshal([]byte(body), &k); err != nil {
		t.Fatal(err)
	}
	return k.Token
}

func TestClusterMigrateFromOneNode(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "locks.wal")
	bind := lctest.FreePort(t)
	single := startBinary(t, "DATA_PATH="+wal, "BIND_ADDRESS="+bind)

	// A v1 hold and a session with two holds.
	if got := raw(t, single.Addr, lockFrame("v1key")); got != '+' {
		t.Fatalf("v1 Lock: %q", got)
	}
	tokens := map[string]uint64{"v1key": keyToken(t, single.Web, "v1key")}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sess, err := client.NewSession(ctx, bind, client.WithTTL(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(context.Background())
	for _, k := range []string{"s1", "s2"} {
		if tokens[k], err = sess.Lock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := single.Stop(); err != nil {
		t.Fatalf("stop the single node: %v", err)
	}

	// The same log, as a cluster of one: it bootstraps and imports.
	n1 := &clusterNode{id: "n1", raft: lctest.FreePort(t), dir: t.TempDir()}
	n1.process = spawnNode(t, "NODE_ID=n1", "RAFT_ADDRESS="+n1.raft, "CLUSTER_PEERS=n1="+n1.raft,
		"CLUSTER_TOKEN="+testClusterToken, "RAFT_DIR="+n1.dir, "DATA_PATH="+wal, "BIND_ADDRESS="+bind)
	awaitLeader(t, []*clusterNode{n1}, 20*time.Second)
	if _, err := os.Stat(wal + ".migrated"); err != nil {
		t.Fatalf("the log was not renamed: %v\n%s", err, n1.Logs())
	}
	if _, err := os.Stat(wal); !os.IsNotExist(err) {
		t.Fatalf("the log is still at DATA_PATH: %v", err)
	}
	// Two more join.
	n2 := joinNode(t, "n2", n1.Web)
	n3 := joinNode(t, "n3", n1.Web)
	all := []*clusterNode{n1, n2, n3}
	logs := allLogs(all...)
	awaitMembers(t, n1.Web, "n1:voter,n2:voter,n3:voter", 40*time.Second, logs)

	// Leadership moves to a joined node: its engine, built from the
	// replicated state, has every hold with its token.
	if code, body := webDo(t, http.MethodPost, n3.Web, "/api/v1/cluster/transfer", `{"id":"n2"}`); code != http.StatusOK {
		t.Fatalf("transfer to n2: %d %s\n%s", code, body, logs())
	}
	if l := awaitLeader(t, all, 20*time.Second); l != n2 {
		t.Fatalf("%s leads, not n2", l.id)
	}
	for k, tok := range tokens {
		if got := keyToken(t, n2.Web, k); got != tok {
			t.Fatalf("%s: token %d on the new leader, %d on the single node", k, got, tok)
		}
	}
	// Held through any node.
	for _, nd := range all {
		if got := raw(t, nd.Addr, tryLockFrame("v1key")); got != '#' {
			t.Fatalf("TryLock of the migrated v1 hold through %s: %q", nd.id, got)
		}
	}
	// The session resumes (its connection, to n1's client port, was
	// closed by each move) and releases by its old tokens; a new grant's
	// token is above every old one.
	high := max(tokens["v1key"], tokens["s1"], tokens["s2"])
	tok, err := sess.TryLock(ctx, "fresh")
	if err != nil {
		t.Fatalf("the session after the migration: %v\n%s", err, logs())
	}
	if tok <= high {
		t.Fatalf("new grant's token %d is not above the migrated %d", tok, high)
	}
	for _, k := range []string{"s1", "s2"} {
		if err := sess.Unlock(ctx, k, tokens[k]); err != nil {
			t.Fatalf("Unlock %s by its single-node token: %v", k, err)
		}
	}
	if !strings.Contains(n1.Logs(), "DATA_PATH's log is in the cluster") {
		t.Fatalf("no import logged\n%s", n1.Logs())
	}
}

func TestClusterDataPathWithStateRefused(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "locks.wal")
	single := startBinary(t, "DATA_PATH="+wal)
	if got := raw(t, single.Addr, lockFrame("k")); got != '+' {
		t.Fatalf("v1 Lock: %q", got)
	}
	single.Stop()
	raftDir := t.TempDir()
	n1 := &clusterNode{id: "n1", raft: lctest.FreePort(t), dir: raftDir}
	env := []string{"NODE_ID=n1", "RAFT_ADDRESS=" + n1.raft, "CLUSTER_PEERS=n1=" + n1.raft,
		"CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + raftDir}
	n1.process = spawnNode(t, env...)
	awaitLeader(t, []*clusterNode{n1}, 20*time.Second)
	if err := n1.Stop(); err != nil {
		t.Fatal(err)
	}
	// With raft state, a log at DATA_PATH is not moved in: refused.
	out, code := runOnce(t, append(env, "DATA_PATH="+wal)...)
	if code == 0 || !strings.Contains(out, "DATA_PATH") || !strings.Contains(out, "raft state") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// Without a log there, DATA_PATH is ignored.
	if err := os.Rename(wal, wal+".migrated"); err != nil {
		t.Fatal(err)
	}
	n1.process = spawnNode(t, append(env, "DATA_PATH="+wal)...)
	awaitLeader(t, []*clusterNode{n1}, 20*time.Second)
	if !strings.Contains(n1.Logs(), "DATA_PATH ignored") {
		t.Fatalf("no line says DATA_PATH is ignored\n%s", n1.Logs())
	}
}

// runOnce runs the binary to its exit (a start that is refused) and
// returns its output and exit code.
func runOnce(t *testing.T, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(serverBinary(t))
	cmd.Env = append([]string{"BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=127.0.0.1:0"}, env...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("the server did not exit:\n%s", out)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

func tryLockFrame(key string) []byte {
	b, _ := protocol.Frame{Action: protocol.TryLock, Key: key}.Append(nil)
	return b
}
