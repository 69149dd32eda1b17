package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/tlsconf"
	"github.com/locking-center/locking-center/web"
	"github.com/locking-center/locking-center/web/api"
	"github.com/locking-center/locking-center/wire"
)

// clusterConfig is a cluster node's configuration (SPEC §8.6).
type clusterConfig struct {
	Node       cluster.Config
	LeaderWait time.Duration
	// Join is CLUSTER_JOIN: a member's web port, "host:port" (or
	// "https://host:port"), which a node with no raft state asks to add it.
	Join string
	// TLS are RAFT_TLS_CERT, RAFT_TLS_KEY and RAFT_TLS_CA: mutual TLS on
	// the cluster port when Cert is set.
	TLS tlsconf.Files
}

// clusterFromEnv reads the cluster's variables: nil without CLUSTER_PEERS
// and CLUSTER_JOIN, which keeps the single-node server as it is. Every
// error names its variable.
func clusterFromEnv(getenv func(string) string, c config) (*clusterConfig, error) {
	peers, join := getenv("CLUSTER_PEERS"), getenv("CLUSTER_JOIN")
	tlsFiles := tlsconf.Files{Cert: getenv("RAFT_TLS_CERT"), Key: getenv("RAFT_TLS_KEY"), ClientCA: getenv("RAFT_TLS_CA")}
	switch {
	case peers != "" && join != "":
		return nil, errors.New("CLUSTER_JOIN: set together with CLUSTER_PEERS; a node bootstraps with CLUSTER_PEERS or joins with CLUSTER_JOIN, not both")
	case peers == "" && join == "":
		for _, v := range []string{"RAFT_TLS_CERT", "RAFT_TLS_KEY", "RAFT_TLS_CA"} {
			if getenv(v) != "" {
				return nil, fmt.Errorf("%s: set without CLUSTER_PEERS or CLUSTER_JOIN; the cluster port exists only in a cluster", v)
			}
		}
		return nil, nil
	case getenv("RAFT_DIR") == "":
		return nil, errors.New("RAFT_DIR: required in a cluster (raft's log, vote and term are never kept only in memory)")
	case getenv("CLUSTER_TOKEN") == "":
		return nil, errors.New("CLUSTER_TOKEN: required in a cluster (16 to 127 bytes, the same on every node)")
	case c.DataPath != "" && join != "":
		return nil, errors.New("DATA_PATH: set with CLUSTER_JOIN; a joining node takes the cluster's state, and a single node's log moves in only " +
			"by bootstrapping a cluster of one (CLUSTER_PEERS naming that node alone); unset DATA_PATH")
	case c.DataPath != "" && strings.Count(peers, "=") != 1:
		return nil, errors.New("DATA_PATH: set in a cluster of several; a single node's log moves in only by bootstrapping a cluster of one " +
			"(CLUSTER_PEERS naming that node alone, the others then join with CLUSTER_JOIN); unset DATA_PATH")
	case tlsFiles.Cert != "" && tlsFiles.Key == "":
		return nil, errors.New("RAFT_TLS_KEY: unset while RAFT_TLS_CERT is set; mutual TLS on the cluster port needs RAFT_TLS_CERT, RAFT_TLS_KEY and RAFT_TLS_CA")
	case tlsFiles.Key != "" && tlsFiles.Cert == "":
		return nil, errors.New("RAFT_TLS_CERT: unset while RAFT_TLS_KEY is set; mutual TLS on the cluster port needs RAFT_TLS_CERT, RAFT_TLS_KEY and RAFT_TLS_CA")
	case tlsFiles.Cert != "" && tlsFiles.ClientCA == "":
		return nil, errors.New("RAFT_TLS_CA: unset while RAFT_TLS_CERT is set; the cluster port's TLS is mutual, every node's certificate signed by RAFT_TLS_CA")
	case tlsFiles.ClientCA != "" && tlsFiles.Cert == "":
		return nil, errors.New("RAFT_TLS_CA: set without RAFT_TLS_CERT and RAFT_TLS_KEY, which mutual TLS on the cluster port needs")
	}
	if join != "" {
		if err := checkAddress(strings.TrimPrefix(strings.TrimPrefix(join, "https://"), "http://")); err != nil {
			return nil, fmt.Errorf("CLUSTER_JOIN=%q: want a member's web port, host:port (or https://host:port): %w", join, err)
		}
	}
	cc := &clusterConfig{Node: cluster.Config{
		NodeID:        getenv("NODE_ID"),
		RaftAddress:   getenv("RAFT_ADDRESS"),
		RaftAdvertise: getenv("RAFT_ADVERTISE"),
		Peers:         peers,
		Token:         getenv("CLUSTER_TOKEN"),
		RaftDir:       getenv("RAFT_DIR"),
		DataPath:      c.DataPath,
	}, Join: join, TLS: tlsFiles}
	if cc.Node.NodeID == "" {
		name, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("NODE_ID: unset and the host name is unknown: %w", err)
		}
		cc.Node.NodeID = name
	}
	var err error
	if cc.Node.HeartbeatTimeout, err = envDuration(getenv, "RAFT_HEARTBEAT_TIMEOUT", cluster.DefaultHeartbeatTimeout); err != nil {
		return nil, err
	}
	if v := getenv("RAFT_SNAPSHOT_THRESHOLD"); v != "" {
		n, perr := strconv.ParseUint(v, 10, 64)
		if perr != nil || n < 1 {
			return nil, fmt.Errorf("RAFT_SNAPSHOT_THRESHOLD=%q: want a whole number of at least 1", v)
		}
		cc.Node.SnapshotThreshold = n
	}
	if cc.LeaderWait, err = envDuration(getenv, "LEADER_WAIT", cluster.DefaultLeaderWait); err != nil {
		return nil, err
	}
	if err := cc.Node.Validate(); err != nil {
		return nil, err // it names the variable
	}
	return cc, nil
}

