// Command locking-center is a small distributed lock server: clients lock a
// key over TCP, wait their turn in FIFO order, and unlock it when done. A
// second port serves a dashboard, a JSON API and Prometheus metrics.
//
// This file is the whole wiring: configuration from the environment, the
// lock engine, the write-ahead log, both listeners and the signals.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/tlsconf"
	"github.com/locking-center/locking-center/walog"
	"github.com/locking-center/locking-center/web"
	"github.com/locking-center/locking-center/wire"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "version", "-version", "--version":
			fmt.Println("locking-center", version)
			return
		case "healthcheck":
			os.Exit(healthcheck(os.Getenv))
		case "handover":
			os.Exit(handover(os.Getenv, os.Args[2:], os.Stdout, os.Stderr))
		case "-h", "-help", "--help", "help":
			fmt.Print(usage)
			return
		default:
			fmt.Fprintf(os.Stderr, "locking-center: unknown command %q\n\n%s", os.Args[1], usage)
			os.Exit(2)
		}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	if err := run(context.Background(), os.Getenv, logger, nil); err != nil {
		logger.Error("locking-center stopped", "err", err)
		os.Exit(1)
	}
}

const usage = `locking-center: a distributed lock server.

Usage:
  locking-center            run the server (configured by the environment)
  locking-center version    print the version
  locking-center healthcheck  exit 0 if the local server's /readyz answers 200
  locking-center handover [timeout]  if this cluster node leads, hand leadership
                            over and wait (default 20s) until another node leads;
                            exit 0 then or when it does not lead (a preStop hook)

Environment:
  BIND_ADDRESS     TCP lock protocol address            (default :22119)
  WEB_ADDRESS      dashboard, JSON API, /metrics; "off"  (default :22120)
  DATA_PATH        write-ahead log file; unset = memory only
  STUCK_AFTER      a key held longer counts as stuck     (default 10m)
  MAX_CONNECTIONS  concurrent TCP connections            (default 10000)
  MAX_CONNECTIONS_PER_PEER  of them from one IP address; -1 = no bound (default a quarter)
  REQUEST_TIMEOUT  time for a client to send its frame   (default 10s)
  WEB_PASSWORD     basic auth (user admin) on the web port, probes excepted
  SESSION_TTL      TTL of a session that asks for 0, 1s..10m (default 10s)
  AUTH_TOKEN       secret a session must present; v1 frames are then refused
  WEB_ALLOWED_HOSTS  further Host names the web port answers for (comma-separated)
  WEB_MAX_CONNECTIONS  concurrent web connections           (default 256)
  WEB_MAX_CONNECTIONS_PER_PEER  per IP address; -1 = no bound (default a quarter)
  TLS_CERT, TLS_KEY  PEM files: both ports speak TLS only (reloaded on SIGHUP and on change)
  TLS_CLIENT_CA    PEM bundle: lock-port clients must show a certificate it signed

Cluster (docs/cluster.md; without CLUSTER_PEERS or CLUSTER_JOIN the server is a single node):
  CLUSTER_PEERS    id=host:port,... the first voters (the same on every node)
  CLUSTER_JOIN     host:port of a member's web port: a node with no raft state asks to be added
  CLUSTER_TOKEN    16-127 bytes every cluster-port connection (and a join) proves it knows
  RAFT_DIR         raft's log, vote and snapshots (required in a cluster); peers.json there recovers
  NODE_ID          this node's id                        (default the host name)
  RAFT_ADDRESS     the cluster port                      (default :22121)
  RAFT_ADVERTISE   the address the other nodes dial      (default this node's CLUSTER_PEERS address)
  RAFT_TLS_CERT, RAFT_TLS_KEY, RAFT_TLS_CA  PEM files: mutual TLS on the cluster port (all three)
  DATA_PATH        in a cluster only to move a single node's log into a new cluster of one
  RAFT_HEARTBEAT_TIMEOUT  100ms..10s                     (default 500ms)
  RAFT_SNAPSHOT_THRESHOLD entries between snapshots      (default 8192)
  LEADER_WAIT      how long a connection waits for a leader (default 5s)
`

// ready is told the listeners' addresses once both listen; tests use it.
type ready func(tcp, web net.Addr)

