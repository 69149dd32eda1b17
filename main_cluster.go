package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/tlsconf"
	"github.com/locking-center/locking-center/web"
	"github.com/locking-center/locking-center/wire"
)

// clusterConfig is a cluster node's configuration (SPEC §8.6).
type clusterConfig struct {
	Node       cluster.Config
	LeaderWait time.Duration
}

// clusterFromEnv reads the cluster's variables: nil without CLUSTER_PEERS
// (and CLUSTER_JOIN), which keeps the single-node server as it is. Every
// error names its variable.
func clusterFromEnv(getenv func(string) string, c config) (*clusterConfig, error) {
	peers, join := getenv("CLUSTER_PEERS"), getenv("CLUSTER_JOIN")
	switch {
	case peers != "" && join != "":
		return nil, errors.New("CLUSTER_JOIN: set together with CLUSTER_PEERS; a node bootstraps with CLUSTER_PEERS or joins with CLUSTER_JOIN, not both")
	case join != "":
		return nil, errors.New("CLUSTER_JOIN: joining a running cluster is not supported yet; start every node with the same CLUSTER_PEERS")
	case peers == "":
		return nil, nil
	case c.DataPath != "":
		return nil, errors.New("DATA_PATH: moving a single node's log into a cluster is not supported yet; a cluster keeps its state in RAFT_DIR, unset DATA_PATH")
	case getenv("RAFT_DIR") == "":
		return nil, errors.New("RAFT_DIR: required with CLUSTER_PEERS (raft's log, vote and term are never kept only in memory)")
	case getenv("CLUSTER_TOKEN") == "":
		return nil, errors.New("CLUSTER_TOKEN: required with CLUSTER_PEERS (16 to 127 bytes, the same on every node)")
	}
	cc := &clusterConfig{Node: cluster.Config{
		NodeID:        getenv("NODE_ID"),
		RaftAddress:   getenv("RAFT_ADDRESS"),
		RaftAdvertise: getenv("RAFT_ADVERTISE"),
		Peers:         peers,
		Token:         getenv("CLUSTER_TOKEN"),
		RaftDir:       getenv("RAFT_DIR"),
	}}
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
// leader's engine; a follower serves its probes, /metrics and
// /api/v1/cluster, and answers 503 (naming the leader) to the rest.
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
	meters := metrics.New(metrics.Options{})
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
	// The web handler of the moment: the leader's engine's, or the
	// follower's. It is swapped as engines come and go.
	var webNow atomic.Pointer[http.Handler]
	var node *cluster.Node
	webOpts := web.Options{
		StuckAfter: cfg.StuckAfter, Password: cfg.WebPassword, Metrics: meters, Logger: logger,
		Version: version, Ready: fe.Ready, ListenAddress: cfg.WebAddress, AllowedHosts: cfg.WebAllowedHosts,
		MaxConnections: cfg.WebMaxConnections, MaxConnectionsPerPeer: cfg.WebMaxConnectionsPerPeer,
		Cluster: func() any { return fe.Node().Status() },
	}
	if certs != nil {
		webOpts.TLSConfig = certs.WebConfig()
	}
	follower := func() http.Handler {
		o := webOpts
		o.Table = locker.New(locker.Options{}) // shows nothing: the state is the leader's
		return followerWeb(web.New(o), func() string { id, _ := fe.Node().Leader(); return id })
	}
	fe.OnEngine = func(t *locker.Table) {
		var h http.Handler
		if t == nil {
			h = follower()
		} else {
			o := webOpts
			o.Table = t
			h = web.New(o)
		}
		webNow.Store(&h)
	}

	cc.Node.Logger = logger
	node, err = fe.Start(cc.Node)
	if err != nil {
		tcpLn.Close()
		if webLn != nil {
			webLn.Close()
		}
		return err
	}
	if webNow.Load() == nil {
		h := follower()
		webNow.CompareAndSwap(nil, &h)
	}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	var webSrv *http.Server
	if webLn != nil {
		webSrv = web.NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			(*webNow.Load()).ServeHTTP(w, r)
		}))
		webLn = webOpts.Listener(webLn)
		wg.Go(func() {
			if err := webSrv.Serve(webLn); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("web: %w", err)
			}
		})
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if certs != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { certs.Watch(watchCtx, certPoll, hup) })
	}
	wg.Go(func() {
		if err := fe.Serve(tcpLn); !errors.Is(err, wire.ErrServerClosed) {
			errc <- fmt.Errorf("lock protocol: %w", err)
		}
	})
	logger.Info("locking-center started as a cluster node", "version", version, "node", node.ID(),
		"raft", node.Address(), "bind", tcpLn.Addr().String(), "web", addrOrOff(webLn),
		"heartbeat_timeout", node.HeartbeatTimeout(), "leader_wait", cc.LeaderWait, "tls", certs != nil)
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
	}
	stopWatch()
	wg.Wait()
	if serveErr != nil {
		return serveErr
	}
	logger.Info("stopped")
	return nil
}

// followerWeb serves a follower's web port: the probes, /metrics and
// /api/v1/cluster through h; every other route answers 503 with the
// leader's id in X-LC-Leader (reads from a follower's applied state and
// forwarding to the leader are not implemented yet).
func followerWeb(h http.Handler, leader func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics", "/api/v1/cluster":
			h.ServeHTTP(w, r)
			return
		}
		id := leader()
		w.Header().Set("X-LC-Leader", id)
		msg := "503 this node does not lead the cluster"
		if id != "" {
			msg += "; the leader is node " + strconv.Quote(id) + ": ask its web port"
		} else {
			msg += ", and no leader is known"
		}
		http.Error(w, msg, http.StatusServiceUnavailable)
	})
}
