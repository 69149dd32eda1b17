package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// The clusters of the benchmark: three Locking-Center nodes on raft (SPEC
// §8) beside three etcd members, each on loopback ports with its data in
// the temporary folder. Besides the workloads, they are measured where a
// cluster differs from one server: how long the first grant takes after
// kill -9 of the leader (workload F), and the longest gap between grants
// across a planned hand-over of leadership.

// clusterToken is the benchmark cluster's CLUSTER_TOKEN.
const clusterToken = "bench-compare-cluster-token"

// clusterSize is the nodes of each cluster.
const clusterSize = 3

// cluster is one three-node system whose nodes the benchmark can kill and
// start again.
type cluster struct {
	name  string // the system's name
	srv   *servers
	procs []*proc // node i's current process; nil while it is down
	// start starts node i on its data (new or kept) and ports.
	start func(i int) (*proc, error)
	// leader returns the node that leads, once every live node agrees on
	// one and is ready, or an error.
	leader func(ctx context.Context, live []int) (int, error)
	// grant is one attempt to be granted a fresh key through node i; on
	// success release gives it back.
	grant func(ctx context.Context, i int, key string) (release func(context.Context) error, err error)
	// transfer hands leadership from node from to another, the planned way.
	transfer func(ctx context.Context, from int) error
}

// failoverResult is what workload F and the hand-over measured on one cluster.
type failoverResult struct {
	Kills      []time.Duration `json:"-"`
	KillErrors []string        `json:"kill_errors,omitempty"`
	// Handover: the longest gap between grants across each transfer, or
	// why it was not measured.
	Handovers   []time.Duration `json:"-"`
	HandoverErr string          `json:"handover_error,omitempty"`
}

