package main

// The Go client (module client/) against a real 3-node cluster: an address
// list, a follower's address alone, a dead address in the list, a DNS name
// with several records, a kill -9 of the leader under a session that
// holds and waits, and a Lock whose answer the leader never sends.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/internal/lctest"
	"github.com/locking-center/locking-center/web/api"
)

// startClusterOf starts len(bind) nodes of binary bin; bind[i], if not
// empty, is node i's BIND_ADDRESS. env is added to every node's.
func startClusterOf(t *testing.T, bin string, bind []string, env ...string) []*clusterNode {
	t.Helper()
	nodes := make([]*clusterNode, len(bind))
	var peers []string
	for i := range nodes {
		nodes[i] = &clusterNode{id: fmt.Sprintf("n%d", i+1), raft: lctest.FreePort(t), dir: t.TempDir()}
		peers = append(peers, nodes[i].id+"="+nodes[i].raft)
	}
	for i, nd := range nodes {
		e := append([]string{"NODE_ID=" + nd.id, "RAFT_ADDRESS=" + nd.raft, "CLUSTER_PEERS=" + strings.Join(peers, ","),
			"CLUSTER_TOKEN=" + testClusterToken, "RAFT_DIR=" + nd.dir}, env...)
		if bind[i] != "" {
			e = append(e, "BIND_ADDRESS="+bind[i])
		}
		nd.process = lctest.StartBinary(t, bin, e...)
	}
	return nodes
}

func addrList(nodes []*clusterNode) string {
	var a []string
	for _, nd := range nodes {
		a = append(a, nd.Addr)
	}
	return strings.Join(a, ",")
}

func others(nodes []*clusterNode, not *clusterNode) []*clusterNode {
	var out []*clusterNode
	for _, nd := range nodes {
		if nd != not {
			out = append(out, nd)
		}
	}
	return out
}

// heldKey reads key from node web's JSON API (?consistent=1, for a
// follower that forwards reads); nil when it is not held.
func heldKey(t *testing.T, web, key string) *api.KeyDetail {
	t.Helper()
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + web + "/api/v1/keys/" + key + "?consistent=1")
	if err != nil {
		t.Fatalf("GET key %s: %v", key, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil
	case http.StatusOK:
	default:
		t.Fatalf("GET key %s at %s: %s", key, web, resp.Status)
	}
	var k api.KeyDetail
	if err := json.NewDecoder(resp.Body).Decode(&k); err != nil {
		t.Fatal(err)
	}
	return &k
}

// workAgain returns how long after since the session s grants a probe key
// again, retrying TryLock with a short timeout each until ctx ends.
func workAgain(t *testing.T, ctx context.Context, s *client.Session, since time.Time) time.Duration {
	t.Helper()
	for i := 0; ; i++ {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		key := fmt.Sprintf("probe-%d", i)
		tok, err := s.TryLock(pctx, key)
		cancel()
		if err == nil {
			back := time.Since(since)
			if err := s.Unlock(ctx, key, tok); err != nil {
				t.Fatalf("Unlock of the probe: %v", err)
			}
			return back
		}
		if s.Err() != nil || ctx.Err() != nil {
			t.Fatalf("the session did not work again: %v (session: %v)", err, s.Err())
		}
	}
}

