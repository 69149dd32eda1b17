package web

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
	"github.com/locking-center/locking-center/web/keypath"
)

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

func TestAPIListAndKey(t *testing.T) {
	f := newFixture(t)
	f.hold("b", "svc-b", time.Minute)
	f.hold("a", "svc-a", 2*time.Hour)
	f.hold("ab", "svc-a", time.Second)
	f.wait("a", "w1")
	f.wait("a", "w2")

	w := f.do("GET", "/api/v1/keys", "")
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("list: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	list := decode[[]map[string]any](t, w.Body.String())
	if len(list) != 3 || list[0]["key"] != "a" || list[1]["key"] != "ab" || list[2]["key"] != "b" {
		t.Fatalf("list not in key order: %s", w.Body)
	}
	for _, field := range []string{"key", "source", "remote", "since", "waiters", "token", "session"} {
		if _, ok := list[0][field]; !ok {
			t.Errorf("field %q missing: %s", field, w.Body)
		}
	}
	if len(list[0]) != 7 {
		t.Errorf("list item has fields beyond the contract: %v", list[0])
	}
	if list[0]["since"] != "2026-11-30T10:00:00Z" || list[0]["waiters"] != 2.0 || list[0]["source"] != "svc-a" {
		t.Errorf("first item: %v", list[0])
	}

	w = f.do("GET", "/api/v1/keys?prefix=a&limit=1", "")
	list = decode[[]map[string]any](t, w.Body.String())
	if len(list) != 1 || list[0]["key"] != "a" {
		t.Fatalf("prefix+limit: %s", w.Body)
	}
	if link := w.Header().Get("Link"); link != `</api/v1/keys?after=a&limit=1&prefix=a>; rel="next"` {
		t.Fatalf("Link: %q", link)
	}
	w = f.do("GET", "/api/v1/keys?after=a&limit=1&prefix=a", "")
	list = decode[[]map[string]any](t, w.Body.String())
	if len(list) != 1 || list[0]["key"] != "ab" || w.Header().Get("Link") != "" {
		t.Fatalf("second page: %s, Link %q", w.Body, w.Header().Get("Link"))
	}
	if w := f.do("GET", "/api/v1/keys?limit=0", ""); w.Code != 400 || !strings.Contains(w.Body.String(), "limit") {
		t.Fatalf("limit=0: %d %s", w.Code, w.Body)
	}

	w = f.do("GET", "/api/v1/keys/a", "")
	one := decode[api.KeyDetail](t, w.Body.String())
	if w.Code != 200 || one.Key != "a" || one.Waiters != 2 || len(one.Queue) != 2 ||
		one.Queue[0].Source != "w1" || one.Queue[1].Source != "w2" {
		t.Fatalf("key a: %d %s", w.Code, w.Body)
	}
	w = f.do("GET", "/api/v1/keys/b", "")
	if !strings.Contains(w.Body.String(), `"queue":[]`) {
		t.Fatalf("empty queue must be []: %s", w.Body)
	}
	if w := f.do("GET", "/api/v1/keys/nope", ""); w.Code != 404 || !strings.Contains(w.Body.String(), `"error"`) {
		t.Fatalf("not held: %d %s", w.Code, w.Body)
	}
}

// TestAPIKeyRoundTrip checks that any key, percent-encoded by keypath.Encode,
// reaches the handler unchanged: slashes, dots, markup, bytes that are not
// UTF-8.
func TestAPIKeyRoundTrip(t *testing.T) {
	f := newFixture(t)
	keys := []string{"a/b", "..", ".", "a/../b", "<script>alert(1)</script>", "\xff\xfe raw", "sp ace?#&%", "ключ"}
	for _, k := range keys {
		f.hold(k, "s", time.Second)
	}
	for _, k := range keys {
		w := f.do("GET", "/api/v1/keys/"+keypath.Encode(k), "")
		if w.Code != 200 {
			t.Errorf("key %q via %q: %d %s", k, keypath.Encode(k), w.Code, w.Body)
			continue
		}
		if strings.Contains(w.Body.String(), "<script>") {
			t.Errorf("markup not escaped in JSON: %s", w.Body)
		}
		// encoding/json turns each byte that is not UTF-8 into U+FFFD.
		want, _ := json.Marshal(k)
		if got := decode[api.HeldKey](t, w.Body.String()).Key; got != decode[string](t, string(want)) {
			t.Errorf("key %q came back as %q", k, got)
		}
	}
}

func TestAPIReset(t *testing.T) {
	f := newFixture(t)
	f.hold("k", "holder", time.Minute)
	f.wait("k", "w1")
	f.wait("k", "w2")
	w := f.do("POST", "/api/v1/reset/key", `{"key":"k"}`)
	if w.Code != 200 || decode[api.ResetResult](t, w.Body.String()) != (api.ResetResult{Released: 1, Refused: 2}) {
		t.Fatalf("reset key: %d %s", w.Code, w.Body)
	}
	for range 2 {
		if err := f.outcome(); !errors.Is(err, locker.ErrReset) {
			t.Fatalf("waiter got %v, want ErrReset", err)
		}
	}
	if _, held := f.table.Key("k"); held {
		t.Fatal("key still held after reset")
	}

	f.hold("x", "svc", time.Minute)
	f.hold("y", "svc", time.Minute)
	f.hold("z", "other", time.Minute)
	f.wait("z", "svc")
	w = f.do("POST", "/api/v1/reset/source", `{"source":"svc"}`)
	if w.Code != 200 || decode[api.ResetResult](t, w.Body.String()) != (api.ResetResult{Released: 2, Refused: 1}) {
		t.Fatalf("reset source: %d %s", w.Code, w.Body)
	}
	if err := f.outcome(); !errors.Is(err, locker.ErrSourceReset) {
		t.Fatalf("waiter got %v, want ErrSourceReset", err)
	}
	if got := f.table.Stats().Held; got != 1 {
		t.Fatalf("held after source reset: %d, want 1", got)
	}
	for _, body := range []string{"", "{", `{"key":""}`, `{"source":"svc"}`} {
		if w := f.do("POST", "/api/v1/reset/key", body); w.Code != 400 {
			t.Errorf("reset key with %q: %d, want 400", body, w.Code)
		}
	}
	if w := f.do("GET", "/api/v1/reset/key", ""); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET reset: %d", w.Code)
	}
}

