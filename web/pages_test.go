package web

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/locking-center/locking-center/assets"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/keypath"
)

const script = "<script>alert(1)</script>"

// TestPagesEscape renders every page with hostile keys and sources: markup
// must come out as text, bytes that are not UTF-8 as visible escapes.
func TestPagesEscape(t *testing.T) {
	f := newFixture(t)
	f.hold(script, "<b>bold</b>", time.Minute)
	f.hold("raw\xff\xfe", "src\x80", time.Minute)
	f.wait(script, `"><img src=x onerror=alert(2)>`)

	pages := map[string]string{
		"dashboard":        "/",
		"key":              "/keys/" + keypath.Encode(script),
		"key raw":          "/keys/" + keypath.Encode("raw\xff\xfe"),
		"confirm key":      "/reset/key?key=" + url.QueryEscape(script),
		"confirm raw":      "/reset/key?key=" + url.QueryEscape("raw\xff\xfe"),
		"confirm source":   "/reset/source?source=" + url.QueryEscape("<b>bold</b>"),
		"flash":            "/?done=" + f.h.(*server).sealFlash(flash{By: "key", Name: script, Released: 1}, f.now),
		"filter":           "/?q=" + url.QueryEscape(`"><script>`) + "&source=%FF",
		"not held":         "/keys/" + keypath.Encode(script+"x"),
		"confirm no key":   "/reset/key",
		"confirm no sourc": "/reset/source",
	}
	for name, target := range pages {
		w := f.do("GET", target, "")
		body := w.Body.String()
		if w.Code >= 500 {
			t.Errorf("%s: %d", name, w.Code)
		}
		for _, bad := range []string{"<script>alert", "<b>bold", "<img src=x", `"><script>`} {
			if strings.Contains(body, bad) {
				t.Errorf("%s: unescaped %q in the page", name, bad)
			}
		}
		if !utf8.ValidString(body) {
			t.Errorf("%s: the page is not valid UTF-8", name)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") ||
			!strings.Contains(csp, "default-src 'self'") || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: framing or sources not forbidden: %q", name, csp)
		}
	}
	body := f.do("GET", "/", "").Body.String()
	for _, want := range []string{"&lt;script&gt;alert(1)&lt;/script&gt;", `&#34;raw\xff\xfe&#34;`, `/keys/raw%FF%FE`} {
		if !strings.Contains(body, want) {
			t.Errorf("dashboard lacks %q", want)
		}
	}
	if w := f.do("GET", "/keys/"+keypath.Encode(script+"x"), ""); w.Code != 404 || !strings.Contains(w.Body.String(), "not held") {
		t.Errorf("key not held: %d", w.Code)
	}
}

func TestKeyPageQueue(t *testing.T) {
	f := newFixture(t)
	f.hold("k/1", "holder", 20*time.Minute)
	f.wait("k/1", "first")
	f.wait("k/1", "second")
	f.wait("k/1", "third")
	w := f.do("GET", "/keys/k%2F1", "")
	body := w.Body.String()
	if w.Code != 200 {
		t.Fatalf("%d", w.Code)
	}
	i1, i2, i3 := strings.Index(body, ">first<"), strings.Index(body, ">second<"), strings.Index(body, ">third<")
	if i1 < 0 || !(i1 < i2 && i2 < i3) {
		t.Fatalf("queue not in order: %d %d %d", i1, i2, i3)
	}
	if n := strings.Count(body, `data-testid="queue-row"`); n != 3 {
		t.Fatalf("%d queue rows", n)
	}
	if !strings.Contains(body, "badge-stuck") {
		t.Error("a key held 20m with STUCK_AFTER 10m is not marked stuck")
	}
}