// run serves until ctx ends or SIGTERM/SIGINT arrives, then shuts down
// cleanly and returns nil.
func run(ctx context.Context, getenv func(string) string, logger *slog.Logger, onReady ready) error {
	cfg, err := configFromEnv(getenv)
	if err != nil {
		return err
	}
	if cfg.Cluster != nil {
		return runCluster(ctx, cfg, logger, onReady)
	}
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stopSignals()
	var certs *tlsconf.Store
	if cfg.TLSCert != "" {
		if certs, err = tlsconf.Load(tlsconf.Files{Cert: cfg.TLSCert, Key: cfg.TLSKey, ClientCA: cfg.TLSClientCA}, logger); err != nil {
			return tlsError(err)
		}
		leaf := certs.Leaf()
		logger.Info("tls certificate loaded", "serial", leaf.SerialNumber.Text(16), "subject", leaf.Subject.String(),
			"not_after", leaf.NotAfter.UTC(), "client_ca", cfg.TLSClientCA != "")
	}

	meters := metrics.New(metrics.Options{WAL: cfg.DataPath != ""})
	topts := locker.Options{Now: testClock(), OnGrant: meters.ObserveWait, OnRelease: meters.ObserveHold,
		MaxSessions: cfg.MaxConnections, MaxSessionsPerPeer: cfg.MaxConnectionsPerPeer}
	// With DATA_PATH the table gets its journal now; the log behind it is
	// opened (and replayed into the table) once the web port serves, so
	// /healthz answers during a long replay and /readyz waits for it.
	var journal *walog.Journal
	if cfg.DataPath != "" {
		journal = &walog.Journal{}
		topts.Journal = journal
	}
	table := locker.New(topts)
	var replayed atomic.Bool
	srv := &wire.Server{
		Table:          table,
		RequestTimeout: cfg.RequestTimeout,
		MaxConnections: cfg.MaxConnections,
		// One peer's share: see MAX_CONNECTIONS_PER_PEER.
		MaxConnectionsPerPeer: cfg.MaxConnectionsPerPeer,
		Logger:                logger,
		Observer:              meters,
		SessionTTL:            cfg.SessionTTL,
		AuthToken:             cfg.AuthToken,
	}
	if certs != nil {
		srv.TLSConfig = certs.LockConfig()
	}

	// Keepalive probes matter only to a waiter, which wire turns them on
	// for; off here, they cost nothing to the connections that are
	// answered at once (four setsockopt calls each, ~5 % of the server's
	// CPU per lock cycle).
	lc := net.ListenConfig{KeepAlive: -1}
	tcpLn, err := lc.Listen(context.Background(), "tcp", cfg.BindAddress)
	if err != nil {
		return fmt.Errorf("BIND_ADDRESS: %w", err)
	}
	var webLn net.Listener
	var webSrv *http.Server
	if cfg.WebAddress != "" {
		if webLn, err = net.Listen("tcp", cfg.WebAddress); err != nil {
			tcpLn.Close()
			return fmt.Errorf("WEB_ADDRESS: %w", err)
		}
		webOpts := web.Options{
			Table:       table,
			StuckAfter:  cfg.StuckAfter,
			Password:    cfg.WebPassword,
			Persistent:  cfg.DataPath != "",
			Metrics:     meters,
			Connections: srv.Connections,
			Logger:      logger,
			Version:     version,
			// Not ready before the replay, nor after the log failed: the
			// engine then answers '-' to every lock until a restart.
			Ready:                 func() bool { return replayed.Load() && journal.Healthy() },
			LogStats:              func() web.LogStats { return logStats(journal) },
			ListenAddress:         cfg.WebAddress,
			AllowedHosts:          cfg.WebAllowedHosts,
			MaxConnections:        cfg.WebMaxConnections,
			MaxConnectionsPerPeer: cfg.WebMaxConnectionsPerPeer,
		}
		if certs != nil {
			webOpts.TLSConfig = certs.WebConfig()
		}
		webSrv = web.NewHTTPServer(web.New(webOpts))
		webLn = webOpts.Listener(webLn) // bounded, per peer too
	}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	if certs != nil {
		// SIGHUP and a change of the files reload the certificates; each
		// new handshake takes the set in use, open connections keep theirs.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { certs.Watch(watchCtx, certPoll, hup) })
	}
	if webSrv != nil {
		wg.Go(func() {
			if err := webSrv.Serve(webLn); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("web: %w", err)
			}
		})
	}

	var serveErr error
	if cfg.DataPath != "" {
		// A corrupt log stops the start: the error names the file and the
		// byte offset (walog.CorruptError), and main exits non-zero.
		start := time.Now()
		l, err := journal.Open(cfg.DataPath, walog.Options{OnFsync: meters.ObserveFsync, Logger: logger}, table)
		if err != nil {
			serveErr = fmt.Errorf("DATA_PATH: %w", err)
			tcpLn.Close() // never served, so Shutdown does not know it
		} else {
			logger.Info("write-ahead log replayed", "file", cfg.DataPath, "held_keys", table.Stats().Held,
				"sessions", table.Stats().Sessions, "bytes", l.Stats().SizeBytes, "took", time.Since(start).Round(time.Millisecond))
		}
	}
	expiryCtx, stopExpiry := context.WithCancel(context.Background())
	defer stopExpiry()
	if serveErr == nil {
		wg.Go(func() { table.RunExpiry(expiryCtx) })
	}
	if serveErr == nil {
		replayed.Store(true)
		logger.Info("locking-center started", "version", version, "bind", tcpLn.Addr().String(),
			"web", addrOrOff(webLn), "persistence", cfg.DataPath != "", "max_connections", cfg.MaxConnections,
			"max_connections_per_peer", cfg.MaxConnectionsPerPeer, "tls", certs != nil)
		logReach(logger, cfg, tcpLn, webLn)
		wg.Go(func() {
			if err := srv.Serve(tcpLn); !errors.Is(err, wire.ErrServerClosed) {
				errc <- fmt.Errorf("lock protocol: %w", err)
			}
		})
		if onReady != nil {
			var wa net.Addr
			if webLn != nil {
				wa = webLn.Addr()
			}
			onReady(tcpLn.Addr(), wa)
		}
		select {
		case <-ctx.Done():
			logger.Info("shutting down")
		case serveErr = <-errc:
		}
	}

	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		logger.Warn("lock protocol shutdown", "err", err)
	}
	if webSrv != nil {
		if err := webSrv.Shutdown(shutCtx); err != nil {
			logger.Warn("web shutdown", "err", err)
		}
	}
	stopExpiry()
	stopWatch()
	wg.Wait()
	// Every acknowledged record is already fsynced; Close answers what is
	// still queued and closes the file.
	if err := journal.Close(); err != nil {
		logger.Warn("write-ahead log close", "err", err)
	}
	if serveErr != nil {
		return serveErr // main logs it as the reason the server stopped
	}
	logger.Info("stopped")
	return nil
}