func TestCrossOriginRefused(t *testing.T) {
	f := newFixture(t)
	f.hold("k", "s", time.Minute)
	for _, route := range []string{"/api/v1/reset/key", "/api/v1/reset/source"} {
		w := f.do("POST", route, `{"key":"k","source":"s"}`, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		if w.Code != http.StatusForbidden {
			t.Errorf("%s cross-site: %d", route, w.Code)
		}
		w = f.do("POST", route, `{"key":"k","source":"s"}`, "Origin", "https://evil.example")
		if w.Code != http.StatusForbidden {
			t.Errorf("%s foreign Origin: %d", route, w.Code)
		}
	}
	if _, held := f.table.Key("k"); !held {
		t.Fatal("a refused cross-origin reset changed the table")
	}
	w := f.do("POST", "/api/v1/reset/key", `{"key":"k"}`, "Sec-Fetch-Site", "same-origin")
	if w.Code != 200 {
		t.Fatalf("same-origin reset: %d %s", w.Code, w.Body)
	}
}

func TestBasicAuth(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Password = "s3cret" })
	for _, p := range []string{"/healthz", "/readyz"} {
		if w := f.do("GET", p, ""); w.Code != 200 {
			t.Errorf("%s without auth: %d", p, w.Code)
		}
	}
	for _, p := range []string{"/api/v1/keys", "/metrics", "/api/v1/keys/x"} {
		w := f.do("GET", p, "")
		if w.Code != 401 || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s without auth: %d", p, w.Code)
		}
		if w := f.do("GET", p, "", "Authorization", basic("admin", "wrong")); w.Code != 401 {
			t.Errorf("%s with a wrong password: %d", p, w.Code)
		}
		if w := f.do("GET", p, "", "Authorization", basic("root", "s3cret")); w.Code != 401 {
			t.Errorf("%s with a wrong user: %d", p, w.Code)
		}
	}
	if w := f.do("GET", "/api/v1/keys", "", "Authorization", basic("admin", "s3cret")); w.Code != 200 {
		t.Errorf("with the password: %d", w.Code)
	}
	if w := f.do("POST", "/api/v1/reset/key", `{"key":"k"}`); w.Code != 401 {
		t.Errorf("reset without auth: %d", w.Code)
	}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

func TestReadyz(t *testing.T) {
	ready := false
	f := newFixture(t, func(o *Options) { o.Ready = func() bool { return ready } })
	if w := f.do("GET", "/readyz", ""); w.Code != 503 {
		t.Fatalf("not ready: %d", w.Code)
	}
	ready = true
	if w := f.do("GET", "/readyz", ""); w.Code != 200 {
		t.Fatalf("ready: %d", w.Code)
	}
}