func TestDashboardFilterSortPage(t *testing.T) {
	f := newFixture(t)
	for i := range 250 {
		src := "team-a"
		if i%2 == 1 {
			src = "team-b"
		}
		// Key 0 is the newest hold, key 249 the oldest; keys >= 240 are stuck.
		f.hold(fmt.Sprintf("job/%03d", i), src, time.Duration(i)*3*time.Second)
	}
	rows := regexp.MustCompile(`data-key="([^"]*)"`)
	keysOf := func(target string) []string {
		t.Helper()
		w := f.do("GET", target, "")
		if w.Code != 200 {
			t.Fatalf("%s: %d", target, w.Code)
		}
		var out []string
		for _, m := range rows.FindAllStringSubmatch(w.Body.String(), -1) {
			out = append(out, m[1])
		}
		return out
	}
	if got := keysOf("/"); len(got) != PageSize || got[0] != "job/000" || got[99] != "job/099" {
		t.Fatalf("page 1: %d rows, %v…", len(got), got[:3])
	}
	if got := keysOf("/?page=3"); len(got) != 50 || got[0] != "job/200" {
		t.Fatalf("page 3: %d rows", len(got))
	}
	for _, p := range []string{"99", "9223372036854775807", "-5", "x"} {
		want := 50
		if p == "-5" || p == "x" {
			want = PageSize // page 1
		}
		if got := keysOf("/?page=" + p); len(got) != want {
			t.Fatalf("page=%s: %d rows, want %d", p, len(got), want)
		}
	}
	if got := keysOf("/?sort=age"); got[0] != "job/249" || got[1] != "job/248" {
		t.Fatalf("longest held first: %v", got[:2])
	}
	if got := keysOf("/?stuck=1&sort=age"); len(got) != 50 || got[0] != "job/249" {
		// 10m = 600s; i*3s >= 600s from i = 200.
		t.Fatalf("stuck only: %d rows, first %v", len(got), got[:1])
	}
	if got := keysOf("/?q=/01"); len(got) != 10 || got[0] != "job/010" {
		t.Fatalf("key filter: %v", got)
	}
	if got := keysOf("/?source=team-b&q=/00"); len(got) != 5 || got[0] != "job/001" {
		t.Fatalf("source filter: %v", got)
	}
	body := f.do("GET", "/?q=job&sort=age&page=2", "").Body.String()
	if !strings.Contains(body, `href="/?page=3&amp;q=job&amp;sort=age"`) || !strings.Contains(body, `href="/?q=job&amp;sort=age"`) {
		t.Error("pager links drop the filter or the order")
	}
	if !strings.Contains(body, "101–200 of 250 keys") {
		t.Error("no position line")
	}
	live := f.do("GET", "/?q=job", "", "X-Live", "1").Body.String()
	if strings.Contains(live, "<html") || !strings.Contains(live, `id="keys"`) || !strings.Contains(live, `id="totals"`) {
		t.Error("the live fragment is not just the live parts")
	}
}