// TestClusterClientSessionSurvivesLeaderKill: a session given the three
// addresses holds 10 keys and waits on 10 more (held by a second session);
// the leader is killed -9. The session resumes through another node: its
// holds are kept with their tokens, its waits are reissued and granted, in
// the order the keys are released, with tokens above the ones before, and
// no key is ever granted to both sessions at once.
func TestClusterClientSessionSurvivesLeaderKill(t *testing.T) {
	nodes := startClusterOf(t, lctest.Binary(t), make([]string, 3))
	leader := awaitLeader(t, nodes, 20*time.Second)
	list := addrList(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(name string) *client.Session {
		s, err := client.NewSession(ctx, list, client.WithTTL(10*time.Second), client.WithSource(name))
		if err != nil {
			t.Fatalf("session %s through %s: %v", name, list, err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	}
	s1, s2 := open("s1"), open("s2")
	g := &grants{held: map[string]string{}}
	holds := map[string]uint64{}
	for i := range 10 {
		key := fmt.Sprintf("hold-%d", i)
		tok, err := s1.Lock(ctx, key)
		if err != nil {
			t.Fatalf("Lock %s: %v", key, err)
		}
		g.grant(key, "s1")
		holds[key] = tok
	}
	theirs := map[string]uint64{}
	for i := range 10 {
		key := fmt.Sprintf("wait-%d", i)
		tok, err := s2.Lock(ctx, key)
		if err != nil {
			t.Fatalf("s2 Lock %s: %v", key, err)
		}
		g.grant(key, "s2")
		theirs[key] = tok
	}
	type granted struct {
		key   string
		token uint64
		err   error
	}
	waits := make(chan granted, 10)
	var wg sync.WaitGroup
	for i := range 10 {
		key := fmt.Sprintf("wait-%d", i)
		wg.Go(func() {
			tok, err := s1.Lock(ctx, key)
			if err == nil {
				g.grant(key, "s1")
			}
			waits <- granted{key, tok, err}
		})
	}
	defer wg.Wait()
	for i := range 10 {
		waitLeaderQueue(t, leader.Web, fmt.Sprintf("wait-%d", i), 1)
	}

	killed := time.Now()
	leader.kill(t)
	back := workAgain(t, ctx, s1, killed)
	t.Logf("kill -9 of the leader → the session through the address list works again: %v", back.Round(time.Millisecond))
	live := others(nodes, leader)
	newLeader := awaitLeader(t, live, 20*time.Second)

	for key, tok := range holds {
		k := heldKey(t, newLeader.Web, key)
		if k == nil || k.Token != tok || k.Session == nil || *k.Session != fmt.Sprintf("%016x", s1.ID()) {
			t.Fatalf("%s after the failover: %+v; want s1's hold under token %d", key, k, tok)
		}
	}
	select {
	case w := <-waits:
		t.Fatalf("a wait was answered while s2 holds its key: %+v", w)
	default:
	}
	// The reissued waits are queued again on the new leader.
	for i := range 10 {
		waitLeaderQueue(t, newLeader.Web, fmt.Sprintf("wait-%d", i), 1)
	}
	// s2 releases the keys one by one; each goes to s1's wait, in that
	// order, under a token above every one before.
	var last uint64
	for _, tok := range holds {
		last = max(last, tok)
	}
	for i := range 10 {
		key := fmt.Sprintf("wait-%d", i)
		g.releasing(key)
		if err := s2.Unlock(ctx, key, theirs[key]); err != nil {
			t.Fatalf("s2 Unlock %s after the failover: %v", key, err)
		}
		select {
		case w := <-waits:
			if w.err != nil || w.key != key {
				t.Fatalf("after the release of %s: %+v", key, w)
			}
			if w.token <= last || w.token <= theirs[key] {
				t.Fatalf("%s granted under token %d, not above %d (the last before) and %d (s2's)", key, w.token, last, theirs[key])
			}
			last = w.token
		case <-ctx.Done():
			t.Fatalf("s1's wait for %s was not granted after its release\n%s", key, newLeader.Logs())
		}
	}
	for key, tok := range holds {
		g.releasing(key)
		if err := s1.Unlock(ctx, key, tok); err != nil {
			t.Fatalf("Unlock %s by its token after the failover: %v", key, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.errs) > 0 {
		t.Fatalf("double grants: %v", g.errs)
	}
}

// TestClusterClientLostAnswerFoundByReissue: the leader (a failpoints
// build) kills itself after a grant has committed and before its '+' is
// sent. A session's Lock, then its TryLock (the killed node restarted in
// between), resume through another node and reissue with their ids: each
// gets its grant's token at once, and does not wait behind its own hold.
// A v1 Lock lost that way returns ErrOutcomeUnknown and is not sent again:
// its grant stays held by nobody who knows (SPEC §8.5), and nobody waits.
func TestClusterClientLostAnswerFoundByReissue(t *testing.T) {
	const prefix = "lost-answer-"
	nodes := startClusterOf(t, lctest.Binary(t, "failpoints"), make([]string, 3), "LC_TEST_LOST_ANSWER_PREFIX="+prefix)
	awaitLeader(t, nodes, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := client.NewSession(ctx, addrList(nodes), client.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	// lose runs op on key, finds the node that killed itself, checks the
	// grant on the new leader, starts the killed node again and returns
	// op's outcome.
	lose := func(key string, op func() (uint64, error)) (uint64, error) {
		t.Helper()
		start := time.Now()
		tok, err := op()
		took := time.Since(start)
		var killed *clusterNode
		deadline := time.Now().Add(10 * time.Second)
		for killed == nil && time.Now().Before(deadline) {
			for _, nd := range nodes {
				if strings.Contains(nd.Logs(), "failpoint lost-answer "+key) {
					killed = nd
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if killed == nil {
			t.Fatalf("%s: no node logged the failpoint: the answer was not lost", key)
		}
		<-killed.Exited()
		newLeader := awaitLeader(t, others(nodes, killed), 20*time.Second)
		k := heldKey(t, newLeader.Web, key)
		killed.Restart(t)
		awaitLeader(t, nodes, 20*time.Second)
		if k == nil || k.Waiters != 0 {
			t.Fatalf("%s on the new leader: %+v; want held, nobody waiting", key, k)
		}
		if err == nil && k.Token != tok {
			t.Fatalf("%s: the reissue returned token %d, the grant is %d", key, tok, k.Token)
		}
		t.Logf("%s: its '+' lost with the leader (%s) → %v", key, killed.id, took.Round(time.Millisecond))
		return tok, err
	}
	for _, tc := range []struct {
		key string
		op  func(key string) (uint64, error)
	}{
		{prefix + "go-lock", func(key string) (uint64, error) { return s.Lock(ctx, key) }},
		{prefix + "go-trylock", func(key string) (uint64, error) { return s.TryLock(ctx, key) }},
	} {
		tok, err := lose(tc.key, func() (uint64, error) { return tc.op(tc.key) })
		if err != nil {
			t.Fatalf("%s whose answer was lost: %v", tc.key, err)
		}
		if err := s.Unlock(ctx, tc.key, tok); err != nil {
			t.Fatalf("Unlock of the found grant of %s: %v", tc.key, err)
		}
	}
	v1 := client.New(addrList(nodes))
	key := prefix + "go-v1"
	_, err = lose(key, func() (uint64, error) { return 0, v1.Lock(ctx, key) })
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("v1 Lock whose answer was lost: %v; want ErrOutcomeUnknown and ErrUnreachable (not sent again)", err)
	}
	if err := v1.ResetByKey(ctx, key); err != nil {
		t.Fatalf("reset of the ambiguous v1 grant: %v", err)
	}
}

// TestClusterClientAddresses: a client given a follower's address alone
// works (v1 and session), and so does one given a list with a dead address
// first — whichever order a call tries them in.
func TestClusterClientAddresses(t *testing.T) {
	nodes := startClusterOf(t, lctest.Binary(t), make([]string, 3))
	leader := awaitLeader(t, nodes, 20*time.Second)
	follower := others(nodes, leader)[0]
	dead := lctest.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, addr := range []string{follower.Addr, dead + "," + follower.Addr, dead + ", " + leader.Addr + "," + follower.Addr} {
		c := client.New(addr, client.WithDialTimeout(2*time.Second))
		for i := range 10 { // random order: the dead address comes first in some
			key := fmt.Sprintf("v1-%d", i)
			if err := c.Lock(ctx, key); err != nil {
				t.Fatalf("v1 Lock through %s: %v", addr, err)
			}
			if err := c.TryLock(ctx, key); !errors.Is(err, client.ErrLocked) {
				t.Fatalf("v1 TryLock of a held key through %s: %v", addr, err)
			}
			if err := c.Unlock(ctx, key); err != nil {
				t.Fatalf("v1 Unlock through %s: %v", addr, err)
			}
		}
		for range 5 {
			s, err := client.NewSession(ctx, addr, client.WithTTL(5*time.Second))
			if err != nil {
				t.Fatalf("session through %s: %v", addr, err)
			}
			tok, err := s.Lock(ctx, "s")
			if err != nil {
				t.Fatalf("session Lock through %s: %v", addr, err)
			}
			if err := s.Unlock(ctx, "s", tok); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Only dead addresses: unreachable, saying why for each.
	dead2 := lctest.FreePort(t)
	err := client.New(dead+","+dead2).Lock(ctx, "x")
	if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), dead2) {
		t.Fatalf("Lock with only dead addresses: %v", err)
	}
}

// TestClusterClientDNSName: two nodes listen on the same port, one on
// 127.0.0.1 and one on ::1, behind one DNS name (a test DNS server with an
// A and an AAAA record, asked through client.WithResolver). A session
// given the name alone survives a kill -9 of the leader, and the client
// resolves the name at each connection round.
func TestClusterClientDNSName(t *testing.T) {
	port := sharedLoopbackPort(t)
	const name = "locks.cluster.test"
	dns := lctest.StartDNS(t, map[string][]netip.Addr{name: {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}})
	nodes := startClusterOf(t, lctest.Binary(t), []string{"127.0.0.1:" + port, "[::1]:" + port, ""})
	leader := awaitLeader(t, nodes, 20*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr := net.JoinHostPort(name, port)
	opts := []client.Option{client.WithResolver(dns.Resolver()), client.WithTTL(10 * time.Second)}
	if err := client.New(addr, opts...).Lock(ctx, "v1"); err != nil {
		t.Fatalf("v1 Lock through %s: %v", addr, err)
	}
	s, err := client.NewSession(ctx, addr, opts...)
	if err != nil {
		t.Fatalf("session through %s: %v", addr, err)
	}
	defer s.Close(context.Background())
	tok, err := s.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	asked := dns.Asked(name)
	if asked == 0 {
		t.Fatal("the test DNS server was not asked")
	}
	// Kill the leader; if it is the node outside the name, the session's
	// node closes its forwarded connection all the same.
	killed := time.Now()
	leader.kill(t)
	back := workAgain(t, ctx, s, killed)
	t.Logf("kill -9 of the leader (%s) → the session through a DNS name of 2 records works again: %v", leader.id, back.Round(time.Millisecond))
	if dns.Asked(name) <= asked {
		t.Fatalf("the name was not resolved again for the resume (%d questions before, %d after)", asked, dns.Asked(name))
	}
	newLeader := awaitLeader(t, others(nodes, leader), 20*time.Second)
	if k := heldKey(t, newLeader.Web, "held"); k == nil || k.Token != tok {
		t.Fatalf("the session's hold after the failover: %+v; want token %d", k, tok)
	}
	if err := s.Unlock(ctx, "held", tok); err != nil {
		t.Fatal(err)
	}
}

// sharedLoopbackPort returns a port free on both 127.0.0.1 and ::1 a
// moment ago; the test skips when this host has no IPv6 loopback.
func sharedLoopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here (%v): two records on one port need 127.0.0.1 and ::1", err)
	}
	l.Close()
	return lctest.FreeSharedPort(t, "127.0.0.1", "::1")
}