// TestCatalogPick compares every kind of selection with a plain filter
// and sort of the same keys.
func TestCatalogPick(t *testing.T) {
	table := locker.New(locker.Options{})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type held struct {
		key, source string
		since       time.Time
	}
	var all []held
	for i := range 1000 {
		n := (i * 7919) % 1000 // a permutation: arrival order is not key order
		h := held{fmt.Sprintf("k%d/%04d", n%3, n), fmt.Sprintf("src-%d", n%7), base.Add(time.Duration(n%10) * time.Second)}
		all = append(all, h)
		if _, err := table.Restore(h.key, locker.Holder{Source: h.source}, 0, h.since, 0); err != nil {
			t.Fatal(err)
		}
	}
	stuckBefore := base.Add(4 * time.Second)
	c := buildCatalog(table, stuckBefore)
	if c.stuck != 500 || !c.oldest.Equal(base) || len(c.entries) != 1000 {
		t.Fatalf("catalog figures: stuck %d, oldest %v, %d entries", c.stuck, c.oldest, len(c.entries))
	}
	filters := []filter{{}, {Prefix: "k1/"}, {Prefix: "k1/", After: "k1/0500"}, {After: "k2/0900"}, {Key: "/00"},
		{Source: "src-3"}, {Stuck: true}, {Key: "5", Source: "src-1", Stuck: true}, {Prefix: "zz"}, {Prefix: "k0/", Key: "9"}}
	for _, f := range filters {
		for _, o := range []order{byKey, byAge} {
			var want []held
			for _, h := range all {
				if strings.HasPrefix(h.key, f.Prefix) && (f.After == "" || h.key > f.After) && strings.Contains(h.key, f.Key) &&
					strings.Contains(h.source, f.Source) && (!f.Stuck || !h.since.After(stuckBefore)) {
					want = append(want, h)
				}
			}
			slices.SortFunc(want, func(a, b held) int {
				if o == byAge {
					if c := a.since.Compare(b.since); c != 0 {
						return c
					}
				}
				return strings.Compare(a.key, b.key)
			})
			for _, r := range [][2]int{{0, 100}, {900, 100}, {450, 7}, {990, 2000}, {0, 1000}, {999, 1}, {5000, 100}} {
				for _, last := range []bool{false, true} {
					sel := selection{filter: f, Order: o, Skip: r[0], Limit: r[1], LastPage: last}
					got, matched, skip := c.pick(sel, stuckBefore)
					wantSkip := r[0]
					if last && wantSkip >= len(want) && len(want) > 0 {
						wantSkip = (len(want) - 1) / r[1] * r[1]
					}
					if matched != len(want) || skip != wantSkip {
						t.Fatalf("%+v %v %v: matched %d skip %d, want %d %d", f, o, r, matched, skip, len(want), wantSkip)
					}
					w := want[min(wantSkip, len(want)):min(wantSkip+r[1], len(want))]
					if len(got) != len(w) {
						t.Fatalf("%+v %v %v last=%v: %d rows, want %d", f, o, r, last, len(got), len(w))
					}
					for i := range got {
						if got[i].key != w[i].key {
							t.Fatalf("%+v %v %v: row %d is %s, want %s", f, o, r, i, got[i].key, w[i].key)
						}
					}
				}
			}
		}
	}
}

// TestAPIListLimits: without ?limit a page holds DefaultLimit keys, a
// larger limit is lowered to MaxLimit, and X-Limit says which applied.
func TestAPIListLimits(t *testing.T) {
	f := newFixture(t)
	for i := range DefaultLimit + 5 {
		f.hold(fmt.Sprintf("k%05d", i), "s", time.Second)
	}
	w := f.do("GET", "/api/v1/keys", "")
	if n := len(decode[[]api.HeldKey](t, w.Body.String())); n != DefaultLimit || w.Header().Get("X-Limit") != "1000" {
		t.Fatalf("no limit: %d keys, X-Limit %q", n, w.Header().Get("X-Limit"))
	}
	if link := w.Header().Get("Link"); link != `</api/v1/keys?after=k00999&limit=1000>; rel="next"` {
		t.Fatalf("Link: %q", link)
	}
	w = f.do("GET", "/api/v1/keys?after=k00999&limit=1000", "")
	if n := len(decode[[]api.HeldKey](t, w.Body.String())); n != 5 || w.Header().Get("Link") != "" {
		t.Fatalf("second page: %d keys, Link %q", n, w.Header().Get("Link"))
	}
	w = f.do("GET", "/api/v1/keys?limit=1000000", "")
	if n := len(decode[[]api.HeldKey](t, w.Body.String())); n != DefaultLimit+5 || w.Header().Get("X-Limit") != strconv.Itoa(MaxLimit) {
		t.Fatalf("limit over the maximum: %d keys, X-Limit %q", n, w.Header().Get("X-Limit"))
	}
}

