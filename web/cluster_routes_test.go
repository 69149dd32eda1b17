package web

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeMembership records the changes asked of it.
type fakeMembership struct {
	added, removed, transferred []string
	err                         error
}

func (m *fakeMembership) membership() *Membership {
	return &Membership{
		Add: func(id, address string) error {
			m.added = append(m.added, id+"@"+address)
			return m.err
		},
		Remove: func(id string) error {
			m.removed = append(m.removed, id)
			return m.err
		},
		Transfer: func(id string) (string, error) {
			m.transferred = append(m.transferred, id)
			return "n2", m.err
		},
		JoinAuthorized: func(proof string, body []byte) bool { return proof == "good" },
	}
}

func TestMembershipRoutesAuth(t *testing.T) {
	m := &fakeMembership{}
	f := newFixture(t, func(o *Options) { o.Password = "pw"; o.Membership = m.membership() })
	do := func(method, path, body string, mod func(*http.Request)) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(body))
		if mod != nil {
			mod(r)
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, r)
		return w
	}
	auth := func(r *http.Request) { r.SetBasicAuth("admin", "pw") }
	node := `{"id":"n4","address":"10.0.0.4:22121"}`
	for _, c := range []struct {
		name   string
		method string
		path   string
		body   string
		mod    func(*http.Request)
		want   int
	}{
		{"add without the password", "POST", "/api/v1/cluster/nodes", node, nil, http.StatusUnauthorized},
		{"remove without the password", "DELETE", "/api/v1/cluster/nodes/n4", "", nil, http.StatusUnauthorized},
		{"transfer without the password", "POST", "/api/v1/cluster/transfer", "{}", nil, http.StatusUnauthorized},
		{"a join with a bad proof", "POST", "/api/v1/cluster/nodes", node, func(r *http.Request) { r.Header.Set("X-LC-Cluster-Join", "bad") }, http.StatusUnauthorized},
		{"a join proof does not open another route", "POST", "/api/v1/cluster/transfer", "{}", func(r *http.Request) { r.Header.Set("X-LC-Cluster-Join", "good") }, http.StatusUnauthorized},
		{"a join", "POST", "/api/v1/cluster/nodes", node, func(r *http.Request) { r.Header.Set("X-LC-Cluster-Join", "good") }, http.StatusOK},
		{"add", "POST", "/api/v1/cluster/nodes", node, auth, http.StatusOK},
		{"add without an address", "POST", "/api/v1/cluster/nodes", `{"id":"n4"}`, auth, http.StatusBadRequest},
		{"add with an unknown field", "POST", "/api/v1/cluster/nodes", `{"id":"n4","address":"a:1","x":"y"}`, auth, http.StatusBadRequest},
		{"remove", "DELETE", "/api/v1/cluster/nodes/n4", "", auth, http.StatusOK},
		{"transfer to any", "POST", "/api/v1/cluster/transfer", "", auth, http.StatusOK},
		{"transfer to n2", "POST", "/api/v1/cluster/transfer", `{"id":"n2"}`, auth, http.StatusOK},
		{"a cross-origin transfer", "POST", "/api/v1/cluster/transfer", "{}", func(r *http.Request) {
			auth(r)
			r.Header.Set("Sec-Fetch-Site", "cross-site")
		}, http.StatusForbidden},
	} {
		if w := do(c.method, c.path, c.body, c.mod); w.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, w.Body.String(), c.want)
		}
	}
	if got := strings.Join(m.added, ","); got != "n4@10.0.0.4:22121,n4@10.0.0.4:22121" {
		t.Errorf("added %s", got)
	}
	if got := strings.Join(m.removed, ","); got != "n4" {
		t.Errorf("removed %s", got)
	}
	if got := strings.Join(m.transferred, ","); got != ",n2" {
		t.Errorf("transferred %q", got)
	}
	// A refusal keeps its status.
	m.err = &StatusError{Status: http.StatusConflict, Err: errors.New("the change would leave fewer than 2 voters")}
	if w := do("DELETE", "/api/v1/cluster/nodes/n1", "", auth); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "fewer than 2 voters") {
		t.Errorf("a refused removal: %d %s", w.Code, w.Body.String())
	}
}
