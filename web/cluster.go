package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a-h/templ"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
)

// Cluster is what the web port of a cluster node shows and does (SPEC
// §8.4, §8.8); Options.Cluster is nil on a single node, whose pages and
// answers it leaves as they are.
//
// On the leader, Table is its engine's. On a follower it is the node's
// applied state (Follower): reads are served from it with the headers
// X-LC-Leader (the leader's node id, "" when none is known) and
// X-LC-Applied-Index (the last entry it shows), and the pages say "as of
// index N"; every state-changing request, every read with ?consistent=1,
// and the sessions (whose connections and TTL clocks are the leader's) are
// served by the leader through ToLeader.
type Cluster struct {
	// Node is this node's id.
	Node string
	// Leader returns the id of the leader this node knows of, "" when
	// none.
	Leader func() string
	// Follower says that Table is this node's applied state, not the
	// leader's engine.
	Follower bool
	// AppliedIndex returns the index of the last entry that Table shows
	// (on the leader, raft's applied index).
	AppliedIndex func() uint64
	// Status returns this node's own view of the cluster.
	Status func() api.Cluster
	// Peer asks the node whose cluster port is at address for its own
	// view (GET /api/v1/cluster over the cluster port); nil shows only
	// what this node knows.
	Peer func(ctx context.Context, address string) (api.Cluster, error)
	// ToLeader serves a request at the leader's web port; nil answers
	// 503.
	ToLeader http.Handler
	// Confirm, on the leader, is called before an answer that changes
	// nothing (a reset that found nothing, an unknown session): it checks
	// that this node still leads (SPEC §8.1), as the lock port does. An
	// error answers 503 instead.
	Confirm func() error
}

// errNotConfirmed wraps a Confirm failure: the answer that changes nothing
// could not be given (503).
var errNotConfirmed = errors.New("this node could not confirm that it still leads the cluster, so it cannot say that nothing changed: try again")

// confirmNothing is called before an answer that changes nothing; it
// returns an error wrapping errNotConfirmed when Confirm fails.
func (s *server) confirmNothing() error {
	c := s.opts.Cluster
	if c == nil || c.Confirm == nil {
		return nil
	}
	if err := c.Confirm(); err != nil {
		return fmt.Errorf("%w (%w)", errNotConfirmed, err)
	}
	return nil
}

// failStatus is the status of a failed reset or session end: 503 when its
// outcome is not known or could not be confirmed (SPEC §8.5: never an
// answer that says nothing changed), 500 when the journal refused it.
func failStatus(err error) int {
	if errors.Is(err, errNotConfirmed) || errors.Is(err, locker.ErrOutcomeUnknown) {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// failMessage explains a failed reset or session end on a page.
func failMessage(err error, res locker.ResetResult) error {
	switch {
	case errors.Is(err, errNotConfirmed):
		return err
	case errors.Is(err, locker.ErrOutcomeUnknown):
		return fmt.Errorf("%w; it may still take effect: look again before you retry", err)
	}
	return fmt.Errorf("%w; what could not be recorded is still held (released %d, refused %d)", err, res.Released, res.Refused)
}

// peerKey marks a request that came over the cluster port.
type peerKey struct{}

// FromPeer marks every request h serves as one from another node of the
// cluster, over the cluster port (already authenticated by CLUSTER_TOKEN):
// it passes without basic auth and the Host check (the forwarding node did
// both), and a follower never forwards it again.
func FromPeer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, true)))
	})
}

func fromPeer(r *http.Request) bool { v, _ := r.Context().Value(peerKey{}).(bool); return v }

// clusterInfo is what a page's frame shows of the cluster: which node
// served it, who leads, and for a follower the index its figures are as
// of and where to see the leader's.
type clusterInfo struct {
	Node, Leader string
	Follower     bool
	Applied      uint64
	// Consistent is this page's query with consistent=1, a URL relative
	// to the page: the leader's view of it.
	Consistent string
}