// runCluster serves as one node of a cluster until ctx ends or
// SIGTERM/SIGINT arrives. The lock port is the Frontend's: the leader's
// engine serves it, a follower forwards it. The web port shows the
// leader's engine on the leader; on a follower its applied state, and it
// forwards writes, ?consistent=1 and the sessions to the leader over the
// cluster port, where the same web handler serves them (SPEC §8.4).
func runCluster(ctx context.Context, cfg config, logger *slog.Logger, onReady ready) error {
	cc := cfg.Cluster
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	var certs *tlsconf.Store
	var err error
	if cfg.TLSCert != "" {
		if certs, err = tlsconf.Load(tlsconf.Files{Cert: cfg.TLSCert, Key: cfg.TLSKey, ClientCA: cfg.TLSClientCA}, logger); err != nil {
			return tlsError(err)
		}
	}
	var peerCerts *tlsconf.Store
	if cc.TLS.Cert != "" {
		if peerCerts, err = tlsconf.Load(cc.TLS, logger); err != nil {
			return raftTLSError(err)
		}
		cc.Node.TLS = &cluster.PeerTLS{Server: peerCerts.LockConfig(), Client: peerCerts.PeerClientConfig}
	}
	meters := metrics.New(metrics.Options{Cluster: true})
	fe := &cluster.Frontend{
		NewWire: func() *wire.Server {
			s := &wire.Server{RequestTimeout: cfg.RequestTimeout, MaxConnections: cfg.MaxConnections,
				MaxConnectionsPerPeer: cfg.MaxConnectionsPerPeer, Logger: logger, Observer: meters,
				SessionTTL: cfg.SessionTTL, AuthToken: cfg.AuthToken}
			if certs != nil {
				s.TLSConfig = certs.LockConfig()
			}
			return s
		},
		TableOptions: locker.Options{Now: testClock(), OnGrant: meters.ObserveWait, OnRelease: meters.ObserveHold,
			MaxSessions: cfg.MaxConnections, MaxSessionsPerPeer: cfg.MaxConnectionsPerPeer},
		LeaderWait: cc.LeaderWait,
		TLS:        certs != nil,
		Logger:     logger,
	}

	lc := net.ListenConfig{KeepAlive: -1}
	tcpLn, err := lc.Listen(context.Background(), "tcp", cfg.BindAddress)
	if err != nil {
		return fmt.Errorf("BIND_ADDRESS: %w", err)
	}
	var webLn net.Listener
	if cfg.WebAddress != "" {
		if webLn, err = net.Listen("tcp", cfg.WebAddress); err != nil {
			tcpLn.Close()
			return fmt.Errorf("WEB_ADDRESS: %w", err)
		}
	}
	// The web port (SPEC §8.4, §8.8). On the leader it shows the engine's
	// table; on a follower, its applied state (a Replica of the FSM), and
	// it forwards writes to the leader over the cluster port, where the
	// leader serves them on the same handler (peerWeb).
	var webNow atomic.Pointer[http.Handler] // the leader's engine's handler; nil on a follower
	var node *cluster.Node
	peers := web.NewPeers(func(ctx context.Context, address string) (net.Conn, error) {
		return fe.Node().DialWeb(ctx, address)
	}, logger)
	defer peers.Close()
	toLeader := peers.ToLeader(func() (string, string) { return fe.Node().Leader() })
	webCluster := func(follower bool, applied func() uint64) *web.Cluster {
		return &web.Cluster{
			Node:         cc.Node.NodeID,
			Leader:       func() string { id, _ := fe.Node().Leader(); return id },
			Follower:     follower,
			AppliedIndex: applied,
			Status:       func() api.Cluster { return apiCluster(fe.Node().Status()) },
			Peer:         peers.Status,
			ToLeader:     toLeader,
		}
	}
	webOpts := web.Options{
		StuckAfter: cfg.StuckAfter, Password: cfg.WebPassword, Metrics: meters, Logger: logger,
		Version: version, Ready: fe.Ready, ListenAddress: cfg.WebAddress, AllowedHosts: cfg.WebAllowedHosts,
		MaxConnections: cfg.WebMaxConnections, MaxConnectionsPerPeer: cfg.WebMaxConnectionsPerPeer,
		Connections: fe.Connections,
		// Every node signs the banner after an action alike: the leader
		// signs what the follower that forwarded the action shows.
		FlashKey: []byte(cc.Node.Token),
		Membership: &web.Membership{
			Add:    func(id, address string) error { return membershipError(fe.Node().AddNode(id, address)) },
			Remove: func(id string) error { return membershipError(fe.Node().RemoveNode(id)) },
			Transfer: func(id string) (string, error) {
				leader, err := fe.Node().Transfer(id)
				return leader, membershipError(err)
			},
			JoinAuthorized: func(proof string, body []byte) bool {
				return cluster.VerifyJoin(cc.Node.Token, proof, body, time.Now())
			},
		},
	}
	if certs != nil {
		webOpts.TLSConfig = certs.WebConfig()
	}
	// A follower's handler is made afresh for each table its Replica
	// builds; fmu guards the one of the moment.
	var (
		replica *cluster.Replica
		fmu     sync.Mutex
		fTable  *locker.Table
		fIndex  *atomic.Uint64 // the index fTable shows
		fWeb    http.Handler
	)
	followerWeb := func() http.Handler {
		fmu.Lock()
		defer fmu.Unlock()
		if replica == nil {
			replica = cluster.NewReplica(fe.Node())
		}
		t, index := replica.Table()
		if t != fTable {
			o := webOpts
			o.Table = t
			shown := new(atomic.Uint64)
			o.Cluster = webCluster(true, shown.Load)
			fTable, fIndex, fWeb = t, shown, web.New(o) // web.New makes it the source of the gauges
		}
		fIndex.Store(index)
		return fWeb
	}
	fe.OnEngine = func(t *locker.Table) {
		if t == nil {
			webNow.Store(nil)
			fmu.Lock()
			fTable = nil // the next follower handler takes the gauges back
			fmu.Unlock()
			return
		}
		o := webOpts
		o.Table = t
		o.Cluster = webCluster(false, func() uint64 { return fe.Node().Raft().AppliedIndex() })
		// What the lock port's answers that change nothing wait for.
		o.Cluster.Confirm = fe.Node().VerifyLeader
		h := web.New(o)
		webNow.Store(&h)
	}
	webHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := webNow.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		followerWeb().ServeHTTP(w, r)
	})
	peerConns := newConnQueue()
	if webLn != nil {
		cc.Node.OnWeb = peerConns.deliver
	}

	cc.Node.Logger = logger
	cc.Node.OnApply = meters.ObserveApply
	node, err = fe.Start(cc.Node)
	if err != nil {
		tcpLn.Close()
		if webLn != nil {
			webLn.Close()
		}
		return err
	}
	meters.SetClusterSource(func() metrics.ClusterGauges {
		f := node.Figures()
		return metrics.ClusterGauges{Leader: f.Leader, Term: f.Term, CommitIndex: f.CommitIndex,
			AppliedIndex: f.AppliedIndex, LastContact: f.LastContact, Voters: f.Voters, Nonvoters: f.Nonvoters,
			Forwarded: fe.Forwarded(), LeaderChanges: fe.LeaderChanges(), SessionTTLRestarts: fe.SessionTTLRestarts()}
	})

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	var webSrv, peerSrv *http.Server
	if webLn != nil {
		webSrv = web.NewHTTPServer(webHandler)
		webLn = webOpts.Listener(webLn)
		wg.Go(func() {
			if err := webSrv.Serve(webLn); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("web: %w", err)
			}
		})
		// The other nodes' requests, over the cluster port.
		peerSrv = web.NewHTTPServer(web.FromPeer(webHandler))
		wg.Go(func() {
			if err := peerSrv.Serve(peerConns); !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
				errc <- fmt.Errorf("web over the cluster port: %w", err)
			}
		})
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	for _, st := range []*tlsconf.Store{certs, peerCerts} {
		if st == nil {
			continue
		}
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { st.Watch(watchCtx, certPoll, hup) })
	}
	if cc.Join != "" && !node.HadState() {
		wg.Go(func() { joinCluster(watchCtx, node, cc.Join, cc.Node.Token, logger) })
	} else if cc.Join != "" {
		logger.Info("cluster: CLUSTER_JOIN ignored: this node has raft state, and rejoins as the member it was", "node", node.ID())
	}
	wg.Go(func() {
		if err := fe.Serve(tcpLn); !errors.Is(err, wire.ErrServerClosed) {
			errc <- fmt.Errorf("lock protocol: %w", err)
		}
	})
	logger.Info("locking-center started as a cluster node", "version", version, "node", node.ID(),
		"raft", node.Address(), "bind", tcpLn.Addr().String(), "web", addrOrOff(webLn),
		"heartbeat_timeout", node.HeartbeatTimeout(), "leader_wait", cc.LeaderWait, "tls", certs != nil,
		"raft_tls", peerCerts != nil)
	logReach(logger, cfg, tcpLn, webLn)
	if onReady != nil {
		var wa net.Addr
		if webLn != nil {
			wa = webLn.Addr()
		}
		onReady(tcpLn.Addr(), wa)
	}
	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case serveErr = <-errc:
	}
	fe.Close()
	if err := node.Close(); err != nil {
		logger.Warn("raft shutdown", "err", err)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if webSrv != nil {
		if err := webSrv.Shutdown(shutCtx); err != nil {
			logger.Warn("web shutdown", "err", err)
		}
		if err := peerSrv.Shutdown(shutCtx); err != nil {
			logger.Warn("web over the cluster port: shutdown", "err", err)
		}
	}
	peerConns.Close()
	stopWatch()
	wg.Wait()
	if serveErr != nil {
		return serveErr
	}
	logger.Info("stopped")
	return nil
}