// certPoll is how often the TLS files are checked for a change.
const certPoll = time.Second

// tlsError names the variable of the file tlsconf refused.
func tlsError(err error) error {
	var fe *tlsconf.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("TLS_CERT: %w", err)
	}
	name := map[tlsconf.Role]string{tlsconf.Cert: "TLS_CERT", tlsconf.Key: "TLS_KEY", tlsconf.ClientCA: "TLS_CLIENT_CA"}[fe.Role]
	return fmt.Errorf("%s: %w", name, err)
}

// logStats reads the log's counters for the web layer (zero before the
// log is open, and without DATA_PATH).
func logStats(j *walog.Journal) web.LogStats {
	l := j.Log()
	if l == nil {
		return web.LogStats{}
	}
	st := l.Stats()
	return web.LogStats{SizeBytes: st.SizeBytes, Compactions: st.Compactions, Errors: st.Errors}
}

// healthcheck GETs /readyz on the web port named by the environment and
// returns the exit status: 0 on 200, 1 otherwise. It is the container
// HEALTHCHECK, because distroless and scratch images have no curl.
func healthcheck(getenv func(string) string) int {
	cfg, err := configFromEnv(getenv)
	if err == nil && cfg.WebAddress == "" {
		err = errors.New("WEB_ADDRESS is off: nothing to probe")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	base, hc := localWeb(cfg)
	url := base + "/readyz"
	resp, err := hc.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "healthcheck: %s answered %s\n", url, resp.Status)
		return 1
	}
	return 0
}