// TestAPIResetStrictBody: a reset's body is one JSON object with exactly
// the documented field, named exactly, once; anything else is refused
// with a message that says what is wrong, and changes nothing.
func TestAPIResetStrictBody(t *testing.T) {
	f := newFixture(t)
	f.hold("k", "svc", time.Minute)
	for _, c := range []struct{ body, want string }{
		{`{"key":"k"} {"key":"other"}`, "data after the JSON object"},
		{`{"key":"k"}x`, "data after the JSON object"},
		{`{"key":"k"}]`, "bad JSON body"},
		{`{"key":"nope","key":"k"}`, `field "key" given twice`},
		{`{"Key":"k"}`, `unknown field "Key"`},
		{`{"KEY":"k"}`, `unknown field "KEY"`},
		{`{"key":"k","force":true}`, `unknown field "force"`},
		{`{"key":7}`, `field "key": want a string`},
		{`{"key":null}`, `field "key": want a string`},
		{`{"key":["k"]}`, `field "key": want a string`},
		{`["k"]`, "want one JSON object"},
		{`"k"`, "want one JSON object"},
		{`{"key":"k","key_base64":"aw=="}`, "not both"},
		{`{"key_base64":"not base64!"}`, "not standard base64"},
		{`{"key_base64":""}`, "non-empty key"},
		{"{\"key\":\"k\xff\"}", "not UTF-8"},
		{`{"key":"k"`, "bad JSON body"},
	} {
		w := f.do("POST", "/api/v1/reset/key", c.body)
		if w.Code != 400 || !strings.Contains(decode[apiError](t, w.Body.String()).Error, c.want) {
			t.Errorf("body %q: %d %s, want 400 saying %q", c.body, w.Code, w.Body, c.want)
		}
	}
	if _, held := f.table.Key("k"); !held {
		t.Fatal("a refused body reset the key")
	}

	big := `{"key":"` + strings.Repeat("a", maxBody) + `"}`
	w := f.do("POST", "/api/v1/reset/key", big)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "request body too large: the limit is 4096 bytes") {
		t.Fatalf("oversized body: %d %s", w.Code, w.Body)
	}
	if w := f.do("POST", "/api/v1/reset/source", `{"source":"svc"} `+"\n"); w.Code != 200 {
		t.Fatalf("trailing white space is allowed: %d %s", w.Code, w.Body)
	}
}

// TestAPIRawBytes: a key or source that is not UTF-8 is listed with its
// raw bytes in key_base64 / source_base64, and can be reset by them.
func TestAPIRawBytes(t *testing.T) {
	f := newFixture(t)
	const raw, rawSource = "job\xff\xfe", "svc\x80"
	f.hold(raw, rawSource, time.Minute)
	f.hold("job\uFFFD\uFFFD", "plain", time.Minute) // what the raw key looks like once lossy
	f.hold("other", rawSource, time.Minute)

	list := decode[[]map[string]any](t, f.do("GET", "/api/v1/keys", "").Body.String())
	var found bool
	for _, k := range list {
		if k["key_base64"] == base64.StdEncoding.EncodeToString([]byte(raw)) {
			found = true
			if k["source_base64"] != base64.StdEncoding.EncodeToString([]byte(rawSource)) {
				t.Errorf("source_base64: %v", k)
			}
		} else if k["key"] != "other" {
			if _, ok := k["key_base64"]; ok {
				t.Errorf("key_base64 on a UTF-8 key: %v", k)
			}
		}
	}
	if !found {
		t.Fatalf("no key_base64 for the raw key: %v", list)
	}
	body := `{"key_base64":"` + base64.StdEncoding.EncodeToString([]byte(raw)) + `"}`
	if w := f.do("POST", "/api/v1/reset/key", body); w.Code != 200 || decode[api.ResetResult](t, w.Body.String()).Released != 1 {
		t.Fatalf("reset by key_base64: %d %s", w.Code, w.Body)
	}
	if _, held := f.table.Key(raw); held {
		t.Fatal("the raw key is still held")
	}
	if _, held := f.table.Key("job\uFFFD\uFFFD"); !held {
		t.Fatal("the reset took the lossy look-alike key")
	}
	body = `{"source_base64":"` + base64.StdEncoding.EncodeToString([]byte(rawSource)) + `"}`
	if w := f.do("POST", "/api/v1/reset/source", body); w.Code != 200 || decode[api.ResetResult](t, w.Body.String()).Released != 1 {
		t.Fatalf("reset by source_base64: %d %s", w.Code, w.Body)
	}
}