type clusterCtxKey struct{}

// clusterOf returns the cluster info of the page being rendered, nil on
// a single node.
func clusterOf(ctx context.Context) *clusterInfo {
	ci, _ := ctx.Value(clusterCtxKey{}).(*clusterInfo)
	return ci
}

// follower says whether the page being rendered shows a follower's
// applied state, which has no wait queues.
func follower(ctx context.Context) bool {
	ci := clusterOf(ctx)
	return ci != nil && ci.Follower
}

// withCluster adds the cluster info for a page of r to ctx.
func (s *server) withCluster(ctx context.Context, r *http.Request) context.Context {
	c := s.opts.Cluster
	if c == nil {
		return ctx
	}
	ci := &clusterInfo{Node: c.Node, Leader: c.Leader(), Follower: c.Follower, Applied: c.AppliedIndex()}
	q := r.URL.Query()
	q.Set("consistent", "1")
	ci.Consistent = "?" + q.Encode() // relative: this page's path
	return context.WithValue(ctx, clusterCtxKey{}, ci)
}

// toLeader says whether a follower serves r at the leader: every
// state-changing request, reads with ?consistent=1, and the sessions.
// Probes, metrics and assets are always this node's.
func toLeader(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/healthz", p == "/readyz", p == "/metrics", strings.HasPrefix(p, "/assets/"):
		return false
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return true
	case r.URL.Query().Get("consistent") == "1":
		return true
	}
	return p == "/api/v1/sessions" || p == "/sessions" || strings.HasPrefix(p, "/sessions/")
}

// clusterRoute serves r on a cluster node: at the leader when toLeader
// says so, or here with the X-LC-Leader and X-LC-Applied-Index headers.
func (s *server) clusterRoute(next http.Handler) http.Handler {
	c := s.opts.Cluster
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leader := c.Leader()
		if c.Follower && toLeader(r) {
			// leader == c.Node: raft says this node leads, but its engine
			// does not serve yet (its takeover barrier).
			if leader != "" && leader != c.Node && c.ToLeader != nil && !fromPeer(r) {
				c.ToLeader.ServeHTTP(w, r) // the leader's headers come back with its answer
				return
			}
			w.Header().Set("X-LC-Leader", leader)
			msg := "503 service unavailable: this node does not lead the cluster"
			switch {
			case leader == "":
				msg += ", and no leader is known: try again shortly"
			case leader == c.Node:
				msg = "503 service unavailable: this node is taking the leadership over: try again shortly"
			case fromPeer(r):
				msg += " (a request forwarded to it is not forwarded again)"
			default:
				msg += "; the leader is node " + strconv.Quote(leader)
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-LC-Leader", leader)
		w.Header().Set("X-LC-Applied-Index", strconv.FormatUint(c.AppliedIndex(), 10))
		next.ServeHTTP(w, r)
	})
}

// peerTimeout bounds the wait for another node's view of the cluster: a
// node that is frozen or cut off delays a status by this much at most
// (and shows null), while probes and tools that ask for it with a timeout
// of a second still get it.
const peerTimeout = 500 * time.Millisecond