// localWeb returns the base URL of this host's own web port (WEB_ADDRESS,
// on loopback when it listens on every address) and a client for it.
func localWeb(cfg config) (string, *http.Client) {
	host, port, _ := net.SplitHostPort(cfg.WebAddress) // checked by configFromEnv
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1" // a wildcard listener answers on loopback
	}
	scheme, hc := "http", &http.Client{Timeout: 3 * time.Second}
	if cfg.TLSCert != "" {
		// The probe asks this host's own server and sends its password
		// to it alone (a loopback or this host's address): whose
		// certificate answers does not matter, and the one in use may
		// not name 127.0.0.1.
		scheme = "https"
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}} //nolint:gosec // see above
	}
	return scheme + "://" + net.JoinHostPort(host, port), hc
}

// logReach says in one line who can reach the two ports and what protects
// them: a warning when a port is open beyond this host with nothing.
func logReach(logger *slog.Logger, cfg config, tcpLn, webLn net.Listener) {
	lock := reach(tcpLn.Addr())
	open := !isLoopback(tcpLn.Addr())
	switch {
	case cfg.TLSClientCA != "":
		lock += "; mutual TLS: clients must show a certificate TLS_CLIENT_CA signed"
	case cfg.TLSCert != "":
		lock += "; TLS"
	}
	if cfg.AuthToken != "" {
		lock += "; sessions must present AUTH_TOKEN, v1 frames refused"
	} else if cfg.TLSClientCA == "" {
		lock += "; no AUTH_TOKEN: whoever reaches it can lock, unlock and reset any key"
	}
	protected := cfg.AuthToken != "" || cfg.TLSClientCA != ""
	web := "off"
	if webLn != nil {
		web = reach(webLn.Addr())
		if cfg.TLSCert != "" {
			web += "; TLS"
		}
		open = open || !isLoopback(webLn.Addr())
		if cfg.WebPassword != "" {
			web += "; basic auth (user admin), /healthz and /readyz open"
		} else {
			web += "; no WEB_PASSWORD: whoever reaches it can read every key and reset it"
			protected = false
		}
	}
	lvl := slog.LevelInfo
	if open && !protected {
		lvl = slog.LevelWarn
	}
	logger.Log(context.Background(), lvl, "who can reach locking-center", "lock", lock, "web", web)
}

// reach names who can reach a listener's address.
func reach(a net.Addr) string {
	if isLoopback(a) {
		return a.String() + ", this host only"
	}
	if t, ok := a.(*net.TCPAddr); ok && t.IP.IsUnspecified() {
		return fmt.Sprintf("every interface (:%d)", t.Port)
	}
	return a.String() + ", whoever can route to it"
}

func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

func addrOrOff(l net.Listener) string {
	if l == nil {
		return "off"
	}
	return l.Addr().String()
}

// config is the server's configuration (the README's Configuration section).
type config struct {
	BindAddress    string
	WebAddress     string // "" when the web port is off
	DataPath       string // "" keeps the lock table in memory only
	StuckAfter     time.Duration
	MaxConnections int
	// MaxConnectionsPerPeer bounds the lock port's connections from one
	// IP address (wire.Server.MaxConnectionsPerPeer; 0: no bound).
	MaxConnectionsPerPeer int
	RequestTimeout        time.Duration
	WebPassword           string
	SessionTTL            time.Duration
	AuthToken             string
	// The web port's Host allow-list and connection bounds (web.Options).
	WebAllowedHosts          []string
	WebMaxConnections        int
	WebMaxConnectionsPerPeer int
	// TLS files: both set or neither ("" keeps both ports plain);
	// TLSClientCA only with them.
	TLSCert, TLSKey, TLSClientCA string
	// Cluster is set with CLUSTER_PEERS: this server is one node of a
	// cluster (main_cluster.go). nil: the single-node server.
	Cluster *clusterConfig
}

