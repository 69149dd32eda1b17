package client_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The session tests that need what only the whole server does (the JSON
// API, DATA_PATH, restarts) run the real binary, built once here.

var (
	buildOnce sync.Once
	serverBin string
	buildErr  error
	buildDir  string
)

// buildServer builds the server once per test run. The server is the
// repository root, the parent directory of this module, built as its own
// module (which takes this client module from ./client); the client
// module itself requires nothing of the server's.
func buildServer() (string, error) {
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lc-client-test-")
		if buildErr != nil {
			return
		}
		serverBin = filepath.Join(buildDir, "locking-center")
		cmd := exec.Command("go", "build", "-o", serverBin, ".")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build of the server in the parent directory: %v\n%s", err, out)
		}
	})
	return serverBin, buildErr
}

// realServer is a locking-center process on loopback ports.
type realServer struct {
	t         *testing.T // nil for an example's server, which uses no method that fails a test
	env       []string
	addr, web string
	cmd       *exec.Cmd
	logDone   chan struct{}
	// webTLS, when set, is how the tests reach a web port that speaks TLS.
	webTLS *tls.Config

	mu  sync.Mutex // guards log
	log bytes.Buffer
}

// startedRE reads the addresses off the start line, of a single server or
// of a cluster node.
var startedRE = regexp.MustCompile(`msg="locking-center started[^"]*".* bind=(\S+) web=(\S+)`)

// newRealServer returns a server, not started yet, whose environment adds
// env to this process's; bind and web addresses default to free loopback
// ports.
func newRealServer(env ...string) *realServer {
	return &realServer{env: append([]string{"BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=127.0.0.1:0"}, env...)}
}

// startReal starts the server with env added to its environment. It is
// stopped at the end of the test.
func startReal(t *testing.T, env ...string) *realServer {
	t.Helper()
	s := newRealServer(env...)
	s.t = t
	t.Cleanup(s.stop)
	s.start()
	return s
}

// start launches the server, failing the test when it does not listen.
func (s *realServer) start() {
	s.t.Helper()
	if err := s.launch(); err != nil {
		s.t.Fatal(err)
	}
}

// launch starts the process and waits for its "started" log line, which
// names the addresses it listens on.
func (s *realServer) launch() error {
	bin, err := buildServer()
	if err != nil {
		return err
	}
	s.logDone = make(chan struct{})
	s.cmd = exec.Command(bin)
	s.cmd.Env = append(os.Environ(), s.env...)
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("server stderr: %w", err)
	}
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil // nothing for stop to stop
		close(s.logDone)
		return fmt.Errorf("start server: %w", err)
	}
	addrs := make(chan []string, 1)
	done := s.logDone
	go func() { // ends when the server exits and its stderr closes
		defer close(done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			if m := startedRE.FindStringSubmatch(line); m != nil {
				addrs <- m[1:]
			}
		}
	}()
	select {
	case a := <-addrs:
		s.addr, s.web = a[0], a[1]
		return nil
	case <-done:
		return fmt.Errorf("server exited before it listened:\n%s", s.logText())
	case <-time.After(10 * time.Second):
		return fmt.Errorf("server did not start in 10s:\n%s", s.logText())
	}
}

func (s *realServer) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// stop sends SIGTERM, as in production, and waits for the exit.
func (s *realServer) stop() {
	if s.cmd == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.logDone
	_ = s.cmd.Wait()
}

// restart stops the server and starts it again on the same addresses.
func (s *realServer) restart() {
	s.t.Helper()
	s.stop()
	s.env = append(s.env, "BIND_ADDRESS="+s.addr, "WEB_ADDRESS="+s.web)
	s.start()
}