// apiCluster is the JSON form of a node's status.
func apiCluster(st cluster.Status) api.Cluster {
	out := api.Cluster{Node: st.Node, State: st.State, Leader: st.Leader, LeaderID: st.LeaderID, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, LastIndex: st.LastIndex,
		Nodes: make([]api.ClusterMember, len(st.Nodes))}
	for i, n := range st.Nodes {
		out.Nodes[i] = api.ClusterMember{ID: n.ID, Address: n.Address, Suffrage: n.Suffrage, Leader: n.Leader,
			LastContactMS: n.LastContactMS, AppliedIndex: n.AppliedIndex}
	}
	return out
}

// raftTLSError names the variable of the file tlsconf refused.
func raftTLSError(err error) error {
	var fe *tlsconf.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("RAFT_TLS_CERT: %w", err)
	}
	name := map[tlsconf.Role]string{tlsconf.Cert: "RAFT_TLS_CERT", tlsconf.Key: "RAFT_TLS_KEY", tlsconf.ClientCA: "RAFT_TLS_CA"}[fe.Role]
	return fmt.Errorf("%s: %w", name, err)
}

// membershipError gives a membership change's refusal its HTTP status.
func membershipError(err error) error {
	if err == nil {
		return nil
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, cluster.ErrBadRequest):
		status = http.StatusBadRequest
	case errors.Is(err, cluster.ErrUnknownNode):
		status = http.StatusNotFound
	case errors.Is(err, cluster.ErrBusy), errors.Is(err, cluster.ErrTooFewVoters), errors.Is(err, cluster.ErrConflict):
		status = http.StatusConflict
	case errors.Is(err, cluster.ErrNoLeader), errors.Is(err, cluster.ErrNotLeader):
		status = http.StatusServiceUnavailable
	case errors.Is(err, cluster.ErrUnreachable):
		status = http.StatusBadGateway
	}
	return &web.StatusError{Status: status, Err: err}
}

