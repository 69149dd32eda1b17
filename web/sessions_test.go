package web

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
)

// session opens a session for source on the fixture's table, holding
// keys (each granted at once: they must be free).
func (f *fixture) session(source string, ttl time.Duration, keys ...string) *locker.Link {
	f.t.Helper()
	l, err := f.table.OpenSession(source, "10.0.0.9:7000", ttl, nil)
	if err != nil {
		f.t.Fatalf("open session: %v", err)
	}
	f.t.Cleanup(func() { _, _ = l.Close() })
	for i, k := range keys {
		got := make(chan error, 1)
		if _, err := l.Lock(k, uint32(i+1), func(_ uint64, err error) { got <- err }); err != nil {
			f.t.Fatalf("session lock %q: %v", k, err)
		}
		if err := <-got; err != nil {
			f.t.Fatalf("session lock %q: %v", k, err)
		}
	}
	return l
}

// TestAPISessions: token and session on every held key, the session list
// exactly as documented, and ending a session by the API.
func TestAPISessions(t *testing.T) {
	f := newFixture(t)
	f.hold("v1key", "v1", time.Minute)
	a := f.session("svc-a", 30*time.Second, "skey")
	pending := make(chan error, 1)
	if _, err := a.Lock("v1key", 1, func(_ uint64, err error) { pending <- err }); err != nil {
		t.Fatal(err)
	}

	body := f.do("GET", "/api/v1/keys", "").Body.String()
	list := decode[[]api.HeldKey](t, body)
	ki, _ := f.table.Key("skey")
	v1, _ := f.table.Key("v1key")
	if len(list) != 2 || list[0].Key != "skey" || list[0].Session == nil || *list[0].Session != a.ID().String() ||
		list[0].Token != ki.Token || list[0].Token == 0 {
		t.Fatalf("session hold in the list: %s", body)
	}
	if list[1].Session != nil || list[1].Token != v1.Token || !strings.Contains(body, `"session":null`) {
		t.Fatalf("v1 hold in the list: %s", body)
	}
	one := decode[api.KeyDetail](t, f.do("GET", "/api/v1/keys/skey", "").Body.String())
	if one.Session == nil || *one.Session != a.ID().String() || one.Token != ki.Token {
		t.Fatalf("one key: %+v", one)
	}
	if len(a.ID().String()) != 16 {
		t.Fatalf("session id %q is not 16 hex digits", a.ID())
	}

	w := f.do("GET", "/api/v1/sessions", "")
	raw := decode[[]map[string]any](t, w.Body.String())
	if w.Code != 200 || len(raw) != 1 {
		t.Fatalf("sessions: %d %s", w.Code, w.Body)
	}
	var fields []string
	for k := range raw[0] {
		fields = append(fields, k)
	}
	slices.Sort(fields)
	if want := []string{"connected", "expires_in_ms", "holds", "remote", "session", "source", "ttl_ms", "waiting"}; !slices.Equal(fields, want) {
		t.Fatalf("session fields %v, want %v", fields, want)
	}
	s := decode[[]api.Session](t, w.Body.String())[0]
	if s.Session != a.ID().String() || s.Source != "svc-a" || s.Remote != "10.0.0.9:7000" || !s.Connected ||
		s.TTLMillis != 30000 || s.ExpiresInMillis <= 0 || s.ExpiresInMillis > 30000 || s.Holds != 1 || s.Waiting != 1 {
		t.Fatalf("session: %+v", s)
	}
	a.Detach()
	if s := decode[[]api.Session](t, f.do("GET", "/api/v1/sessions", "").Body.String())[0]; s.Connected || s.Holds != 1 {
		t.Fatalf("after the disconnect: %+v", s)
	}
	if err := <-pending; !errors.Is(err, locker.ErrDetached) {
		t.Fatalf("pending lock at the disconnect: %v", err)
	}
	if _, err := f.table.ResumeSession(a.ID(), "10.0.0.9:7001", nil); err != nil {
		t.Fatal(err)
	}

	end := "/api/v1/sessions/" + a.ID().String() + "/end"
	if w := f.do("POST", end, "", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); w.Code != http.StatusForbidden {
		t.Fatalf("cross-site end: %d", w.Code)
	}
	if _, open := f.table.SessionInfo(a.ID()); !open {
		t.Fatal("a refused cross-site request ended the session")
	}
	w = f.do("POST", end, "")
	if w.Code != 200 || w.Body.String() != `{"released":1,"refused":0}`+"\n" {
		t.Fatalf("end: %d %s", w.Code, w.Body)
	}
	if _, held := f.table.Key("skey"); held {
		t.Fatal("the ended session's key is still held")
	}
	if w := f.do("POST", end, ""); w.Code != 404 || !strings.Contains(w.Body.String(), "no such session") {
		t.Fatalf("end twice: %d %s", w.Code, w.Body)
	}
	if w := f.do("POST", "/api/v1/sessions/00000000000000ff/end", ""); w.Code != 404 {
		t.Fatalf("unknown session: %d", w.Code)
	}
	if w := f.do("POST", "/api/v1/sessions/xyz/end", ""); w.Code != 400 {
		t.Fatalf("malformed session: %d", w.Code)
	}
	if w := f.do("GET", "/api/v1/sessions", ""); w.Body.String() != "[]\n" {
		t.Fatalf("no sessions: %q", w.Body)
	}
}

