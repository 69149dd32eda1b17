package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/web/api"
)

// fakeMembers records the membership changes asked of it.
type fakeMembers struct {
	mu    sync.Mutex // guards calls
	calls []string
	err   error
}

func (m *fakeMembers) membership() *Membership {
	record := func(c string) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.calls = append(m.calls, c)
		return m.err
	}
	return &Membership{
		Transfer: func(id string) (string, error) { return id, record("transfer " + id) },
		Remove:   func(id string) error { return record("remove " + id) },
		Add:      func(id, _ string) error { return record("add " + id) },
	}
}

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// threeNodes is node n1's view of a cluster that n2 leads.
func threeNodes(self, state string) api.Cluster {
	return api.Cluster{Node: self, State: state, Leader: "10.0.0.2:22121", LeaderID: "n2", Term: 7, CommitIndex: 120,
		AppliedIndex: 118, LastIndex: 121, Nodes: []api.ClusterMember{
			{ID: "n1", Address: "10.0.0.1:22121", Suffrage: "voter"},
			{ID: "n2", Address: "10.0.0.2:22121", Suffrage: "voter", Leader: true, LastContactMS: i64(40)},
			{ID: "n3", Address: "10.0.0.3:22121", Suffrage: "nonvoter"},
		}}
}

// peerViews are the other nodes' own answers.
var peerViews = map[string]api.Cluster{
	"10.0.0.2:22121": {Node: "n2", State: "leader", AppliedIndex: 120, CommitIndex: 120,
		Nodes: []api.ClusterMember{{ID: "n2", Leader: true, LastContactMS: i64(0)}}},
	"10.0.0.3:22121": {Node: "n3", State: "follower", AppliedIndex: 100,
		Nodes: []api.ClusterMember{{ID: "n3", LastContactMS: i64(250)}, {ID: "n2", Leader: true, LastContactMS: i64(250)}}},
}

func clusterFixture(t *testing.T, follower bool, leaderID string, toLeader http.Handler, m *fakeMembers) *fixture {
	return newFixture(t, func(o *Options) {
		o.Cluster = &Cluster{
			Node:         "n1",
			Leader:       func() string { return leaderID },
			Follower:     follower,
			AppliedIndex: func() uint64 { return 118 },
			Status: func() api.Cluster {
				return threeNodes("n1", map[bool]string{true: "follower", false: "leader"}[follower])
			},
			Peer: func(_ context.Context, address string) (api.Cluster, error) {
				if st, ok := peerViews[address]; ok {
					return st, nil
				}
				return api.Cluster{}, errors.New("unreachable")
			},
			ToLeader: toLeader,
		}
		if m != nil {
			o.Membership = m.membership()
		}
	})
}

