// Command testcluster is a test fixture for the clients' suites: it runs
// a 3-node cluster of the real server and two TLS servers on loopback, and
// lets a test kill the leader and bring it back through a small HTTP
// control API. clients/run-tests starts it once and hands its addresses to
// every clients/<language>/test.sh; it is for tests only.
//
// Usage:
//
//	testcluster -bin SERVER -env FILE [-nodes 3] [-dir DIR] [-stdin]
//
// SERVER must be built with -tags failpoints (the leader's lost-answer
// fault). Once everything is up, testcluster writes FILE, one NAME=value
// line per variable, and runs until SIGTERM or SIGINT (or, with -stdin,
// the end of its standard input); then it stops every process it started, by PID, and
// removes what it wrote.
//
// The variables:
//
//	LC_TEST_CLUSTER             the nodes' client ports, "host:port,host:port,…"
//	LC_TEST_CLUSTER_CONTROL     host:port of the control API
//	LC_TEST_LOST_ANSWER_PREFIX  a grant of a key with this prefix kills the leader
//	                            after it commits, before its answer
//	LC_TEST_TLS_ADDRESS         a TLS server
//	LC_TEST_MTLS_ADDRESS        a TLS server that wants a client certificate
//	LC_TEST_TLS_DIR             ca.pem, client.pem, client-key.pem, other-ca.pem
//
// The control API (JSON answers):
//
//	GET  /nodes         {"leader":id,"nodes":[{"id","address","web","up","leader"}]}
//	POST /kill-leader   kill -9 of the leader: {"killed":id,"address":…}
//	POST /restart       start every killed node again, await a leader; as /nodes
//	POST /await-leader  await a leader (20 s at most); as /nodes
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clusterToken is the fixture's CLUSTER_TOKEN; nothing secret is guarded.
const clusterToken = "testcluster-token-0123456789"

// lostAnswerPrefix is LC_TEST_LOST_ANSWER_PREFIX for every node.
const lostAnswerPrefix = "lost-answer-"

