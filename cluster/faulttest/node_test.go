package faulttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/lctest"
)

// Ports of every node, each on its own address.
const (
	clientPort = "22119"
	webPort    = "22120"
	raftPort   = "22121"
	token      = "a-cluster-token-for-fault-tests"
)

// node is one cluster node: the server binary run in its namespace by
// `ip netns exec` (which execs it: the PID is the server's), stopped by
// that PID. RAFT_DIR stays across restarts.
type node struct {
	i     int
	id    string
	ns    string
	ip    string
	dir   string
	fail  string // the file whose existence fails raft's log writes (LC_RAFT_FAIL_WRITES)
	bin   string
	env   []string // the environment of every start
	extra []string // added for the next start only
	log   *lctest.SyncBuffer

	mu      sync.Mutex // guards cmd, done, exitErr, paused
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has ended and its log is read
	exitErr error
	paused  bool
}

func (nd *node) client() string { return nd.ip + ":" + clientPort }
func (nd *node) web() string    { return nd.ip + ":" + webPort }

// cluster is the nodes of one network.
type cluster struct {
	t     testing.TB
	net   *network
	nodes []*node
}

// startCluster starts n nodes of the failpoint build in a network of its
// own and waits for a leader.
func startCluster(t testing.TB, tag string, subnet, n int, env ...string) *cluster {
	t.Helper()
	nw := newNetwork(t, tag, subnet, n)
	bin := lctest.Binary(t, "failpoints")
	c := &cluster{t: t, net: nw}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("n%d=%s:%s", i+1, nw.addr(i), raftPort))
	}
	for i := range n {
		nd := &node{i: i, id: fmt.Sprintf("n%d", i+1), ns: nw.ns(i), ip: nw.addr(i), dir: t.TempDir(), bin: bin, log: &lctest.SyncBuffer{}}
		nd.fail = filepath.Join(t.TempDir(), "fail-writes")
		nd.env = append([]string{
			"PATH=" + os.Getenv("PATH"),
			"NODE_ID=" + nd.id,
			"BIND_ADDRESS=" + nd.client(),
			"WEB_ADDRESS=" + nd.web(),
			"RAFT_ADDRESS=" + nd.ip + ":" + raftPort,
			"CLUSTER_PEERS=" + strings.Join(peers, ","),
			"CLUSTER_TOKEN=" + token,
			"RAFT_DIR=" + nd.dir,
			"MAX_CONNECTIONS_PER_PEER=-1", // every client comes from the bridge's one address
			"LC_RAFT_FAIL_WRITES=" + nd.fail,
		}, env...)
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		nd.start(t)
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.kill()
		}
		if t.Failed() {
			for _, nd := range c.nodes {
				t.Logf("--- log of %s:\n%s", nd.id, tail(nd.log.String(), 200))
			}
		}
	})
	c.awaitLeader(c.nodes, 30*time.Second)
	return c
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// start runs the node and returns once it has logged its start line.
func (nd *node) start(t testing.TB) {
	t.Helper()
	nd.mu.Lock()
	cmd := exec.Command("ip", "netns", "exec", nd.ns, nd.bin)
	cmd.Env = append(append([]string(nil), nd.env...), nd.extra...)
	// A harness killed before its cleanup takes its nodes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	nd.extra = nil
	pipe, err := cmd.StderrPipe()
	if err != nil {
		nd.mu.Unlock()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		nd.mu.Unlock()
		t.Fatalf("start %s: %v", nd.id, err)
	}
	done := make(chan struct{})
	nd.cmd, nd.done, nd.exitErr, nd.paused = cmd, done, nil, false
	nd.mu.Unlock()
	started := make(chan struct{}, 1)
	go func() { // ends when the process has exited and its stderr closed
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(nd.log, line)
			if strings.Contains(line, "locking-center started") {
				select {
				case started <- struct{}{}:
				default:
				}
			}
		}
		err := cmd.Wait()
		nd.mu.Lock()
		nd.exitErr = err
		nd.mu.Unlock()
		close(done)
	}()
	select {
	case <-started:
	case <-done:
		t.Fatalf("%s exited before it listened (%v):\n%s", nd.id, nd.exitErr, tail(nd.log.String(), 50))
	case <-time.After(30 * time.Second):
		nd.kill()
		t.Fatalf("%s did not start in 30 s:\n%s", nd.id, tail(nd.log.String(), 50))
	}
}