func TestFormReset(t *testing.T) {
	f := newFixture(t)
	const raw = "raw\xff key"
	f.hold(raw, "svc", time.Minute)
	f.wait(raw, "w")

	w := f.do("GET", "/reset/key?key="+url.QueryEscape(raw), "")
	if !strings.Contains(w.Body.String(), "1 client waiting for it is turned away") || !strings.Contains(w.Body.String(), `name="key_pct" value="raw%FF%20key"`) {
		t.Fatalf("confirmation page: %s", w.Body)
	}
	// Another site's form is refused and changes nothing.
	w = f.do("POST", "/reset/key", "key_pct=raw%25FF%2520key", "Content-Type", "application/x-www-form-urlencoded",
		"Origin", "https://elsewhere.example", "Sec-Fetch-Site", "cross-site")
	if w.Code != http.StatusForbidden {
		t.Fatalf("cross-origin form: %d", w.Code)
	}
	if _, held := f.table.Key(raw); !held {
		t.Fatal("a refused cross-origin reset released the key")
	}
	w = f.do("POST", "/reset/key", "key=ignored&key_pct=raw%25FF%2520key", "Content-Type", "application/x-www-form-urlencoded",
		"Sec-Fetch-Site", "same-origin")
	if w.Code != http.StatusSeeOther {
		t.Fatalf("reset: %d %s", w.Code, w.Body)
	}
	loc, _ := url.Parse(w.Header().Get("Location"))
	if loc.Path != "/" || loc.Query().Get("done") == "" {
		t.Fatalf("redirect: %s", loc)
	}
	if err := f.outcome(); !errors.Is(err, locker.ErrReset) {
		t.Fatalf("waiter: %v", err)
	}
	if body := f.do("GET", loc.String(), "").Body.String(); !strings.Contains(body, "released 1 key, refused 1 waiter") {
		t.Fatal("no message after the reset")
	}

	f.hold("a", "svc", time.Minute)
	f.hold("b", "svc", time.Minute)
	w = f.do("GET", "/reset/source?source=svc", "")
	if !strings.Contains(w.Body.String(), "the 2 keys it holds are released") {
		t.Fatalf("source confirmation: %s", w.Body)
	}
	w = f.do("POST", "/reset/source", "source=svc", "Content-Type", "application/x-www-form-urlencoded")
	if w.Code != http.StatusSeeOther {
		t.Fatalf("source reset: %d", w.Code)
	}
	if body := f.do("GET", w.Header().Get("Location"), "").Body.String(); !strings.Contains(body, "released 2 keys") {
		t.Fatal("no message after the source reset")
	}
	if w := f.do("POST", "/reset/key", "", "Content-Type", "application/x-www-form-urlencoded"); w.Code != 400 {
		t.Fatalf("empty form: %d", w.Code)
	}
}

func TestAssets(t *testing.T) {
	f := newFixture(t)
	u := assets.URL("style.css")
	w := f.do("GET", u, "")
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/css") ||
		w.Header().Get("Cache-Control") != "public, max-age=31536000, immutable" {
		t.Fatalf("%s: %d %v", u, w.Code, w.Header())
	}
	etag := w.Header().Get("ETag")
	w = f.do("GET", "/assets/style.css", "")
	if w.Header().Get("Cache-Control") != "no-cache" || w.Header().Get("ETag") != etag {
		t.Fatalf("unversioned: %v", w.Header())
	}
	if w := f.do("GET", "/assets/style.css", "", "If-None-Match", etag); w.Code != http.StatusNotModified {
		t.Fatalf("revalidation: %d", w.Code)
	}
	if w := f.do("GET", "/assets/nope.js", ""); w.Code != 404 {
		t.Fatalf("unknown asset: %d", w.Code)
	}
	if body := f.do("GET", "/", "").Body.String(); !strings.Contains(body, u) {
		t.Fatal("the page does not link the versioned style sheet")
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "<1s", 45 * time.Second: "45s", 192 * time.Second: "3m 12s", 2*time.Hour + 5*time.Minute: "2h 05m",
		4*24*time.Hour + 3*time.Hour: "4d 03h",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 100000: "100,000", -1234: "-1,234"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q", n, got)
		}
	}
	for d, want := range map[time.Duration]string{10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Second: "1m30s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q", d, got)
		}
	}
	if got := size(1536); got != "1.5 KiB" {
		t.Errorf("size = %q", got)
	}
}

// TestDeepPage goes past heapMax, where the walk copies every match.
// TestDeepPage: the last pages of a large table, in both orders, from
// the shared catalog; a page far past the end shows the last page.
func TestDeepPage(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.exactBelow = 100 })
	t.Cleanup(f.h.(*server).catalogs.builds.Wait)
	n := 2250
	for i := range n {
		f.hold(fmt.Sprintf("k%05d", i), "s", time.Duration(n-i)*time.Second)
	}
	rows := regexp.MustCompile(`data-key="([^"]*)"`)
	for _, target := range []string{fmt.Sprintf("/?page=%d", n/PageSize), fmt.Sprintf("/?sort=age&page=%d", n/PageSize), "/?page=9999"} {
		body := f.do("GET", target, "").Body.String()
		got := rows.FindAllStringSubmatch(body, -1)
		want, first := PageSize, fmt.Sprintf("k%05d", n-PageSize-50)
		if target == "/?page=9999" {
			want, first = 50, fmt.Sprintf("k%05d", n-50)
		}
		if len(got) != want || got[0][1] != first {
			t.Fatalf("%s: %d rows, first %v", target, len(got), got[0])
		}
	}
}