// TestEndSessionRefusesWaiters: ending a session refuses its pending
// Locks and counts them.
func TestEndSessionRefusesWaiters(t *testing.T) {
	f := newFixture(t)
	f.hold("busy", "v1", time.Minute)
	b := f.session("svc-b", time.Minute, "mine")
	pending := make(chan error, 1)
	if _, err := b.Lock("busy", 1, func(_ uint64, err error) { pending <- err }); err != nil {
		t.Fatal(err)
	}
	w := f.do("POST", "/api/v1/sessions/"+b.ID().String()+"/end", "")
	if w.Code != 200 || decode[api.ResetResult](t, w.Body.String()) != (api.ResetResult{Released: 1, Refused: 1}) {
		t.Fatalf("end: %d %s", w.Code, w.Body)
	}
	if err := <-pending; !errors.Is(err, locker.ErrSessionEnded) {
		t.Fatalf("pending lock: %v", err)
	}
}

// TestDashboardSessions: the dashboard shows which holds are a session's,
// connected or not, and when a disconnected one expires; a session is
// ended through a confirm page whose form is CSRF-protected, and the
// banner tells what ending it did.
func TestDashboardSessions(t *testing.T) {
	f := newFixture(t)
	f.hold("v1key", "v1", time.Minute)
	on := f.session("live-svc", time.Minute, "on/key")
	off := f.session("gone-svc", 20*time.Second, "off/key")
	off.Detach()

	doc := parseHTML(t, f.do("GET", "/", "").Body.String())
	tag := func(key string) string {
		return strings.Join(strings.Fields(doc.Find(`tr[data-key="`+key+`"] [data-testid="session-tag"]`).Text()), " ")
	}
	if got := tag("on/key"); !strings.Contains(got, "session "+on.ID().String()[:8]) || !strings.Contains(got, "connected") ||
		strings.Contains(got, "disconnected") {
		t.Errorf("connected session's hold: %q", got)
	}
	if got := tag("off/key"); !strings.Contains(got, "disconnected") || !strings.Contains(got, "expires in 1") {
		t.Errorf("disconnected session's hold: %q", got)
	}
	if got := tag("v1key"); got != "" {
		t.Errorf("a v1 hold is tagged %q", got)
	}

	doc = parseHTML(t, f.do("GET", "/sessions", "").Body.String())
	rows := doc.Find(`[data-testid="session-row"]`)
	if rows.Length() != 2 {
		t.Fatalf("sessions page: %d rows", rows.Length())
	}
	offRow := doc.Find(`[data-session="` + off.ID().String() + `"]`)
	if st := strings.Join(strings.Fields(offRow.Find(`[data-testid="session-state"]`).Text()), " "); !strings.HasPrefix(st, "disconnected expires in") {
		t.Errorf("disconnected session's state: %q", st)
	}
	if h := offRow.Find(`[data-testid="session-holds"]`).Text(); h != "1" {
		t.Errorf("holds: %q", h)
	}
	href, _ := offRow.Find(`[data-testid="end-session"]`).Attr("href")
	if href != "/sessions/"+off.ID().String()+"/end" {
		t.Fatalf("End link: %q", href)
	}

	key := parseHTML(t, f.do("GET", "/keys/on%2Fkey", "").Body.String())
	ki, _ := f.table.Key("on/key")
	if tok := key.Find(`[data-testid="token"]`).Text(); tok == "" || tok != strconv.FormatUint(ki.Token, 10) {
		t.Errorf("token on the key page: %q, want %d", tok, ki.Token)
	}
	if h, _ := key.Find(`[data-testid="end-session"]`).Attr("href"); h != "/sessions/"+on.ID().String()+"/end" {
		t.Errorf("End session on the key page: %q", h)
	}

	confirm := parseHTML(t, f.do("GET", href, "").Body.String())
	text := strings.Join(strings.Fields(confirm.Find(`[data-testid="confirm"]`).Text()), " ")
	for _, want := range []string{"gone-svc", "disconnected", "1 key it holds is released", "no lock request waiting"} {
		if !strings.Contains(text, want) {
			t.Errorf("confirm page lacks %q: %q", want, text)
		}
	}
	if action, _ := confirm.Find("form").Attr("action"); action != href {
		t.Fatalf("confirm form posts to %q", action)
	}

	if w := f.do("POST", href, "", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); w.Code != http.StatusForbidden {
		t.Fatalf("cross-site end: %d", w.Code)
	}
	w := f.do("POST", href, "", "Sec-Fetch-Site", "same-origin")
	loc, _ := url.Parse(w.Header().Get("Location"))
	if w.Code != http.StatusSeeOther || loc.Path != "/sessions" {
		t.Fatalf("end: %d %q", w.Code, loc)
	}
	flash := parseHTML(t, f.do("GET", loc.String(), "").Body.String()).Find(`[data-testid="flash"]`).Text()
	if got := strings.Join(strings.Fields(flash), " "); got != "Ended session "+off.ID().String()+": released 1 key, refused 0 waiters." {
		t.Fatalf("banner: %q", got)
	}
	if _, held := f.table.Key("off/key"); held {
		t.Fatal("the ended session's key is still held")
	}
	if w := f.do("GET", href, ""); w.Code != 404 {
		t.Fatalf("confirm page of an ended session: %d", w.Code)
	}
	if w := f.do("POST", href, "", "Sec-Fetch-Site", "same-origin"); w.Code != 404 {
		t.Fatalf("end an ended session: %d", w.Code)
	}
}

