package web

import (
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
)

// Options configures the web handler. Table is required; the rest has
// usable zero values.
type Options struct {
	// Table is the lock table shown and reset.
	Table *locker.Table
	// StuckAfter is the hold age from which a key counts as stuck
	// (default 10 minutes).
	StuckAfter time.Duration
	// Password, when set, turns on HTTP basic auth (user "admin") on every
	// route but /healthz and /readyz.
	Password string
	// Persistent says whether the table is backed by a write-ahead log.
	Persistent bool
	// LogStats, when Persistent, reports the log's figures for the
	// dashboard and the wal_* metrics.
	LogStats func() LogStats
	// Metrics receives the web resets and is served on /metrics; nil
	// creates a private one (the TCP side then counts nothing in it).
	Metrics *metrics.Metrics
	// Connections reports the TCP connections being served (the
	// connections gauge); nil reports 0.
	Connections func() int
	// Ready reports readiness for /readyz; nil means always ready.
	Ready func() bool
	// Logger receives one line per reset and per failed request
	// (default slog.Default).
	Logger *slog.Logger
	// Version is shown in the page footer.
	Version string
	// ListenAddress is the address the web port listens on (WEB_ADDRESS,
	// e.g. ":22120" or "dash.internal:22120"). When its host is a name,
	// that name is allowed in the Host header; see AllowedHosts.
	ListenAddress string
	// AllowedHosts are further names the web port answers for, besides
	// IP address literals, "localhost" (and names under ".localhost"),
	// the host of ListenAddress and the machine's host name: the names
	// of a reverse proxy or DNS entry that points here. "*.example.com"
	// allows every name under example.com; "*" turns the Host check off.
	// A port in an entry is ignored. Requests for any other Host are
	// refused with 421 (a guard against DNS rebinding), except /healthz
	// and /readyz, which probes reach by any name.
	AllowedHosts []string
	// MaxConnections bounds the web port's concurrent connections
	// (DefaultMaxConnections when 0) and MaxConnectionsPerPeer those from
	// one IP address (a quarter of MaxConnections when 0, -1 for no
	// per-peer bound). They take effect through Options.Listener.
	MaxConnections        int
	MaxConnectionsPerPeer int
	// TLSConfig, when set, makes Options.Listener's connections TLS (the
	// web port speaks TLS only then); refusals are answered inside it.
	TLSConfig *tls.Config
	// Cluster, when set, answers GET /api/v1/cluster with what it returns,
	// as JSON (a cluster node's status, SPEC §8.7).
	Cluster func() any
	// Membership, when set, serves the cluster's membership routes
	// (cluster_routes.go).
	Membership *Membership

	// now is the clock; tests replace it.
	now func() time.Time
	// exactBelow overrides the package's exactBelow; tests lower it.
	exactBelow int
}

// gauges are the figures /metrics shows, read from what the dashboard
// shows, so that the two never disagree.
func (s *server) gauges() metrics.Gauges {
	now := s.now()
	v := s.view(selection{}, now) // the figures only, no rows
	st := s.opts.Table.Stats()
	g := metrics.Gauges{Held: v.Held, Waiting: v.Waiting, Stuck: v.Stuck, Connections: -1,
		Sessions: st.Sessions, SessionExpirations: st.SessionExpirations}
	if !v.Oldest.IsZero() {
		g.OldestAge = now.Sub(v.Oldest)
	}
	if s.opts.Connections != nil {
		g.Connections = s.opts.Connections()
	}
	if s.opts.Persistent && s.opts.LogStats != nil {
		ls := s.opts.LogStats()
		g.WALSize, g.WALCompactions, g.WALErrors = ls.SizeBytes, ls.Compactions, ls.Errors
	}
	return g
}

// LogStats are the write-ahead log's figures, as the web package needs them.
type LogStats struct {
	// SizeBytes is the size of the log file.
	SizeBytes int64
	// Compactions counts the log's completed compactions since start.
	Compactions uint64
	// Errors counts the log's failed writes, fsyncs and compactions.
	Errors uint64
}

// server is the handler returned by New.
type server struct {
	opts     Options
	started  time.Time
	log      *slog.Logger
	metrics  *metrics.Metrics
	mux      *http.ServeMux
	handler  http.Handler
	hosts    hostPolicy
	catalogs *catalogs
	// flashKey signs the outcome of an action in the redirect after it.
	flashKey [32]byte

	// Refusals are logged at most once a second each, with the count of
	// the lines held back, so that a flood does not flood the log.
	authLog, hostLog logLimiter
}

