package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
)

// webReq sends a request to a node's web port: status, body, headers.
func webReq(t *testing.T, method, url, body string) (int, string, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// metricValue reads one sample from an exposition; -1 when absent.
func metricValue(exposition, series string) float64 {
	for line := range strings.Lines(exposition) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}

// awaitWeb polls until ok accepts a node's answer, or fails the test.
func awaitWeb(t *testing.T, what string, within time.Duration, try func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := try()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last answer:\n%s", what, within, last)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestClusterWebFollowerReadsAndForwards: a follower's web port reads its
// applied state (X-LC-Leader, X-LC-Applied-Index, "as of index"),
// forwards ?consistent=1, the sessions and every write to the leader over
// the cluster port, and answers 503 with an empty X-LC-Leader to a write
// once no leader is known.
func TestClusterWebFollowerReadsAndForwards(t *testing.T) {
	nodes := startCluster(t, 3, nil)
	leader := awaitLeader(t, nodes, 20*time.Second)
	var followers []*clusterNode
	for _, nd := range nodes {
		if nd != leader {
			followers = append(followers, nd)
		}
	}
	f := followers[0]
	lock := func(key string) {
		b, _ := protocol.Frame{Action: protocol.Lock, Key: key}.Append(nil)
		if got := raw(t, leader.Addr, b); got != '+' {
			t.Fatalf("Lock %s: %q", key, got)
		}
	}
	lock("web-a")
	lock("web-b") // its entry carries the commit of web-a's to the followers

	// A plain read: the follower's applied state, with its headers.
	awaitWeb(t, "web-a in a follower's list", 10*time.Second, func() (bool, string) {
		code, body, h := webReq(t, "GET", "http://"+f.Web+"/api/v1/keys", "")
		idx, _ := strconv.ParseUint(h.Get("X-LC-Applied-Index"), 10, 64)
		return code == 200 && strings.Contains(body, `"key":"web-a"`) && h.Get("X-LC-Leader") == leader.id && idx > 0,
			strconv.Itoa(code) + " " + h.Get("X-LC-Leader") + " " + h.Get("X-LC-Applied-Index") + " " + body
	})
	code, body, h := webReq(t, "GET", "http://"+f.Web+"/", "")
	if code != 200 || !strings.Contains(body, "as of index") || !strings.Contains(body, `data-testid="served-by">`+f.id+`<`) ||
		!strings.Contains(body, `data-testid="leader">`+leader.id+`<`) || !strings.Contains(body, "web-a") {
		t.Fatalf("a follower's dashboard: %d\n%s", code, body)
	}
	if strings.Contains(body, "nobody waits") {
		t.Errorf("a follower's dashboard says nobody waits; its queues are the leader's:\n%s", body)
	}
	// ?consistent=1 reads at the leader: web-b is there at once.
	code, body, h = webReq(t, "GET", "http://"+f.Web+"/api/v1/keys?consistent=1", "")
	if code != 200 || !strings.Contains(body, `"key":"web-b"`) || h.Get("X-LC-Leader") != leader.id {
		t.Fatalf("consistent read through a follower: %d %v\n%s", code, h, body)
	}
	code, body, _ = webReq(t, "GET", "http://"+f.Web+"/sessions", "")
	if code != 200 || !strings.Contains(body, `data-testid="served-by">`+leader.id+`<`) {
		t.Fatalf("the sessions page through a follower is the leader's: %d\n%s", code, body)
	}

	// A write through the follower is the leader's.
	code, body, _ = webReq(t, "POST", "http://"+f.Web+"/api/v1/reset/key", `{"key":"web-a"}`)
	if code != 200 || !strings.Contains(body, `"released":1`) {
		t.Fatalf("reset through a follower: %d %s", code, body)
	}
	code, body, _ = webReq(t, "GET", "http://"+leader.Web+"/api/v1/keys/web-a", "")
	if code != 404 {
		t.Fatalf("web-a after its reset through a follower: %d %s", code, body)
	}
	// The dashboard's form, with the browser's headers: the redirect's
	// banner, signed by the leader, shows on the follower.
	form, err := http.NewRequest("POST", "http://"+f.Web+"/reset/key", strings.NewReader("key=web-b"))
	if err != nil {
		t.Fatal(err)
	}
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	form.Header.Set("Origin", "http://"+f.Web)
	form.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(form)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `data-testid="flash"`) ||
		!strings.Contains(string(page), `data-testid="served-by">`+f.id+`<`) {
		t.Fatalf("the reset form through a follower: %d\n%s", resp.StatusCode, page)
	}

	// The cluster's status through a follower: every node's applied index
	// and last contact, the others' from their own answers.
	awaitWeb(t, "every node's figures through a follower", 10*time.Second, func() (bool, string) {
		code, body, _ := webReq(t, "GET", "http://"+f.Web+"/api/v1/cluster", "")
		var st struct {
			Node  string `json:"node"`
			Nodes []struct {
				ID          string  `json:"id"`
				Applied     *uint64 `json:"applied_index"`
				LastContact *int64  `json:"last_contact_ms"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || len(st.Nodes) != 3 {
			return false, body
		}
		for _, n := range st.Nodes {
			if n.Applied == nil || n.LastContact == nil {
				return false, body
			}
		}
		return true, body
	})

	// Metrics: who leads, the members, what a grant paid, and the client
	// connections each node serves (a session through the follower counts
	// as forwarded there and as served on both).
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, err := client.NewSession(ctx, f.Addr, client.WithTTL(5*time.Second))
	if err != nil {
		t.Fatalf("session through a follower: %v", err)
	}
	if _, err := sess.Lock(ctx, "web-m"); err != nil {
		t.Fatal(err)
	}
	scrape := func(nd *clusterNode) string {
		code, body, _ := webReq(t, "GET", "http://"+nd.Web+"/metrics", "")
		if code != 200 {
			t.Fatalf("%s /metrics: %d", nd.id, code)
		}
		return body
	}
	lm, fm := scrape(leader), scrape(f)
	for _, c := range []struct {
		metrics, series string
		ok              func(float64) bool
	}{
		{lm, "locking_center_raft_is_leader", func(v float64) bool { return v == 1 }},
		{fm, "locking_center_raft_is_leader", func(v float64) bool { return v == 0 }},
		{fm, `locking_center_raft_peers{suffrage="voter"}`, func(v float64) bool { return v == 3 }},
		{lm, "locking_center_raft_apply_duration_seconds_count", func(v float64) bool { return v >= 3 }},
		{lm, "locking_center_raft_term", func(v float64) bool { return v >= 1 }},
		{fm, "locking_center_raft_leader_changes_total", func(v float64) bool { return v >= 1 }},
		{fm, "locking_center_forwarded_connections", func(v float64) bool { return v == 1 }},
		{fm, "locking_center_connections", func(v float64) bool { return v == 1 }},
		{lm, "locking_center_connections", func(v float64) bool { return v >= 1 }},
		{fm, "locking_center_held_keys", func(v float64) bool { return v >= 0 }},
	} {
		if v := metricValue(c.metrics, c.series); !c.ok(v) {
			t.Errorf("%s = %v", c.series, v)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// No leader: the last node answers writes 503, X-LC-Leader empty.
	leader.kill(t)
	followers[1].kill(t)
	awaitWeb(t, "503 to a write with no leader", 20*time.Second, func() (bool, string) {
		code, body, h := webReq(t, "POST", "http://"+f.Web+"/api/v1/reset/key", `{"key":"x"}`)
		_, has := h["X-Lc-Leader"]
		return code == 503 && has && h.Get("X-LC-Leader") == "", strconv.Itoa(code) + " " + body
	})
	// Reads still answer, from what it applied.
	code, body, h = webReq(t, "GET", "http://"+f.Web+"/api/v1/keys", "")
	if code != 200 || h.Get("X-LC-Applied-Index") == "" {
		t.Fatalf("a read with no leader: %d %v %s", code, h, body)
	}
}