// TestCatalogShared: from exactBelow keys on, pages read which keys exist
// from a catalog shared until it is older than its maxAge, then rebuilt in
// the background; the rows themselves, and the held total, are current.
func TestCatalogShared(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.exactBelow = 10 })
	s := f.h.(*server)
	t.Cleanup(s.catalogs.builds.Wait)
	for i := range 20 {
		f.hold(fmt.Sprintf("k%02d", i), "old", time.Minute)
	}
	showing := func() string {
		doc := parseHTML(t, f.do("GET", "/", "").Body.String())
		return strings.Join(strings.Fields(doc.Find(`[data-testid="showing"]`).Text()), " ") + " held=" +
			doc.Find(`[data-testid="total-held"]`).Text()
	}
	if got := showing(); got != "1–20 of 20 keys held=20" {
		t.Fatalf("first view: %q", got)
	}
	first := s.catalogs.cur
	f.hold("k99", "new", time.Second)
	if _, err := f.table.ResetByKey("k00"); err != nil {
		t.Fatal(err)
	}
	// The catalog still lists k00 (now released: left out of the rows)
	// and not yet k99; the held total is read now.
	if got := showing(); got != "1–19 of 20 keys held=20" || s.catalogs.cur != first {
		t.Fatalf("within the catalog's age: %q", got)
	}
	first.built = first.built.Add(-time.Hour) // as if it were old
	f.do("GET", "/", "")                      // serves the old one, starts a rebuild
	s.catalogs.builds.Wait()
	if got := showing(); got != "1–20 of 20 keys held=20" || s.catalogs.cur == first {
		t.Fatalf("after the rebuild: %q", got)
	}
}

// TestFlashCannotBeForged: the banner after a reset shows what the reset
// did; a link with a made-up or altered outcome, or an old one, shows no
// banner.
func TestFlashCannotBeForged(t *testing.T) {
	f := newFixture(t)
	f.hold("real", "svc", time.Minute)
	w := f.do("POST", "/reset/key", "key=real", "Content-Type", "application/x-www-form-urlencoded")
	loc := w.Header().Get("Location")
	banner := func(target string) string {
		doc := parseHTML(t, f.do("GET", target, "").Body.String())
		return strings.Join(strings.Fields(doc.Find(`[data-testid="flash"]`).Text()), " ")
	}
	if got := banner(loc); !strings.Contains(got, "Reset key real") || !strings.Contains(got, "released 1 key") {
		t.Fatalf("banner after a real reset: %q", got)
	}
	token := strings.TrimPrefix(loc, "/?done=")
	enc, sig, _ := strings.Cut(token, ".")
	p, _ := base64.RawURLEncoding.DecodeString(enc)
	p[12] = 99 // released: 99
	altered := base64.RawURLEncoding.EncodeToString(p) + "." + sig
	for name, target := range map[string]string{
		"made up":   "/?done=key&name=X&released=99&refused=0",
		"altered":   "/?done=" + altered,
		"no sig":    "/?done=" + enc,
		"bad sig":   "/?done=" + enc + ".AAAAAAAAAAAAAAAAAAAAAA",
		"garbage":   "/?done=%FF%00.",
		"other run": "/?done=" + newFixture(t).h.(*server).sealFlash(flash{By: "key", Name: "X", Released: 99}, f.now),
	} {
		if got := banner(target); got != "" {
			t.Errorf("%s: banner %q", name, got)
		}
	}
	f.now = f.now.Add(flashTTL + time.Second)
	if got := banner(loc); got != "" {
		t.Errorf("an expired banner link still shows %q", got)
	}
}