// clusterStatus returns this node's view of the cluster; with peers, each
// other node's applied index and last contact with the leader come from
// its own answer (raft does not publish its followers' figures), asked in
// parallel within peerTimeout. A node that does not answer keeps what
// Status knew of it (null when nothing).
func (s *server) clusterStatus(ctx context.Context, peers bool) api.Cluster {
	c := s.opts.Cluster
	st := c.Status()
	if st.Nodes == nil {
		st.Nodes = []api.ClusterMember{}
	}
	// This node's contact with the leader is what its Status gives for
	// the leader's entry.
	var own *int64
	if st.State == "leader" {
		own = new(int64)
	}
	for i := range st.Nodes {
		if n := &st.Nodes[i]; n.Leader && n.ID != st.Node && n.LastContactMS != nil {
			v := *n.LastContactMS
			own = &v
		}
	}
	var mu sync.Mutex // guards st.Nodes' pointers while peers answer
	var wg sync.WaitGroup
	for i := range st.Nodes {
		n := &st.Nodes[i]
		if n.ID == st.Node {
			applied := st.AppliedIndex
			n.AppliedIndex, n.LastContactMS = &applied, own
			continue
		}
		// What Status knew of it stays unless the node answers itself.
		if !peers || c.Peer == nil || n.Address == "" {
			continue
		}
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, peerTimeout)
			defer cancel()
			ps, err := c.Peer(pctx, n.Address)
			if err != nil || ps.Node != n.ID {
				if err != nil {
					s.log.Debug("cluster: a node did not tell its status", "node", n.ID, "err", err)
				}
				return
			}
			// Its own entry in its answer carries its contact with the
			// leader (this function's normal form).
			applied := ps.AppliedIndex
			var contact *int64
			for _, pn := range ps.Nodes {
				if pn.ID == ps.Node && pn.LastContactMS != nil {
					v := *pn.LastContactMS
					contact = &v
				}
			}
			mu.Lock()
			n.AppliedIndex, n.LastContactMS = &applied, contact
			mu.Unlock()
		})
	}
	wg.Wait()
	return st
}

func (s *server) apiCluster(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.clusterStatus(r.Context(), !fromPeer(r)))
}

// clusterData is the cluster page.
type clusterData struct {
	chrome
	Status api.Cluster
	Rows   []clusterRow
	Flash  *flash
}

// clusterRow is one node as the cluster page shows it.
type clusterRow struct {
	ID, Address, Role string
	Leader, Self      bool
	Voter             bool
	// Contact, Applied and Lag are shown as they are ("—" when the node
	// did not tell).
	Contact, Applied, Lag string
}

// clusterRows lays st's nodes out. Lag is how many entries a node has
// applied fewer than the leader (than this node's commit index when the
// leader did not tell).
func clusterRows(st api.Cluster) []clusterRow {
	ref := st.CommitIndex
	for _, n := range st.Nodes {
		if n.Leader && n.AppliedIndex != nil {
			ref = *n.AppliedIndex
		}
	}
	rows := make([]clusterRow, 0, len(st.Nodes))
	for _, n := range st.Nodes {
		r := clusterRow{ID: n.ID, Address: n.Address, Leader: n.Leader, Self: n.ID == st.Node,
			Voter: n.Suffrage == "voter", Role: "follower", Contact: "—", Applied: "—", Lag: "—"}
		if r.Self {
			r.Role = st.State
		}
		if n.LastContactMS != nil {
			r.Contact = shortDuration(time.Duration(*n.LastContactMS) * time.Millisecond)
			if n.Leader {
				r.Contact = "leads"
			}
		}
		if n.AppliedIndex != nil {
			r.Applied = strconv.FormatUint(*n.AppliedIndex, 10)
			r.Lag = strconv.FormatUint(ref-min(ref, *n.AppliedIndex), 10)
		}
		rows = append(rows, r)
	}
	return rows
}

func (s *server) clusterPage(w http.ResponseWriter, r *http.Request) {
	st := s.clusterStatus(r.Context(), true)
	d := clusterData{chrome: chrome{Title: "Cluster", Version: s.opts.Version, Live: true}, Status: st, Rows: clusterRows(st)}
	if isLive(r) {
		s.render(w, r, http.StatusOK, clusterLive(d))
		return
	}
	d.Flash = s.openFlash(r.URL.Query().Get("done"), s.now())
	s.render(w, r, http.StatusOK, clusterPage(d))
}

// clusterNav is the top bar's link to the cluster page, on a cluster node
// only (a single node's pages stay as they were, byte for byte).
func clusterNav() templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		if clusterOf(ctx) == nil {
			return nil
		}
		_, err := io.WriteString(w, ` <a href="/cluster">Cluster</a>`)
		return err
	})
}
