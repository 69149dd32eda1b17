package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/locking-center/locking-center/web/api"
)

// Peers reaches the web ports of the other nodes of a cluster through
// Dial, which connects to a node's web handler given its cluster-port
// address (over the cluster port, authenticated by CLUSTER_TOKEN): a node
// needs no other node's web address, and none is configured. Close ends
// its idle connections.
type Peers struct {
	tr  *http.Transport
	log *slog.Logger
}

// NewPeers returns Peers that connect through dial; log receives the
// failures of forwarded requests.
func NewPeers(dial func(ctx context.Context, address string) (net.Conn, error), log *slog.Logger) *Peers {
	if log == nil {
		log = slog.Default()
	}
	tr := &http.Transport{
		// The pool is keyed by the cluster-port address in the URL: a new
		// leader gets connections of its own.
		DialContext: func(ctx context.Context, _, hostport string) (net.Conn, error) {
			return dial(ctx, hostport)
		},
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true, // the browser's Accept-Encoding passes through as it is
	}
	return &Peers{tr: tr, log: log}
}

// Close closes the idle connections to the other nodes.
func (p *Peers) Close() { p.tr.CloseIdleConnections() }

// ToLeader returns the handler that serves each request at the leader,
// whose id and cluster-port address leader returns: a reverse proxy whose
// answer, headers and status included, is the leader's. With no leader
// known, or when it cannot be reached, it answers 503 with X-LC-Leader
// (empty when none is known).
func (p *Peers) ToLeader(leader func() (id, address string)) http.Handler {
	type target struct{ id, address string }
	type key struct{}
	rp := &httputil.ReverseProxy{
		Transport: p.tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(key{}).(target)
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", t.address
			pr.Out.Host = pr.In.Host // the leader checks the Host and Origin the browser sent
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(key{}).(target)
			p.log.Warn("web: a request forwarded to the leader failed", "leader", t.id, "method", r.Method,
				"path", r.URL.Path, "err", err)
			w.Header().Set("X-LC-Leader", t.id)
			http.Error(w, "503 service unavailable: the leader, node "+strconv.Quote(t.id)+
				", could not be reached to serve this request: try again shortly", http.StatusServiceUnavailable)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, address := leader()
		if id == "" || address == "" {
			w.Header().Set("X-LC-Leader", "")
			http.Error(w, "503 service unavailable: no leader is known: try again shortly", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), key{}, target{id, address})))
	})
}

// maxStatus bounds a node's answer to GET /api/v1/cluster.
const maxStatus = 1 << 20

// Status asks the node whose cluster port is at address for its own view
// of the cluster (Cluster.Peer).
func (p *Peers) Status(ctx context.Context, address string) (api.Cluster, error) {
	var st api.Cluster
	u := url.URL{Scheme: "http", Host: address, Path: "/api/v1/cluster"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return st, fmt.Errorf("status of %s: %w", address, err)
	}
	resp, err := p.tr.RoundTrip(req)
	if err != nil {
		return st, fmt.Errorf("status of %s: %w", address, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status of %s: %s", address, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatus)).Decode(&st); err != nil {
		return st, fmt.Errorf("status of %s: %w", address, err)
	}
	return st, nil
}