// kill sends SIGKILL to node i by its PID and waits for it to end.
func (c *cluster) kill(i int) error {
	p := c.procs[i]
	if p == nil {
		return fmt.Errorf("%s node %d is not running", c.name, i)
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.done
	c.srv.forget(p)
	c.procs[i] = nil
	return nil
}

// restart starts node i again on its data.
func (c *cluster) restart(i int) error {
	p, err := c.start(i)
	if err != nil {
		return err
	}
	c.procs[i] = p
	return nil
}

func (c *cluster) all() []int {
	var live []int
	for i := range clusterSize {
		live = append(live, i)
	}
	return live
}

// awaitLeader waits up to within for the live nodes to agree on a ready
// leader among them.
func (c *cluster) awaitLeader(ctx context.Context, live []int, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := c.leader(actx, live)
		cancel()
		if err == nil && slices.Contains(live, l) {
			return l, nil
		}
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("%s: nodes %v agreed on no leader within %v: %v", c.name, live, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// firstGrant tries, every retry on each node of through, to be granted a
// fresh key, and returns when the first grant arrives (or within passes).
// Attempts overlap: one waiting inside a node for a leader is answered as
// soon as there is one.
func (c *cluster) firstGrant(ctx context.Context, through []int, prefix string, within time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	const retry = 20 * time.Millisecond
	granted := make(chan time.Time, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	tick := time.NewTicker(retry)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		for _, i := range through {
			key := prefix + strconv.Itoa(i) + "/" + strconv.Itoa(seq)
			wg.Go(func() {
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				defer acancel()
				release, err := c.grant(actx, i, key)
				if err != nil {
					return
				}
				select {
				case granted <- time.Now():
				default:
				}
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer rcancel()
				_ = release(rctx) // a key left held is a fresh key nobody asks for again
			})
		}
		select {
		case t := <-granted:
			return t, nil
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no grant through nodes %v within %v", through, within)
		case <-tick.C:
		}
	}
}

// runFailovers kills the leader n times with SIGKILL and measures each
// time from the kill to the first grant through the other two nodes; the
// killed node is started again and the three agree on a leader before the
// next kill. Then it hands leadership over n times the planned way and
// measures the longest gap between grants across each.
func runFailovers(ctx context.Context, c *cluster, n int) failoverResult {
	var r failoverResult
	for k := range n {
		if ctx.Err() != nil {
			break
		}
		d, err := c.failoverOnce(ctx, k)
		if err != nil {
			slog.Error("failover", "system", c.name, "kill", k+1, "err", err)
			r.KillErrors = append(r.KillErrors, err.Error())
			if len(r.KillErrors) > 3 {
				break
			}
			continue
		}
		r.Kills = append(r.Kills, d)
		fmt.Fprintf(os.Stderr, "failover %2d/%d  %-13s kill -9 of the leader → first grant %v\n", k+1, n, c.name, d.Round(time.Millisecond))
	}
	for k := range n {
		if ctx.Err() != nil {
			break
		}
		gap, err := c.handoverOnce(ctx, k)
		if err != nil {
			r.HandoverErr = err.Error()
			slog.Warn("hand-over not measured", "system", c.name, "err", err)
			break
		}
		r.Handovers = append(r.Handovers, gap)
		fmt.Fprintf(os.Stderr, "handover %2d/%d  %-13s longest gap between grants %v\n", k+1, n, c.name, gap.Round(time.Millisecond))
	}
	return r
}

func (c *cluster) failoverOnce(ctx context.Context, k int) (time.Duration, error) {
	leader, err := c.awaitLeader(ctx, c.all(), 60*time.Second)
	if err != nil {
		return 0, err
	}
	// The cluster grants now, through every node.
	if _, err := c.firstGrant(ctx, c.all(), fmt.Sprintf("fo%d/pre/", k), 10*time.Second); err != nil {
		return 0, fmt.Errorf("before the kill: %w", err)
	}
	var others []int
	for _, i := range c.all() {
		if i != leader {
			others = append(others, i)
		}
	}
	killed := time.Now()
	if err := c.kill(leader); err != nil {
		return 0, err
	}
	at, gerr := c.firstGrant(ctx, others, fmt.Sprintf("fo%d/post/", k), 30*time.Second)
	if err := c.restart(leader); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, fmt.Errorf("after kill -9 of the leader (node %d): %w", leader, gerr)
	}
	return at.Sub(killed), nil
}

// handoverWindow is how long before a hand-over and after its answer the
// gaps between grants are looked at.
const handoverWindow = 500 * time.Millisecond

// handoverOnce runs four lockers through the two followers, hands
// leadership over, and returns the longest gap between two grants from
// handoverWindow before the transfer until handoverWindow after it answered.
func (c *cluster) handoverOnce(ctx context.Context, k int) (time.Duration, error) {
	leader, err := c.awaitLeader(ctx, c.all(), 60*time.Second)
	if err != nil {
		return 0, err
	}
	var through []int
	for _, i := range c.all() {
		if i != leader {
			through = append(through, i)
		}
	}
	lctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex // guards grants
	var grants []time.Time
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for seq := 0; lctx.Err() == nil; seq++ {
				actx, cancel := context.WithTimeout(lctx, 5*time.Second)
				release, err := c.grant(actx, through[w%len(through)], fmt.Sprintf("ho%d/%d/%d", k, w, seq))
				if err == nil {
					mu.Lock()
					grants = append(grants, time.Now())
					mu.Unlock()
					_ = release(actx) // a key left held is a fresh key nobody asks for again
				}
				cancel()
			}
		})
	}
	sleepCtx(ctx, handoverWindow)
	begin := time.Now()
	terr := c.transfer(ctx, leader)
	end := time.Now()
	sleepCtx(ctx, handoverWindow)
	stop()
	wg.Wait()
	if terr != nil {
		return 0, terr
	}
	if _, err := c.awaitLeader(ctx, c.all(), 30*time.Second); err != nil {
		return 0, err
	}
	slices.SortFunc(grants, func(a, b time.Time) int { return a.Compare(b) })
	from, to := begin.Add(-handoverWindow), end.Add(handoverWindow)
	var gap time.Duration
	prev := from
	for _, g := range grants {
		if g.Before(from) || g.After(to) {
			continue
		}
		gap = max(gap, g.Sub(prev))
		prev = g
	}
	return max(gap, to.Sub(prev)), nil
}

// forget drops a process that has ended (a killed node) from the ones
// stopAll stops.
func (s *servers) forget(p *proc) {
	s.procs = slices.DeleteFunc(s.procs, func(q *proc) bool { return q == p })
}