// startCluster starts three nodes of a cluster and returns them once one
// leads and the others know it.
func startCluster(t *testing.T) []*realServer {
	t.Helper()
	var raft, peers []string
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		raft = append(raft, l.Addr().String())
		l.Close()
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, raft[i]))
	}
	nodes := make([]*realServer, 3)
	for i := range nodes {
		nodes[i] = startReal(t, fmt.Sprintf("NODE_ID=n%d", i+1), "RAFT_ADDRESS="+raft[i], "CLUSTER_PEERS="+strings.Join(peers, ","),
			"CLUSTER_TOKEN=a-cluster-token-for-client-tests", "RAFT_DIR="+t.TempDir())
	}
	eventually(t, 30*time.Second, "a leader known to every node", func() bool {
		leaders := 0
		for _, nd := range nodes {
			resp, err := api.Get("http://" + nd.web + "/api/v1/cluster")
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
			if st.State == "leader" {
				leaders++
			}
		}
		return leaders == 1
	})
	return nodes
}

// apiKeyState is one key as GET /api/v1/keys/{key} shows it.
type apiKeyState struct {
	Key     string  `json:"key"`
	Source  string  `json:"source"`
	Token   uint64  `json:"token"`
	Session *string `json:"session"`
	Waiters int     `json:"waiters"`
	Queue   []struct {
		Source string `json:"source"`
	} `json:"queue"`
}

// key reads one key from the JSON API; nil when it is not held.
func (s *realServer) key(key string) *apiKeyState {
	s.t.Helper()
	hc, scheme := api, "http"
	if s.webTLS != nil {
		tr := &http.Transport{TLSClientConfig: s.webTLS}
		defer tr.CloseIdleConnections()
		hc, scheme = &http.Client{Transport: tr, Timeout: api.Timeout}, "https"
	}
	resp, err := hc.Get(scheme + "://" + s.web + "/api/v1/keys/" + url.PathEscape(key))
	if err != nil {
		s.t.Fatalf("JSON API: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil
	case http.StatusOK:
	default:
		s.t.Fatalf("GET key %s: %s %s", key, resp.Status, body)
	}
	var k apiKeyState
	if err := json.Unmarshal(body, &k); err != nil {
		s.t.Fatalf("decode %s: %v", body, err)
	}
	return &k
}

// waiters returns the length of key's queue (-1: not held).
func (s *realServer) waiters(key string) int {
	s.t.Helper()
	k := s.key(key)
	if k == nil {
		return -1
	}
	return len(k.Queue)
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// proxy stands between a session and the server, so that a test can cut
// the connection, or keep the server out of reach, at will.
type proxy struct {
	l      net.Listener
	wg     sync.WaitGroup // the accept loop and every copier
	mu     sync.Mutex     // guards target, down, lose, conns
	target string
	down   bool
	// lose, set by loseFirstAnswer, makes the next connection pass the
	// server's first 13 bytes (a session's open answer) and then cut
	// everything, and the proxy go down, on the first byte after them:
	// the answer to the first request is lost.
	lose  bool
	conns map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		l.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.l.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down, target, lose := p.down, p.target, p.lose
		p.lose = false
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(s, c) })
		if lose {
			p.wg.Go(func() { p.loseAnswer(c, s) })
			continue
		}
		p.wg.Go(func() { pipe(c, s) })
	}
}

// loseFirstAnswer arranges for the answer to the first request on the
// next connection to be lost with it (see lose).
func (p *proxy) loseFirstAnswer() {
	p.mu.Lock()
	p.lose = true
	p.mu.Unlock()
}

// loseAnswer forwards the open answer from s to c, then, at the first
// byte of the next answer, goes down and cuts every connection.
func (p *proxy) loseAnswer(c, s net.Conn) {
	var open [13]byte
	if _, err := io.ReadFull(s, open[:]); err == nil {
		_, err = c.Write(open[:])
		if err == nil {
			var b [1]byte
			_, _ = s.Read(b[:])
		}
	}
	p.setDown(true)
	p.cut()
}

// cut closes every connection through the proxy.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// setDown makes the proxy hang up every new connection (down) or forward
// them again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}