// New returns the handler of the web port: dashboard, JSON API, /metrics,
// /healthz and /readyz, behind the CSRF check and, with a password, basic
// auth.
func New(opts Options) http.Handler {
	if opts.Table == nil {
		panic("web.New: Options.Table is nil")
	}
	if opts.StuckAfter <= 0 {
		opts.StuckAfter = 10 * time.Minute
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	s := &server{opts: opts, started: opts.now(), log: opts.Logger, metrics: opts.Metrics,
		hosts: newHostPolicy(opts.ListenAddress, opts.AllowedHosts), flashKey: newFlashKey(),
		authLog: logLimiter{interval: time.Second}, hostLog: logLimiter{interval: time.Second}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.exactBelow == 0 {
		opts.exactBelow = exactBelow
	}
	s.catalogs = &catalogs{table: opts.Table, exactBelow: opts.exactBelow}
	if s.metrics == nil {
		s.metrics = metrics.New(metrics.Options{WAL: opts.Persistent})
	}
	s.metrics.SetSource(s.gauges)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metrics)

	mux.HandleFunc("GET /api/v1/keys", s.apiList)
	mux.HandleFunc("GET /api/v1/keys/{key...}", s.apiKey)
	mux.HandleFunc("POST /api/v1/reset/key", s.apiResetKey)
	mux.HandleFunc("POST /api/v1/reset/source", s.apiResetSource)
	mux.HandleFunc("GET /api/v1/sessions", s.apiSessions)
	mux.HandleFunc("POST /api/v1/sessions/{session}/end", s.apiEndSession)
	s.registerCluster(mux)

	s.routes(mux)
	s.mux = mux

	// CrossOriginProtection lets safe methods through and refuses
	// state-changing requests that a browser marks as cross-origin
	// (Sec-Fetch-Site, or Origin against Host). Tools that send neither
	// header, such as curl or the CLI, are not browsers and pass.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(s.crossOrigin))
	s.handler = cop.Handler(mux)
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	probe := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
	if !probe && !s.hosts.allows(r.Host) {
		s.misdirected(w, r)
		return
	}
	// A node's join proves CLUSTER_TOKEN instead (apiAddNode checks it).
	if s.opts.Password != "" && !probe && !s.isJoin(r) && !s.authorized(w, r) {
		return
	}
	s.handler.ServeHTTP(w, r)
}

// misdirected refuses a request for a Host this server does not answer.
func (s *server) misdirected(w http.ResponseWriter, r *http.Request) {
	if ok, held := s.hostLog.allow(s.now()); ok {
		s.log.Warn("web request refused: unknown Host", "host", r.Host, "method", r.Method, "path", r.URL.Path,
			"peer", r.RemoteAddr, "held_back", held)
	}
	http.Error(w, fmt.Sprintf("421 misdirected request: this server does not answer for the host name %q "+
		"(a guard against DNS rebinding). If that is a name of this server, add it to its allowed hosts "+
		"(WEB_ALLOWED_HOSTS); an IP address or localhost always works.", r.Host), http.StatusMisdirectedRequest)
}

// authorized checks basic auth and answers 401 when it fails. It compares
// in constant time so that the answer's timing tells nothing about the
// password. A wrong user or password is logged (a browser's first request,
// which carries none, is not an attempt and is not).
func (s *server) authorized(w http.ResponseWriter, r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if ok {
		u := subtle.ConstantTimeCompare([]byte(user), []byte("admin"))
		p := subtle.ConstantTimeCompare([]byte(pass), []byte(s.opts.Password))
		if u&p == 1 {
			return true
		}
		if allow, held := s.authLog.allow(s.now()); allow {
			s.log.Warn("web request refused: wrong user or password", "user", user, "method", r.Method,
				"path", r.URL.Path, "peer", r.RemoteAddr, "held_back", held)
		}
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="locking-center", charset="UTF-8"`)
	http.Error(w, "401 unauthorized: this server asks for a password (user admin)", http.StatusUnauthorized)
	return false
}

func (s *server) crossOrigin(w http.ResponseWriter, r *http.Request) {
	s.log.Warn("web request refused: cross-origin", "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "peer", r.RemoteAddr)
	http.Error(w, "403 forbidden: cross-origin request refused", http.StatusForbidden)
}

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Ready != nil && !s.opts.Ready() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

func (s *server) now() time.Time { return s.opts.now() }