// startLCCluster starts three Locking-Center nodes of one cluster (binary
// bin, already built) and the system lc-cluster: a session per client, the
// clients spread over the three nodes' lock ports as a load balancer or a
// DNS name would spread them (a follower forwards to the leader).
func (s *servers) startLCCluster(ctx context.Context, bin string) (*cluster, error) {
	var lock, web, raft []string
	for range clusterSize {
		for _, l := range []*[]string{&lock, &web, &raft} {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			*l = append(*l, "127.0.0.1:"+strconv.Itoa(port))
		}
	}
	var peers []string
	for i := range clusterSize {
		peers = append(peers, "n"+strconv.Itoa(i)+"="+raft[i])
	}
	c := &cluster{name: "lc-cluster", srv: s, procs: make([]*proc, clusterSize)}
	c.start = func(i int) (*proc, error) {
		dir := filepath.Join(s.tmp, "lc-cluster", "n"+strconv.Itoa(i))
		env := []string{"NODE_ID=n" + strconv.Itoa(i), "RAFT_ADDRESS=" + raft[i], "CLUSTER_PEERS=" + strings.Join(peers, ","),
			"CLUSTER_TOKEN=" + clusterToken, "RAFT_DIR=" + dir, "BIND_ADDRESS=" + lock[i], "WEB_ADDRESS=" + web[i], "DATA_PATH="}
		p, err := s.start("lc-cluster-n"+strconv.Itoa(i), syscall.SIGTERM, nil, env, bin)
		if err != nil {
			return nil, err
		}
		return p, waitReady(ctx, p, dialReady(lock[i]))
	}
	c.leader = func(ctx context.Context, live []int) (int, error) {
		leader := ""
		for _, i := range live {
			st, err := lcClusterStatus(ctx, web[i])
			if err != nil {
				return -1, err
			}
			if st.LeaderID == "" || (leader != "" && st.LeaderID != leader) || !st.ready {
				return -1, fmt.Errorf("node n%d: leader %q, ready %v", i, st.LeaderID, st.ready)
			}
			leader = st.LeaderID
		}
		n, err := strconv.Atoi(strings.TrimPrefix(leader, "n"))
		if err != nil {
			return -1, fmt.Errorf("leader id %q", leader)
		}
		return n, nil
	}
	c.grant = func(ctx context.Context, i int, key string) (func(context.Context) error, error) {
		v := &v1Client{addr: lock[i], source: "bench-failover"}
		if err := v.do(ctx, actTryLock, key, nil); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return v.do(ctx, actUnlock, key, nil) }, nil
	}
	c.transfer = func(ctx context.Context, from int) error {
		// SPEC §8.7: POST /api/v1/cluster/transfer {"id"?} hands leadership over.
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+web[from]+"/api/v1/cluster/transfer", strings.NewReader(`{}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("POST /api/v1/cluster/transfer: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("POST /api/v1/cluster/transfer answered %s: the route is not in this build", resp.Status)
		}
		return nil
	}
	for i := range clusterSize {
		p, err := c.start(i)
		if err != nil {
			return nil, err
		}
		c.procs[i] = p
	}
	if _, err := c.awaitLeader(ctx, c.all(), 60*time.Second); err != nil {
		return nil, err
	}
	s.systems["lc-cluster"] = &system{
		name: "lc-cluster", durable: true, shared: true, cluster: true,
		what: "Locking-Center cluster of 3 nodes (raft, RAFT_DIR on disk, default timeouts), a session per client, the clients spread over the three nodes' lock ports (a follower forwards to the leader); in M one session through one node",
		// Client i through node i mod 3: B's and D's clients evenly
		// over the three, whichever leads.
		connect: func(ctx context.Context, id int) (client, error) {
			return sessionConnect(lock[id%clusterSize], nil)(ctx, id)
		},
	}
	return c, nil
}

const actTryLock = 5

type lcStatus struct {
	LeaderID string `json:"leader_id"`
	State    string `json:"state"`
	ready    bool
}

func lcClusterStatus(ctx context.Context, web string) (lcStatus, error) {
	var st lcStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+web+"/api/v1/cluster", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		return st, fmt.Errorf("GET /api/v1/cluster: %w", err)
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, "http://"+web+"/readyz", nil)
	if err != nil {
		return st, err
	}
	if resp, err = http.DefaultClient.Do(req); err != nil {
		return st, err
	}
	resp.Body.Close()
	st.ready = resp.StatusCode == http.StatusOK
	return st, nil
}

// startEtcdCluster starts three etcd members of one cluster and the system
// etcd-cluster: concurrency.Mutex, one client (with the three endpoints,
// which clientv3 balances over) and one session per locker.
func (s *servers) startEtcdCluster(ctx context.Context, bin string) (*cluster, error) {
	var clientURL, peerURL, names, initial []string
	for i := range clusterSize {
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		pp, err := freePort()
		if err != nil {
			return nil, err
		}
		clientURL = append(clientURL, "http://127.0.0.1:"+strconv.Itoa(cp))
		peerURL = append(peerURL, "http://127.0.0.1:"+strconv.Itoa(pp))
		names = append(names, "e"+strconv.Itoa(i))
		initial = append(initial, names[i]+"="+peerURL[i])
	}
	endpoints := make([]string, clusterSize)
	for i, u := range clientURL {
		endpoints[i] = strings.TrimPrefix(u, "http://")
	}
	c := &cluster{name: "etcd-cluster", srv: s, procs: make([]*proc, clusterSize)}
	c.start = func(i int) (*proc, error) {
		p, err := s.start("etcd-cluster-"+names[i], syscall.SIGTERM, nil, nil, bin,
			"--name", names[i], "--data-dir", filepath.Join(s.tmp, "etcd-cluster", names[i]),
			"--listen-client-urls", clientURL[i], "--advertise-client-urls", clientURL[i],
			"--listen-peer-urls", peerURL[i], "--initial-advertise-peer-urls", peerURL[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "bench-compare", "--log-level", "warn", "--logger", "zap")
		if err != nil {
			return nil, err
		}
		return p, waitReady(ctx, p, dialReady(endpoints[i]))
	}
	// One client per member for the cluster's own calls (status, the
	// failover's grants, move-leader), made once.
	admin := make([]*clientv3.Client, clusterSize)
	sessions := make([]*concurrency.Session, clusterSize)
	var amu sync.Mutex // guards admin and sessions
	adminOf := func(ctx context.Context, i int) (*clientv3.Client, *concurrency.Session, error) {
		amu.Lock()
		defer amu.Unlock()
		if admin[i] == nil {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoints[i]}, DialTimeout: 2 * time.Second,
				Logger: zap.NewNop(), Context: context.WithoutCancel(ctx)})
			if err != nil {
				return nil, nil, err
			}
			admin[i] = cli
			s.closers = append(s.closers, cli.Close)
		}
		if sessions[i] == nil {
			sess, err := concurrency.NewSession(admin[i], concurrency.WithTTL(60), concurrency.WithContext(context.WithoutCancel(ctx)))
			if err != nil {
				return admin[i], nil, err
			}
			sessions[i] = sess
		}
		return admin[i], sessions[i], nil
	}
	c.leader = func(ctx context.Context, live []int) (int, error) {
		var lead uint64
		for _, i := range live {
			cli, _, err := adminOf(ctx, i)
			if err != nil {
				return -1, err
			}
			st, err := cli.Status(ctx, endpoints[i])
			if err != nil {
				return -1, err
			}
			if st.Leader == 0 || (lead != 0 && st.Leader != lead) {
				return -1, fmt.Errorf("member %s: leader %x", names[i], st.Leader)
			}
			lead = st.Leader
		}
		for _, i := range live {
			cli, _, _ := adminOf(ctx, i)
			st, err := cli.Status(ctx, endpoints[i])
			if err == nil && st.Header.MemberId == lead {
				return i, nil
			}
		}
		return -1, fmt.Errorf("leader %x is not among the live members", lead)
	}
	c.grant = func(ctx context.Context, i int, key string) (func(context.Context) error, error) {
		_, sess, err := adminOf(ctx, i)
		if err != nil {
			return nil, err
		}
		m := concurrency.NewMutex(sess, "/bench-failover/"+key)
		if err := m.Lock(ctx); err != nil {
			return nil, err
		}
		return m.Unlock, nil
	}
	c.transfer = func(ctx context.Context, from int) error {
		cli, _, err := adminOf(ctx, from)
		if err != nil {
			return err
		}
		members, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		st, err := cli.Status(ctx, endpoints[from])
		if err != nil {
			return err
		}
		for _, m := range members.Members {
			if m.ID != st.Header.MemberId {
				_, err := cli.MoveLeader(ctx, m.ID)
				return err
			}
		}
		return errors.New("no other member")
	}
	for i := range clusterSize {
		p, err := c.start(i)
		if err != nil {
			return nil, err
		}
		c.procs[i] = p
	}
	if _, err := c.awaitLeader(ctx, c.all(), 60*time.Second); err != nil {
		return nil, err
	}
	// Every member's session exists before any kill: a failover's grant
	// then costs what a running client's Lock costs.
	for i := range clusterSize {
		if _, _, err := adminOf(ctx, i); err != nil {
			return nil, fmt.Errorf("etcd-cluster member %s: %w", names[i], err)
		}
	}
	s.systems["etcd-cluster"] = &system{
		name: "etcd-cluster", durable: true, shared: true, cluster: true,
		what: "etcd cluster of 3 members (default timeouts: 100 ms heartbeat, 1 s election), concurrency.Mutex, one client (the three endpoints, balanced by clientv3) and one session (lease) per locker",
		connect: func(ctx context.Context, _ int) (client, error) {
			return newEtcdClient(ctx, endpoints...)
		},
	}
	return c, nil
}