func main() {
	bin := flag.String("bin", "", "the server binary, built with -tags failpoints")
	envFile := flag.String("env", "", "where to write the NAME=value lines once ready")
	n := flag.Int("nodes", 3, "how many cluster nodes")
	dir := flag.String("dir", "", "a folder for the nodes' state and logs (default: a new temporary one, removed at the end)")
	watchStdin := flag.Bool("stdin", false, "also stop at the end of standard input (for a parent that holds a pipe)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("fixture", "testcluster")
	if *bin == "" || *envFile == "" {
		fmt.Fprintln(os.Stderr, "usage: testcluster -bin SERVER -env FILE [-nodes 3] [-dir DIR] [-stdin]")
		os.Exit(2)
	}
	if err := run(log, *bin, *envFile, *n, *dir, *watchStdin); err != nil {
		log.Error("testcluster failed", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, bin, envFile string, n int, dir string, watchStdin bool) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "testcluster-")
		if err != nil {
			return fmt.Errorf("work folder: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	f := &fixture{bin: bin, dir: dir, log: log}
	defer f.stopAll()

	tlsDir := filepath.Join(dir, "tls")
	if err := writeCerts(tlsDir); err != nil {
		return err
	}
	if err := f.startCluster(n); err != nil {
		return err
	}
	tlsAddr, err := f.startTLS("tls", tlsDir, false)
	if err != nil {
		return err
	}
	mtlsAddr, err := f.startTLS("mtls", tlsDir, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = f.awaitLeader(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("the cluster elected no leader: %w\n%s", err, f.logTails())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("control listener: %w", err)
	}
	srv := &http.Server{Handler: f.routes(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }() // ends at srv.Close below

	var addrs []string
	for _, nd := range f.nodes {
		addrs = append(addrs, nd.addr)
	}
	env := strings.Join([]string{
		"LC_TEST_CLUSTER=" + strings.Join(addrs, ","),
		"LC_TEST_CLUSTER_CONTROL=" + ln.Addr().String(),
		"LC_TEST_LOST_ANSWER_PREFIX=" + lostAnswerPrefix,
		"LC_TEST_TLS_ADDRESS=" + tlsAddr,
		"LC_TEST_MTLS_ADDRESS=" + mtlsAddr,
		"LC_TEST_TLS_DIR=" + tlsDir,
	}, "\n") + "\n"
	if err := os.WriteFile(envFile+".tmp", []byte(env), 0o644); err != nil {
		return fmt.Errorf("env file: %w", err)
	}
	if err := os.Rename(envFile+".tmp", envFile); err != nil {
		return fmt.Errorf("env file: %w", err)
	}
	defer os.Remove(envFile)
	log.Info("ready", "cluster", strings.Join(addrs, ","), "control", ln.Addr().String())

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	if watchStdin {
		go func() { // ends with standard input, or with the process
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(eof)
		}()
	}
	select {
	case <-stop:
	case <-eof:
	case err := <-served:
		return fmt.Errorf("control server: %w", err)
	}
	srv.Close()
	return nil
}

// fixture owns the processes it started.
type fixture struct {
	bin, dir string
	log      *slog.Logger

	mu    sync.Mutex // guards nodes' processes and singles; one control call at a time
	nodes []*node
	other []*exec.Cmd
}

// node is one cluster node; cmd is nil while it is down.
type node struct {
	id, addr, web, raft, raftDir, logPath string
	env                                   []string
	cmd                                   *exec.Cmd
	exited                                chan struct{}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (f *fixture) startCluster(n int) error {
	var peers []string
	for i := range n {
		nd := &node{id: fmt.Sprintf("n%d", i+1)}
		for _, p := range []*string{&nd.addr, &nd.web, &nd.raft} {
			a, err := freePort()
			if err != nil {
				return err
			}
			*p = a
		}
		nd.raftDir = filepath.Join(f.dir, nd.id)
		nd.logPath = filepath.Join(f.dir, nd.id+".log")
		peers = append(peers, nd.id+"="+nd.raft)
		f.nodes = append(f.nodes, nd)
	}
	for _, nd := range f.nodes {
		nd.env = []string{"NODE_ID=" + nd.id, "BIND_ADDRESS=" + nd.addr, "WEB_ADDRESS=" + nd.web,
			"RAFT_ADDRESS=" + nd.raft, "RAFT_DIR=" + nd.raftDir, "CLUSTER_TOKEN=" + clusterToken,
			"CLUSTER_PEERS=" + strings.Join(peers, ","), "LC_TEST_LOST_ANSWER_PREFIX=" + lostAnswerPrefix}
		if err := f.start(nd); err != nil {
			return err
		}
	}
	return nil
}

func (f *fixture) start(nd *node) error {
	out, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %s log: %w", nd.id, err)
	}
	cmd := exec.Command(f.bin)
	cmd.Env = append(os.Environ(), nd.env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start node %s: %w", nd.id, err)
	}
	nd.cmd, nd.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { // reaps the process; ends when it exits
		_ = cmd.Wait()
		out.Close()
		close(done)
	}(nd.exited)
	return nil
}

// startTLS starts a single memory-only TLS server and waits until its
// lock port accepts connections.
func (f *fixture) startTLS(name, tlsDir string, mutual bool) (string, error) {
	addr, err := freePort()
	if err != nil {
		return "", err
	}
	web, err := freePort()
	if err != nil {
		return "", err
	}
	out, err := os.Create(filepath.Join(f.dir, name+".log"))
	if err != nil {
		return "", fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(f.bin)
	cmd.Env = append(os.Environ(), "BIND_ADDRESS="+addr, "WEB_ADDRESS="+web,
		"TLS_CERT="+filepath.Join(tlsDir, "server.pem"), "TLS_KEY="+filepath.Join(tlsDir, "server-key.pem"))
	if mutual {
		cmd.Env = append(cmd.Env, "TLS_CLIENT_CA="+filepath.Join(tlsDir, "ca.pem"))
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return "", fmt.Errorf("start %s server: %w", name, err)
	}
	f.other = append(f.other, cmd)
	go func() { _ = cmd.Wait(); out.Close() }() // reaps the process; ends when it exits
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return addr, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s server does not listen on %s: %w", name, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// status is what the fixture reads of a node's /api/v1/cluster.
type status struct {
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
}

func nodeStatus(web string) (status, error) {
	var st status
	hc := http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + web + "/api/v1/cluster")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /api/v1/cluster: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (nd *node) up() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.exited:
		return false
	default:
		return true
	}
}

// leader is the node that says it leads and that every other live node
// names as its leader, or nil.
func (f *fixture) leader() *node {
	var lead *node
	ids := map[string]bool{}
	for _, nd := range f.nodes {
		if !nd.up() {
			continue
		}
		st, err := nodeStatus(nd.web)
		if err != nil {
			return nil
		}
		if st.State == "leader" {
			lead = nd
		}
		ids[st.LeaderID] = true
	}
	if lead == nil || len(ids) != 1 || !ids[lead.id] {
		return nil
	}
	return lead
}

func (f *fixture) awaitLeader(ctx context.Context) (*node, error) {
	for {
		if l := f.leader(); l != nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// view is the answer of /nodes.
type view struct {
	Leader string     `json:"leader"`
	Nodes  []nodeView `json:"nodes"`
}

type nodeView struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Web     string `json:"web"`
	Up      bool   `json:"up"`
	Leader  bool   `json:"leader"`
}

func (f *fixture) view() view {
	var v view
	if l := f.leader(); l != nil {
		v.Leader = l.id
	}
	for _, nd := range f.nodes {
		v.Nodes = append(v.Nodes, nodeView{ID: nd.id, Address: nd.addr, Web: nd.web, Up: nd.up(), Leader: nd.id == v.Leader})
	}
	return v
}

func (f *fixture) routes() http.Handler {
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, v any, err error) {
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			v = map[string]string{"error": err.Error()}
		}
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("GET /nodes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		answer(w, f.view(), nil)
	})
	mux.HandleFunc("POST /await-leader", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		_, err := f.awaitLeader(ctx)
		answer(w, f.view(), err)
	})
	mux.HandleFunc("POST /kill-leader", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
		defer cancel()
		l, err := f.awaitLeader(ctx)
		if err != nil {
			answer(w, nil, fmt.Errorf("no leader to kill: %w", err))
			return
		}
		if err := l.cmd.Process.Kill(); err != nil {
			answer(w, nil, fmt.Errorf("kill -9 of %s: %w", l.id, err))
			return
		}
		<-l.exited
		f.log.Info("killed the leader", "node", l.id)
		answer(w, map[string]string{"killed": l.id, "address": l.addr}, nil)
	})
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, nd := range f.nodes {
			if !nd.up() {
				if err := f.start(nd); err != nil {
					answer(w, nil, err)
					return
				}
				f.log.Info("restarted", "node", nd.id)
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		_, err := f.awaitLeader(ctx)
		answer(w, f.view(), err)
	})
	return mux
}

// stopAll ends every process: SIGTERM, then SIGKILL after 10 s.
func (f *fixture) stopAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cmds []*exec.Cmd
	for _, nd := range f.nodes {
		if nd.up() {
			cmds = append(cmds, nd.cmd)
		}
	}
	cmds = append(cmds, f.other...)
	for _, c := range cmds {
		if c.Process != nil {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range cmds {
		for c.ProcessState == nil && time.Now().Before(deadline) && alive(c) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(c) {
			_ = c.Process.Kill()
		}
	}
}

// alive reports whether the process still exists (signal 0).
func alive(c *exec.Cmd) bool {
	if c.Process == nil {
		return false
	}
	err := c.Process.Signal(syscall.Signal(0))
	return err == nil
}

// logTails is the end of every node's log, for a failed start.
func (f *fixture) logTails() string {
	var b strings.Builder
	for _, nd := range f.nodes {
		fmt.Fprintf(&b, "--- %s (%s)\n", nd.id, nd.logPath)
		file, err := os.Open(nd.logPath)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
			continue
		}
		var lines []string
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		file.Close()
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		b.WriteString(strings.Join(lines, "\n") + "\n")
	}
	return b.String()
}