// joinCluster asks the member at target (CLUSTER_JOIN, a web port) to add
// this node, again with back-off until this node is in the cluster's
// configuration (the leader has added it and reached it) or ctx ends. A
// lost answer is harmless: adding a member again changes nothing.
func joinCluster(ctx context.Context, node *cluster.Node, target, token string, logger *slog.Logger) {
	url := target
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		url = "http://" + url
	}
	url += "/api/v1/cluster/nodes"
	// The join proves CLUSTER_TOKEN by an HMAC and carries no secret, and
	// nothing in the answer is trusted: the node counts itself joined only
	// once raft's configuration names it. Whose certificate answers an
	// https join therefore does not matter (the image has no CA roots).
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // see above
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(api.ClusterNode{ID: node.ID(), Address: node.Address()})
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if node.Member() {
			logger.Info("cluster: joined", "node", node.ID(), "via", target, "attempts", attempt-1)
			return
		}
		err := postJoin(ctx, hc, url, token, body)
		if err == nil {
			logger.Info("cluster: join accepted; waiting for the leader to reach this node", "node", node.ID(), "via", target)
			wait = 250 * time.Millisecond
		} else {
			logger.Warn("cluster: join failed; trying again", "node", node.ID(), "via", target, "attempt", attempt, "retry_in", wait, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err != nil {
			wait = min(2*wait, 10*time.Second)
		}
	}
}

func postJoin(ctx context.Context, hc *http.Client, url, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.JoinHeader, cluster.SignJoin(token, body, time.Now()))
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// connQueue is a net.Listener fed with connections that arrive elsewhere:
// the web connections of other nodes, from the cluster port.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{})}
}

// deliver hands c to Accept, or closes it once the queue is closed. It
// waits for the web server's accept loop, which takes each connection at
// once.
func (q *connQueue) deliver(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return &net.TCPAddr{} }