// running reports whether the process is up (paused counts as up).
func (nd *node) running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.done == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the node's PID and, for SIGKILL and SIGTERM, waits
// for the exit. A node not running is left alone.
func (nd *node) signal(sig syscall.Signal) {
	nd.mu.Lock()
	cmd, done := nd.cmd, nd.done
	if cmd == nil || done == nil {
		nd.mu.Unlock()
		return
	}
	select {
	case <-done:
		nd.mu.Unlock()
		return
	default:
	}
	switch sig {
	case syscall.SIGSTOP:
		nd.paused = true
	case syscall.SIGCONT:
		nd.paused = false
	}
	_ = cmd.Process.Signal(sig)
	nd.mu.Unlock()
	switch sig {
	case syscall.SIGKILL:
		<-done
	case syscall.SIGTERM:
		select {
		case <-done:
		case <-time.After(stopPatience):
			// Stuck: SIGQUIT makes the Go runtime write every
			// goroutine's stack to the log before it exits, for a
			// reader of the test's output to see where.
			_ = cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
	}
}

// stopPatience is how long a node may take to stop on SIGTERM before it
// is made to dump its goroutines (SIGQUIT) and killed.
const stopPatience = 12 * time.Second

// kill is kill -9 (a paused node too).
func (nd *node) kill() { nd.signal(syscall.SIGKILL) }

// status is what GET /api/v1/cluster answers.
type status struct {
	Node         string   `json:"node"`
	State        string   `json:"state"`
	LeaderID     string   `json:"leader_id"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Nodes        []member `json:"nodes"`
}

// member is one node of the configuration in a status.
type member struct {
	ID       string `json:"id"`
	Suffrage string `json:"suffrage"`
}

// voters returns the ids of the configuration's voters, and whether id
// is one of them.
func (st status) voters(id string) (n int, isVoter bool) {
	for _, m := range st.Nodes {
		if m.Suffrage == "voter" {
			n++
			isVoter = isVoter || m.ID == id
		}
	}
	return n, isVoter
}

var httpc = http.Client{Timeout: time.Second}

func (nd *node) status() (status, error) {
	var st status
	resp, err := httpc.Get("http://" + nd.web() + "/api/v1/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: status %s", nd.id, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (nd *node) ready() bool {
	resp, err := httpc.Get("http://" + nd.web() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// awaitLeader waits until every node of live is ready and they agree on
// a leader among them, and returns it.
func (c *cluster) awaitLeader(live []*node, within time.Duration) *node {
	c.t.Helper()
	nd, err := c.leaderWithin(live, within)
	if err != nil {
		c.t.Fatal(err)
	}
	return nd
}

// leaderWithin is awaitLeader that returns its failure.
func (c *cluster) leaderWithin(live []*node, within time.Duration) (*node, error) {
	deadline := time.Now().Add(within)
	for {
		var leader *node
		agreed := true
		var lead string
		for _, nd := range live {
			st, err := nd.status()
			if err != nil || !nd.ready() || st.LeaderID == "" || (lead != "" && st.LeaderID != lead) {
				agreed = false
				break
			}
			lead = st.LeaderID
			if st.State == "leader" {
				leader = nd
			}
		}
		if agreed && leader != nil {
			return leader, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader agreed on by %d nodes within %v", len(live), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// others returns the nodes but skip.
func (c *cluster) others(skip ...*node) []*node {
	var out []*node
	for _, nd := range c.nodes {
		keep := true
		for _, s := range skip {
			keep = keep && nd != s
		}
		if keep {
			out = append(out, nd)
		}
	}
	return out
}
