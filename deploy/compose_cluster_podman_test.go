package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
)

// This file runs docker-compose.cluster.yml for real on podman, as
// podman_test.go runs docker-compose.yml (the same storage of its own, the
// builder image from deploy/make-go-image.sh, runc, the compose file's own
// ulimits), and kills nodes under a Go client session.

// clusterStack is docker-compose.cluster.yml's stack under test.
type clusterStack struct {
	*podmanStack
	lock, web map[string]string // service → its published lock and web port
}

func newClusterStack(t *testing.T) *clusterStack {
	s := newPodmanStackOf(t, composeClusterFile, "lc-clustertest-",
		[]string{"lc1-raft", "lc2-raft", "lc3-raft"})
	c := &clusterStack{podmanStack: s, lock: map[string]string{}, web: map[string]string{}}
	for _, n := range clusterServices {
		c.lock[n], c.web[n] = freePort(t), freePort(t)
		up := strings.ToUpper(n)
		s.env = append(s.env, up+"_LOCK_PORT="+c.lock[n], up+"_WEB_PORT="+c.web[n])
	}
	s.env = append(s.env, "CLUSTER_TOKEN="+testClusterToken, "WEB_PASSWORD="+s.password)
	return c
}

// clusterView is the part of GET /api/v1/cluster the test reads.
type clusterView struct {
	Node     string `json:"node"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     uint64 `json:"term"`
}

func (c *clusterStack) view(node string) (clusterView, error) {
	var v clusterView
	req, err := http.NewRequest(http.MethodGet, "http://"+c.web[node]+"/api/v1/cluster", nil)
	if err != nil {
		return v, err
	}
	req.SetBasicAuth("admin", c.password)
	hc := http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /api/v1/cluster on %s: %s", node, resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

func (c *clusterStack) ready(node string) bool {
	hc := http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Get("http://" + c.web[node] + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// awaitLeader waits until every node of live is ready and they name the
// same leader, one of them, and returns it.
func (c *clusterStack) awaitLeader(live []string, within time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		leader, agreed := "", true
		for _, n := range live {
			v, err := c.view(n)
			if err != nil || !c.ready(n) || v.LeaderID == "" || (leader != "" && v.LeaderID != leader) {
				agreed = false
				break
			}
			leader = v.LeaderID
		}
		if agreed && slices.Contains(live, leader) {
			return leader
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("nodes %v agreed on no leader among them within %v\n%s", live, within, c.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// nodeAt names the service whose lock port is addr.
func (c *clusterStack) nodeAt(addr string) string {
	for n, a := range c.lock {
		if a == addr {
			return n
		}
	}
	return addr
}

func (c *clusterStack) logs() string {
	var b strings.Builder
	for _, n := range clusterServices {
		out, _ := c.try("podman", "logs", "--tail", "40", c.serviceContainer(n))
		fmt.Fprintf(&b, "--- %s:\n%s\n", n, out)
	}
	return b.String()
}

// TestComposeClusterOnPodman brings docker-compose.cluster.yml up for real
// and checks what SPEC §8.7 and docs/cluster.md promise a user: three nodes
// elect one leader; v1 frames work through every node's published lock
// port; and a Go client session holding keys through one node goes on
// through another after that node's container is killed (podman kill, a
// SIGKILL) — first a follower's, then the leader's — with every hold kept
// under its token. The client reaches the nodes through a TCP balancer in
// the test, as a user's load balancer over the three ports would: it hands
// each new connection to the first node that accepts it, and takes a killed
// node out, as a health-checked balancer does.
func TestComposeClusterOnPodman(t *testing.T) {
	c := newClusterStack(t)
	c.run("go", "mod", "download") // the build reads the module cache, not the network
	c.makeGoImage()
	start := time.Now()
	c.composeRun("up", "-d", "--build")
	t.Logf("compose up --build: %v", time.Since(start).Round(time.Second))
	leader := c.awaitLeader(clusterServices, 120*time.Second)
	t.Logf("leader: %s, %v after compose up", leader, time.Since(start).Round(time.Second))

	t.Run("v1 through every node", func(t *testing.T) {
		for i, n := range clusterServices {
			key := "v1/" + n
			other := clusterServices[(i+1)%3]
			third := clusterServices[(i+2)%3]
			if a, err := lockRequest(c.lock[n], actionTryLock, key); err != nil || a != '+' {
				t.Fatalf("TryLock %s through %s: %q, %v; want '+'\n%s", key, n, a, err, c.logs())
			}
			if a, err := lockRequest(c.lock[other], actionTryLock, key); err != nil || a != '#' {
				t.Errorf("TryLock %s through %s while held: %q, %v; want '#'", key, other, a, err)
			}
			if a, err := lockRequest(c.lock[third], actionUnlock, key); err != nil || a != '+' {
				t.Errorf("Unlock %s through %s: %q, %v; want '+'", key, third, a, err)
			}
		}
	})

	lb := newBalancer(t)
	defer lb.close()
	for _, victimRole := range []string{"follower", "leader"} {
		t.Run("session survives kill of its node, a "+victimRole, func(t *testing.T) {
			leader := c.awaitLeader(clusterServices, 60*time.Second)
			victim := leader
			if victimRole == "follower" {
				victim = clusterServices[(slices.Index(clusterServices, leader)+1)%3]
			}
			var others []string
			for _, n := range clusterServices {
				if n != victim {
					others = append(others, n)
				}
			}
			lb.route(append([]string{c.lock[victim]}, c.lock[others[0]], c.lock[others[1]]))
			c.sessionAcrossKill(t, lb, victim, others, victimRole == "leader")
		})
	}
}

// sessionAcrossKill opens a session through the balancer (which sends it
// to victim), holds keys, kills victim's container, and checks that the
// session goes on through another node with its holds and tokens; then
// starts victim again and waits for the three to agree on a leader.
func (c *clusterStack) sessionAcrossKill(t *testing.T, lb *balancer, victim string, others []string, leader bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sess, err := client.NewSession(ctx, lb.addr(), client.WithTTL(20*time.Second), client.WithSource("compose-test"))
	if err != nil {
		t.Fatalf("session through %s: %v\n%s", victim, err, c.logs())
	}
	defer sess.Close(context.Background())
	if got := lb.last(); got != c.lock[victim] {
		t.Fatalf("the session went to %s, want %s (%s)", got, victim, c.lock[victim])
	}
	tokens := map[string]uint64{}
	for i := range 5 {
		key := fmt.Sprintf("held/%s/%d", victim, i)
		tok, err := sess.Lock(ctx, key)
		if err != nil {
			t.Fatalf("Lock %s through %s: %v", key, victim, err)
		}
		tokens[key] = tok
	}

	killed := time.Now()
	c.run("podman", "kill", c.serviceContainer(victim))
	lb.down(c.lock[victim])
	var back time.Duration
	for i := 0; ; i++ {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		key := fmt.Sprintf("probe/%s/%d", victim, i)
		tok, err := sess.TryLock(pctx, key)
		pcancel()
		if err == nil {
			back = time.Since(killed)
			if err := sess.Unlock(ctx, key, tok); err != nil {
				t.Fatalf("Unlock %s: %v", key, err)
			}
			break
		}
		if ctx.Err() != nil || sess.Err() != nil {
			t.Fatalf("the session did not work again after podman kill of %s: %v (session: %v)\n%s", victim, err, sess.Err(), c.logs())
		}
	}
	through := lb.last()
	if through == c.lock[victim] {
		t.Fatalf("the session came back through the killed node %s", victim)
	}
	t.Logf("podman kill of %s → the session works again through %s: %v", victim, c.nodeAt(through), back.Round(time.Millisecond))
	if leader {
		nl := c.awaitLeader(others, 60*time.Second)
		t.Logf("new leader %s", nl)
	}

	// Every hold is still the session's, under its token: a v1 TryLock
	// through each live node is refused, and Unlock by the token works.
	for key, tok := range tokens {
		for _, n := range others {
			if a, err := lockRequest(c.lock[n], actionTryLock, key); err != nil || a != '#' {
				t.Errorf("TryLock %s through %s after the kill: %q, %v; want '#' (the session holds it)", key, n, a, err)
			}
		}
		if err := sess.Unlock(ctx, key, tok); err != nil {
			t.Errorf("Unlock %s by its token %d after the kill: %v", key, tok, err)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Errorf("session close: %v", err)
	}

	// The killed node comes back (restart: unless-stopped may have
	// restarted it already) from its volume and rejoins.
	ctr := c.serviceContainer(victim)
	if state := strings.TrimSpace(c.run("podman", "container", "inspect", "--format", "{{.State.Status}}", ctr)); state != "running" {
		c.run("podman", "start", ctr)
	}
	lb.up(c.lock[victim])
	c.awaitLeader(clusterServices, 90*time.Second)
}

// balancer is a TCP balancer on a loopback port, standing in for a user's
// load balancer in front of the three lock ports: each connection goes to
// the first backend, in the order route gave, that is not down and accepts
// it. Its goroutines end at close.
type balancer struct {
	t  *testing.T
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	backends []string
	isDown   map[string]bool
	lastTo   string
	conns    map[net.Conn]struct{}
}

func newBalancer(t *testing.T) *balancer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{t: t, ln: ln, isDown: map[string]bool{}, conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	return b
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) route(backends []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends = slices.Clone(backends)
}

func (b *balancer) down(backend string) { b.mu.Lock(); b.isDown[backend] = true; b.mu.Unlock() }
func (b *balancer) up(backend string)   { b.mu.Lock(); delete(b.isDown, backend); b.mu.Unlock() }

// last is the backend of the latest connection.
func (b *balancer) last() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastTo
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return // closed
		}
		if !b.track(c) {
			c.Close()
			return
		}
		b.wg.Go(func() { b.relay(c) })
	}
}

// track adds c to the open connections, unless the balancer is closing.
func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) untrack(c net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
	c.Close()
}

func (b *balancer) relay(c net.Conn) {
	defer b.untrack(c)
	b.mu.Lock()
	var order []string
	for _, be := range b.backends {
		if !b.isDown[be] {
			order = append(order, be)
		}
	}
	b.mu.Unlock()
	var up net.Conn
	var err error
	for _, be := range order {
		if up, err = net.DialTimeout("tcp", be, 2*time.Second); err == nil {
			b.mu.Lock()
			b.lastTo = be
			b.mu.Unlock()
			break
		}
	}
	if up == nil || !b.track(up) {
		if up != nil {
			up.Close()
		}
		return
	}
	defer b.untrack(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyClose(up, c)
	}()
	copyClose(c, up)
	<-done
}

// copyClose copies src to dst until either ends, then closes both, so
// that the other direction's copy ends too.
func copyClose(dst, src net.Conn) {
	// An error is how a killed node's connections end: nothing to report.
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}