// TestNextInLine: the main table names the head of each key's queue.
func TestNextInLine(t *testing.T) {
	f := newFixture(t)
	f.hold("busy", "holder", time.Minute)
	f.hold("free", "holder", time.Minute)
	f.wait("busy", "first-in-line")
	f.wait("busy", "second")
	doc := parseHTML(t, f.do("GET", "/", "").Body.String())
	if got := strings.Join(strings.Fields(doc.Find(`tr[data-key="busy"] [data-testid="next"]`).Text()), " "); !strings.HasPrefix(got, "first-in-line waiting") ||
		!strings.HasSuffix(got, "1 more") {
		t.Errorf("next in line: %q", got)
	}
	if got := strings.TrimSpace(doc.Find(`tr[data-key="free"] [data-testid="next"]`).Text()); got != "nobody waits" {
		t.Errorf("no queue: %q", got)
	}
}

// TestConfirmPlainWords: the confirm pages say what happens without
// protocol bytes.
func TestConfirmPlainWords(t *testing.T) {
	f := newFixture(t)
	f.hold("k", "svc", time.Minute)
	f.wait("k", "w")
	for _, target := range []string{"/reset/key?key=k", "/reset/source?source=svc", "/reset/key?key=free"} {
		text := parseHTML(t, f.do("GET", target, "").Body.String()).Find(`[data-testid="confirm"]`).Text()
		if text == "" || strings.Contains(text, "'-'") || strings.Contains(text, "answered") {
			t.Errorf("%s speaks protocol: %q", target, text)
		}
	}
}