// configFromEnv reads the configuration; every error names its variable.
func configFromEnv(getenv func(string) string) (config, error) {
	c := config{
		BindAddress:    ":22119",
		WebAddress:     ":22120",
		StuckAfter:     10 * time.Minute,
		MaxConnections: 10000,
		RequestTimeout: 10 * time.Second,
		DataPath:       getenv("DATA_PATH"),
		WebPassword:    getenv("WEB_PASSWORD"),
		SessionTTL:     10 * time.Second,
		AuthToken:      getenv("AUTH_TOKEN"),
		TLSCert:        getenv("TLS_CERT"),
		TLSKey:         getenv("TLS_KEY"),
		TLSClientCA:    getenv("TLS_CLIENT_CA"),
	}
	switch {
	case c.TLSCert != "" && c.TLSKey == "":
		return c, errors.New("TLS_KEY: unset while TLS_CERT is set; set both (TLS on) or neither")
	case c.TLSKey != "" && c.TLSCert == "":
		return c, errors.New("TLS_CERT: unset while TLS_KEY is set; set both (TLS on) or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return c, errors.New("TLS_CLIENT_CA: set without TLS_CERT and TLS_KEY, which mutual TLS needs")
	}
	if n := len(c.AuthToken); getenv("AUTH_TOKEN") != "" && n > 127 {
		return c, fmt.Errorf("AUTH_TOKEN: %d bytes, want 1 to 127", n)
	}
	var err error
	if v := getenv("BIND_ADDRESS"); v != "" {
		if err = checkAddress(v); err != nil {
			return c, fmt.Errorf("BIND_ADDRESS=%q: %w", v, err)
		}
		c.BindAddress = v
	}
	switch v := getenv("WEB_ADDRESS"); v {
	case "":
	case "off":
		c.WebAddress = ""
	default:
		if err = checkAddress(v); err != nil {
			return c, fmt.Errorf("WEB_ADDRESS=%q: %w (or \"off\" to disable the web port)", v, err)
		}
		c.WebAddress = v
	}
	if c.StuckAfter, err = envDuration(getenv, "STUCK_AFTER", c.StuckAfter); err != nil {
		return c, err
	}
	if c.RequestTimeout, err = envDuration(getenv, "REQUEST_TIMEOUT", c.RequestTimeout); err != nil {
		return c, err
	}
	if c.SessionTTL, err = envDuration(getenv, "SESSION_TTL", c.SessionTTL); err != nil {
		return c, err
	}
	if c.SessionTTL < time.Second || c.SessionTTL > 10*time.Minute {
		return c, fmt.Errorf("SESSION_TTL=%q: want a duration from 1s to 10m", getenv("SESSION_TTL"))
	}
	for _, h := range strings.Split(getenv("WEB_ALLOWED_HOSTS"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.WebAllowedHosts = append(c.WebAllowedHosts, h)
		}
	}
	if v := getenv("WEB_MAX_CONNECTIONS"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 {
			return c, fmt.Errorf("WEB_MAX_CONNECTIONS=%q: want a whole number of at least 1", v)
		}
		c.WebMaxConnections = n
	}
	if v := getenv("WEB_MAX_CONNECTIONS_PER_PEER"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < -1 || n == 0 {
			return c, fmt.Errorf("WEB_MAX_CONNECTIONS_PER_PEER=%q: want a whole number of at least 1, or -1 for no per-address bound", v)
		}
		c.WebMaxConnectionsPerPeer = n
	}
	if v := getenv("MAX_CONNECTIONS"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < 1 {
			return c, fmt.Errorf("MAX_CONNECTIONS=%q: want a whole number of at least 1", v)
		}
		c.MaxConnections = n
	}
	// A quarter of MAX_CONNECTIONS by default, as on the web port, so that
	// one peer holding stalled sockets leaves the rest to everyone else.
	c.MaxConnectionsPerPeer = max(1, c.MaxConnections/4)
	if v := getenv("MAX_CONNECTIONS_PER_PEER"); v != "" {
		n, perr := strconv.Atoi(v)
		if perr != nil || n < -1 || n == 0 {
			return c, fmt.Errorf("MAX_CONNECTIONS_PER_PEER=%q: want a whole number of at least 1, or -1 for no per-address bound", v)
		}
		c.MaxConnectionsPerPeer = max(n, 0) // -1: no bound, wire's 0
	}
	if c.Cluster, err = clusterFromEnv(getenv, c); err != nil {
		return c, err
	}
	return c, nil
}

func envDuration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return def, fmt.Errorf("%s=%q: want a positive duration such as 10s or 5m", name, v)
	}
	return d, nil
}

func checkAddress(v string) error {
	_, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("want HOST:PORT or :PORT: %w", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}