// TestFollowerWeb: a follower serves reads from its table with its
// headers and "as of index", shows no queue as if it were empty, and hands
// writes, ?consistent=1 and the sessions to the leader, or answers 503.
func TestFollowerWeb(t *testing.T) {
	var mu sync.Mutex // guards got
	var got []string
	toLeader := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("X-LC-Leader", "n2")
		fmt.Fprint(w, "from the leader")
	})
	f := clusterFixture(t, true, "n2", toLeader, nil)
	f.hold("alpha", "svc", time.Minute)

	w := f.do("GET", "/api/v1/keys", "")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"key":"alpha"`) ||
		w.Header().Get("X-LC-Leader") != "n2" || w.Header().Get("X-LC-Applied-Index") != "118" {
		t.Fatalf("a follower's read: %d %v %s", w.Code, w.Header(), w.Body)
	}
	page := f.do("GET", "/", "").Body.String()
	doc := parseHTML(t, page)
	if doc.Find(`[data-testid="served-by"]`).Text() != "n1" || doc.Find(`[data-testid="leader"]`).Text() != "n2" ||
		doc.Find(`[data-testid="applied-index"]`).Text() != "118" || !strings.Contains(page, "as of index") {
		t.Fatalf("a follower's dashboard does not say whose state it shows:\n%s", page)
	}
	if strings.Contains(page, "nobody waits") || doc.Find(`[data-testid="total-waiting"]`).Text() != "—" {
		t.Fatalf("a follower's dashboard shows its empty queues as the truth:\n%s", page)
	}
	if href, _ := doc.Find(`[data-testid="consistent"]`).Attr("href"); href != "?consistent=1" {
		t.Fatalf("link to the leader's view: %q", href)
	}
	if c := f.do("GET", "/reset/key?key=alpha", "").Body.String(); strings.Contains(c, "Nobody is waiting") ||
		!strings.Contains(c, "the wait queue is on the leader") {
		t.Fatalf("a follower's reset confirmation:\n%s", c)
	}
	key := f.do("GET", "/keys/alpha", "").Body.String()
	if !strings.Contains(key, `data-testid="queue-on-leader"`) || strings.Contains(key, "Nobody is waiting") {
		t.Fatalf("a follower's key page:\n%s", key)
	}

	for _, c := range []struct{ method, target, body string }{
		{"POST", "/api/v1/reset/key", `{"key":"alpha"}`},
		{"POST", "/reset/source", "source=svc"},
		{"POST", "/api/v1/sessions/00000000000000ab/end", ""},
		{"GET", "/api/v1/keys?consistent=1", ""},
		{"GET", "/?q=a&consistent=1", ""},
		{"GET", "/api/v1/sessions", ""},
		{"GET", "/sessions", ""},
		{"POST", "/cluster/transfer", "id=n3"},
		{"DELETE", "/api/v1/cluster/nodes/n3", ""},
	} {
		w := f.do(c.method, c.target, c.body, "Content-Type", "application/x-www-form-urlencoded")
		if w.Body.String() != "from the leader" {
			t.Errorf("%s %s on a follower: %d %s; want it served by the leader", c.method, c.target, w.Code, w.Body)
		}
	}
	if _, held := f.table.Key("alpha"); !held {
		t.Fatal("a follower changed its own table")
	}
	// A cross-origin write is refused here, before it reaches the leader.
	mu.Lock()
	n := len(got)
	mu.Unlock()
	w = f.do("POST", "/reset/key", "key=alpha", "Content-Type", "application/x-www-form-urlencoded",
		"Origin", "https://elsewhere.example", "Sec-Fetch-Site", "cross-site")
	mu.Lock()
	defer mu.Unlock()
	if w.Code != http.StatusForbidden || len(got) != n {
		t.Fatalf("cross-origin write on a follower: %d, forwarded %v", w.Code, got[n:])
	}
	for _, p := range []string{"/healthz", "/metrics", "/api/v1/keys/alpha", "/cluster"} {
		if w := f.do("GET", p, ""); w.Body.String() == "from the leader" {
			t.Errorf("GET %s on a follower was forwarded", p)
		}
	}
}

// TestFollowerWithoutLeader: with no leader known, writes answer 503 with
// X-LC-Leader present and empty; reads still answer.
func TestFollowerWithoutLeader(t *testing.T) {
	f := clusterFixture(t, true, "", http.NotFoundHandler(), nil)
	w := f.do("POST", "/api/v1/reset/key", `{"key":"a"}`)
	if v, ok := w.Header()["X-Lc-Leader"]; w.Code != 503 || !ok || v[0] != "" {
		t.Fatalf("a write with no leader: %d %v", w.Code, w.Header())
	}
	if w := f.do("GET", "/api/v1/keys", ""); w.Code != 200 || w.Header().Get("X-LC-Applied-Index") != "118" {
		t.Fatalf("a read with no leader: %d", w.Code)
	}
	if !strings.Contains(f.do("GET", "/", "").Body.String(), "none known") {
		t.Fatal("the dashboard does not say that no leader is known")
	}
	// A request another node forwarded is never forwarded again.
	f2 := clusterFixture(t, true, "n2", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a request from a peer was forwarded again")
	}), nil)
	r := localRequest("POST", "/api/v1/reset/key")
	rec := newRecorder()
	FromPeer(f2.h).ServeHTTP(rec, r)
	if rec.Code != 503 || rec.Header().Get("X-LC-Leader") != "n2" {
		t.Fatalf("a forwarded write on a follower: %d %v", rec.Code, rec.Header())
	}
}

// TestClusterPage: every node with its role, suffrage, contact, applied
// index and lag (the others' figures from their own answers), and the
// hand-over and remove buttons going through their confirmation.
func TestClusterPage(t *testing.T) {
	m := &fakeMembers{}
	f := clusterFixture(t, false, "n1", nil, m)
	page := f.do("GET", "/cluster", "").Body.String()
	doc := parseHTML(t, page)
	rows := doc.Find(`[data-testid="node-row"]`)
	if rows.Length() != 3 {
		t.Fatalf("%d node rows:\n%s", rows.Length(), page)
	}
	want := map[string][]string{
		"n1": {"this node", "leader", "voter", "118", "2"},
		"n2": {"leader", "leads", "120", "0"},
		"n3": {"follower", "non-voter", "250ms", "100", "20"},
	}
	for id, parts := range want {
		row := doc.Find(`[data-node="` + id + `"]`).Text()
		for _, p := range parts {
			if !strings.Contains(row, p) {
				t.Errorf("node %s's row lacks %q: %s", id, p, row)
			}
		}
	}
	if doc.Find(`[data-testid="cluster-term"]`).Text() != "7" || doc.Find(`[data-testid="cluster-commit"]`).Text() != "120" {
		t.Fatalf("raft figures:\n%s", page)
	}
	if !strings.Contains(doc.Find(`nav.topnav`).Text(), "Cluster") {
		t.Fatal("no Cluster link in the top bar")
	}
	href, ok := doc.Find(`[data-node="n3"] [data-testid="remove"]`).Attr("href")
	if !ok || href != "/cluster/remove?id=n3" {
		t.Fatalf("remove button: %q", href)
	}
	confirm := f.do("GET", href, "").Body.String()
	if !strings.Contains(confirm, `action="/cluster/remove"`) || !strings.Contains(confirm, `name="id" value="n3"`) {
		t.Fatalf("remove confirmation:\n%s", confirm)
	}
	if len(m.calls) != 0 {
		t.Fatalf("the confirmation acted: %v", m.calls)
	}
	// Another site's form is refused (CSRF) and changes nothing.
	w := f.do("POST", "/cluster/remove", "id=n3", "Content-Type", "application/x-www-form-urlencoded",
		"Origin", "https://elsewhere.example", "Sec-Fetch-Site", "cross-site")
	if w.Code != http.StatusForbidden || len(m.calls) != 0 {
		t.Fatalf("cross-origin remove: %d %v", w.Code, m.calls)
	}
	w = f.do("POST", "/cluster/remove", "id=n3", "Content-Type", "application/x-www-form-urlencoded", "Sec-Fetch-Site", "same-origin")
	loc, _ := url.Parse(w.Header().Get("Location"))
	if w.Code != http.StatusSeeOther || loc.Path != "/cluster" || len(m.calls) != 1 || m.calls[0] != "remove n3" {
		t.Fatalf("remove: %d %s %v", w.Code, loc, m.calls)
	}
	if !strings.Contains(f.do("GET", loc.String(), "").Body.String(), "removed from the cluster") {
		t.Fatal("no banner after the removal")
	}
	href, _ = doc.Find(`[data-node="n3"] [data-testid="transfer"]`).Attr("href")
	if href != "" {
		t.Fatal("a hand-over button for a non-voter")
	}
	if f.do("POST", "/cluster/transfer", "id=", "Content-Type", "application/x-www-form-urlencoded").Code != http.StatusSeeOther ||
		m.calls[1] != "transfer " {
		t.Fatalf("hand-over to any: %v", m.calls)
	}
	// The JSON forms.
	if w := f.do("POST", "/api/v1/cluster/transfer", `{"id":"n2"}`); w.Code != 200 || m.calls[2] != "transfer n2" {
		t.Fatalf("POST /api/v1/cluster/transfer: %d %s %v", w.Code, w.Body, m.calls)
	}
	if w := f.do("DELETE", "/api/v1/cluster/nodes/n3", ""); w.Code != 200 || m.calls[3] != "remove n3" {
		t.Fatalf("DELETE /api/v1/cluster/nodes/n3: %d %v", w.Code, m.calls)
	}
	m.err = &StatusError{Status: http.StatusConflict, Err: errors.New("fewer than 2 voters would remain")}
	if w := f.do("DELETE", "/api/v1/cluster/nodes/n2", ""); w.Code != http.StatusConflict {
		t.Fatalf("a refused removal: %d", w.Code)
	}
	if w := f.do("POST", "/api/v1/cluster/transfer", `{"node":"n2"}`); w.Code != 400 {
		t.Fatalf("a bad body: %d", w.Code)
	}
	// GET /api/v1/cluster: the other nodes' figures from their own answers.
	body := f.do("GET", "/api/v1/cluster", "").Body.String()
	if !strings.Contains(body, `{"id":"n3","address":"10.0.0.3:22121","suffrage":"nonvoter","leader":false,"last_contact_ms":250,"applied_index":100}`) {
		t.Fatalf("GET /api/v1/cluster: %s", body)
	}
}

// TestClusterWithoutMembers: the buttons answer 501 when the node was
// given no way to change the membership.
func TestClusterWithoutMembers(t *testing.T) {
	f := clusterFixture(t, false, "n1", nil, nil)
	if w := f.do("POST", "/cluster/remove", "id=n3", "Content-Type", "application/x-www-form-urlencoded"); w.Code != http.StatusNotImplemented {
		t.Fatalf("remove without Membership: %d", w.Code)
	}
}

// TestSingleNodeHasNoClusterPage: without Options.Cluster there is no
// cluster page, route or line.
func TestSingleNodeHasNoClusterPage(t *testing.T) {
	f := newFixture(t)
	for _, p := range []string{"/cluster", "/api/v1/cluster"} {
		if w := f.do("GET", p, ""); w.Code != 404 {
			t.Errorf("GET %s on a single node: %d", p, w.Code)
		}
	}
	w := f.do("GET", "/", "")
	if strings.Contains(w.Body.String(), "cluster") || w.Header().Get("X-LC-Leader") != "" {
		t.Fatalf("a single node's dashboard mentions a cluster:\n%s", w.Body)
	}
}

// TestLeaderConfirmsNothingChanged: on the leader, a reset that found
// nothing and the end of an unknown session are answered only once
// Confirm says it still leads; otherwise 503, never "released 0".
func TestLeaderConfirmsNothingChanged(t *testing.T) {
	var confirms int
	var fail error
	f := newFixture(t, func(o *Options) {
		o.Cluster = &Cluster{Node: "n1", Leader: func() string { return "n1" }, AppliedIndex: func() uint64 { return 5 },
			Status: func() api.Cluster { return threeNodes("n1", "leader") },
			Confirm: func() error {
				confirms++
				return fail
			}}
	})
	f.hold("held", "svc", time.Minute)
	if w := f.do("POST", "/api/v1/reset/key", `{"key":"held"}`); w.Code != 200 || confirms != 0 {
		t.Fatalf("a reset that released: %d, %d confirms", w.Code, confirms)
	}
	if w := f.do("POST", "/api/v1/reset/key", `{"key":"free"}`); w.Code != 200 || confirms != 1 {
		t.Fatalf("a reset of a free key: %d, %d confirms", w.Code, confirms)
	}
	fail = errors.New("leadership lost")
	for _, c := range []struct{ target, body string }{
		{"/api/v1/reset/key", `{"key":"free"}`},
		{"/api/v1/reset/source", `{"source":"nobody"}`},
		{"/api/v1/sessions/00000000000000ab/end", ""},
	} {
		if w := f.do("POST", c.target, c.body); w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "released") {
			t.Errorf("POST %s not confirmed: %d %s", c.target, w.Code, w.Body)
		}
	}
	w := f.do("POST", "/reset/key", "key=free", "Content-Type", "application/x-www-form-urlencoded")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "could not confirm") {
		t.Fatalf("the form's reset not confirmed: %d %s", w.Code, w.Body)
	}
}
