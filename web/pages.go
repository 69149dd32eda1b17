package web

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/a-h/templ"

	"github.com/locking-center/locking-center/assets"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
	"github.com/locking-center/locking-center/web/keypath"
)

// routes registers the dashboard's pages and static files.
func (s *server) routes(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", s.dashboard)
	mux.HandleFunc("GET /keys/{key...}", s.keyPage)
	mux.HandleFunc("GET /reset/key", s.confirmResetKey)
	mux.HandleFunc("GET /reset/source", s.confirmResetSource)
	mux.HandleFunc("POST /reset/key", s.formResetKey)
	mux.HandleFunc("POST /reset/source", s.formResetSource)
	mux.HandleFunc("GET /sessions", s.sessionsPage)
	mux.HandleFunc("GET /sessions/{session}/end", s.confirmEndSession)
	mux.HandleFunc("POST /sessions/{session}/end", s.formEndSession)
	mux.Handle("GET /assets/", assets.Handler())
}

// chrome is what every page's frame shows.
type chrome struct {
	Title   string
	Version string
	// Live marks a page that refreshes its #live part by itself.
	Live bool
}

// totals are the figures at the top of the dashboard.
type totals struct {
	Held, Waiting, Stuck int
	StuckAfter           time.Duration
	OldestHold           time.Duration
	Uptime               time.Duration
	Persistent           bool
	LogSize              int64 // -1 when unknown
}

// row is one held key as a page shows it.
type row struct {
	Key, Source, Remote string
	Since               time.Time
	Held                time.Duration
	Stuck               bool
	Token               uint64
	Session             sessionRef // zero for a v1 hold
	Waiters             int
	OldestWait          time.Duration // 0 when nobody waits
	// Next is the head of the queue: who gets the key when it is
	// released; its Source is "" when nobody waits.
	Next queueRow
}

// sessionRef is a session as a row shows it.
type sessionRef struct {
	ID        locker.SessionID // 0: not a session's
	Open      bool             // false once the session has ended
	Connected bool
	ExpiresIn time.Duration
}

// query is the dashboard's state in its URL: filter, order and page.
type query struct {
	Key    string // key substring
	Source string // source substring
	Sort   string // "key" or "age" (longest held first)
	Stuck  bool   // stuck keys only
	Page   int    // 1-based
}

func (q query) filtered() bool { return q.Key != "" || q.Source != "" || q.Stuck }

// withSource returns q filtered by source instead.
func (q query) withSource(source string) query {
	q.Source = source
	return q
}

// url returns the dashboard URL of q at the given page.
func (q query) url(page int) string {
	v := url.Values{}
	if q.Key != "" {
		v.Set("q", q.Key)
	}
	if q.Source != "" {
		v.Set("source", q.Source)
	}
	if q.Sort == "age" {
		v.Set("sort", "age")
	}
	if q.Stuck {
		v.Set("stuck", "1")
	}
	if page > 1 {
		v.Set("page", strconv.Itoa(page))
	}
	if len(v) == 0 {
		return "/"
	}
	return "/?" + v.Encode()
}

// dashData is the dashboard page.
type dashData struct {
	chrome
	Totals  totals
	Query   query
	Rows    []row
	Matched int // keys that match the filter
	First   int // 1-based position of Rows[0] among the matches
	Pages   int
	Flash   *flash
}

// keyData is one key's page.
type keyData struct {
	chrome
	Key    string
	Held   bool
	Holder row
	Queue  []queueRow
}

// queueRow is one waiter in a key's queue.
type queueRow struct {
	Position       int
	Source, Remote string
	Session        locker.SessionID // 0 for a v1 waiter
	Since          time.Time
	Waiting        time.Duration
}

// confirmData is the confirmation step of a reset.
type confirmData struct {
	chrome
	By   string // "key" or "source"
	Name string
	// For a key: whether it is held, by whom, and its queue length.
	Held    bool
	Holder  row
	Waiters int
	// For a source: how many keys it holds.
	Keys int
	// For a session: what it is.
	Session locker.SessionInfo
	// For a hand-over ("transfer", Name the node or "") or a removal
	// ("remove"): the cluster as this node sees it.
	Cluster api.Cluster
}

func parseQuery(r *http.Request) query {
	v := r.URL.Query()
	q := query{Key: v.Get("q"), Source: v.Get("source"), Sort: "key", Stuck: v.Get("stuck") == "1", Page: 1}
	if v.Get("sort") == "age" {
		q.Sort = "age"
	}
	if n, err := strconv.Atoi(v.Get("page")); err == nil && n > 1 {
		// Bounded so that page*PageSize cannot overflow; a page past the
		// end shows the last one.
		q.Page = min(n, 1<<30/PageSize)
	}
	return q
}

// dashboardData builds the dashboard for q at now.
func (s *server) dashboardData(q query, now time.Time) dashData {
	order := byKey
	if q.Sort == "age" {
		order = byAge
	}
	sel := selection{
		filter:   filter{Key: q.Key, Source: q.Source, Stuck: q.Stuck},
		Order:    order,
		Skip:     (q.Page - 1) * PageSize,
		Limit:    PageSize,
		LastPage: true, // past the end (the keys went away, or a hand-made URL): the last page
	}
	v := s.view(sel, now)
	d := dashData{
		chrome:  chrome{Title: "Held keys", Version: s.opts.Version, Live: true},
		Totals:  s.totals(v, now),
		Query:   q,
		Matched: v.Matched,
		Pages:   max(1, (v.Matched+PageSize-1)/PageSize),
		First:   v.Skip + 1,
	}
	d.Query.Page = v.Skip/PageSize + 1
	d.Rows = make([]row, len(v.Rows))
	for i := range v.Rows {
		d.Rows[i] = s.rowOf(&v.Rows[i], now)
	}
	return d
}

func (s *server) totals(v view, now time.Time) totals {
	t := totals{
		Held: v.Held, Waiting: v.Waiting, Stuck: v.Stuck, StuckAfter: s.opts.StuckAfter,
		Uptime: now.Sub(s.started), Persistent: s.opts.Persistent, LogSize: -1,
	}
	if !v.Oldest.IsZero() {
		t.OldestHold = now.Sub(v.Oldest)
	}
	if s.opts.Persistent && s.opts.LogStats != nil {
		t.LogSize = s.opts.LogStats().SizeBytes
	}
	return t
}

func (s *server) rowOf(ki *locker.KeyInfo, now time.Time) row {
	r := row{
		Key: ki.Key, Source: ki.Holder.Source, Remote: ki.Holder.Remote, Since: ki.Since,
		Held: now.Sub(ki.Since), Waiters: ki.Waiters,
	}
	r.Stuck = r.Held >= s.opts.StuckAfter
	r.Token = ki.Token
	r.Session = s.sessionRef(ki.Holder.Session)
	if !ki.OldestWaiter.IsZero() {
		r.OldestWait = max(now.Sub(ki.OldestWaiter), time.Nanosecond)
	}
	if len(ki.Queue) > 0 {
		r.Next = queueRowOf(1, &ki.Queue[0], now)
	}
	return r
}

func queueRowOf(position int, w *locker.Waiter, now time.Time) queueRow {
	return queueRow{Position: position, Source: w.Source, Remote: w.Remote, Session: w.Session,
		Since: w.Since, Waiting: now.Sub(w.Since)}
}

// sessionRef looks session id up; the zero sessionRef for 0.
func (s *server) sessionRef(id locker.SessionID) sessionRef {
	if id == 0 {
		return sessionRef{}
	}
	ref := sessionRef{ID: id}
	if si, ok := s.opts.Table.SessionInfo(id); ok {
		ref.Open, ref.Connected, ref.ExpiresIn = true, si.Connected, si.ExpiresIn
	}
	return ref
}

// isLive tells the script's refresh requests, which want only the #live
// part of the page, from page loads.
func isLive(r *http.Request) bool { return r.Header.Get("X-Live") == "1" }

func (s *server) dashboard(w http.ResponseWriter, r *http.Request) {
	d := s.dashboardData(parseQuery(r), s.now())
	if isLive(r) {
		s.render(w, r, http.StatusOK, dashLive(d))
		return
	}
	d.Flash = s.openFlash(r.URL.Query().Get("done"), s.now())
	s.render(w, r, http.StatusOK, dashboardPage(d))
}

func (s *server) keyPage(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	now := s.now()
	d := keyData{chrome: chrome{Title: "Key " + shown(key), Version: s.opts.Version, Live: true}, Key: key}
	status := http.StatusOK
	if ki, ok := s.opts.Table.Key(key); ok {
		d.Held = true
		d.Holder = s.rowOf(&ki, now)
		d.Holder.Waiters = len(ki.Queue)
		d.Queue = make([]queueRow, len(ki.Queue))
		for i := range ki.Queue {
			d.Queue[i] = queueRowOf(i+1, &ki.Queue[i], now)
		}
	} else {
		status = http.StatusNotFound
	}
	if isLive(r) {
		s.render(w, r, status, keyLive(d))
		return
	}
	s.render(w, r, status, keyPage(d))
}

func (s *server) confirmResetKey(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		s.pageError(w, r, http.StatusBadRequest, errors.New("no key given: start a reset from the dashboard or a key's page"))
		return
	}
	d := confirmData{chrome: chrome{Title: "Reset key " + shown(key), Version: s.opts.Version}, By: "key", Name: key}
	if ki, ok := s.opts.Table.Key(key); ok {
		d.Held = true
		d.Holder = s.rowOf(&ki, s.now())
		d.Waiters = len(ki.Queue)
	}
	s.render(w, r, http.StatusOK, confirmPage(d))
}

func (s *server) confirmResetSource(w http.ResponseWriter, r *http.Request) {
	source := r.URL.Query().Get("source")
	if source == "" {
		s.pageError(w, r, http.StatusBadRequest, errors.New("no source given: start a reset from the dashboard or a key's page"))
		return
	}
	d := confirmData{chrome: chrome{Title: "Reset source " + shown(source), Version: s.opts.Version}, By: "source", Name: source}
	d.Keys = s.catalogs.get(s.now().Add(-s.opts.StuckAfter)).countSource(source)
	s.render(w, r, http.StatusOK, confirmPage(d))
}

// formValue reads field from a reset form. The form also carries the value
// percent-encoded in field+"_pct", because an HTML attribute cannot carry
// bytes that are not UTF-8; tools that post the plain field still work.
func formValue(w http.ResponseWriter, r *http.Request, field string) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		return "", fmt.Errorf("bad form: %w", err)
	}
	if pct := r.PostForm.Get(field + "_pct"); pct != "" {
		v, err := keypath.Decode(pct)
		if err != nil {
			return "", fmt.Errorf("bad form field %s_pct: %w", field, err)
		}
		return v, nil
	}
	if v := r.PostForm.Get(field); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("form field %q is missing or empty", field)
}

func (s *server) formResetKey(w http.ResponseWriter, r *http.Request) {
	key, err := formValue(w, r, "key")
	if err != nil {
		s.pageError(w, r, http.StatusBadRequest, err)
		return
	}
	res, err := s.resetKey(key, "dashboard", r)
	s.afterReset(w, r, "key", key, res, err)
}

func (s *server) formResetSource(w http.ResponseWriter, r *http.Request) {
	source, err := formValue(w, r, "source")
	if err != nil {
		s.pageError(w, r, http.StatusBadRequest, err)
		return
	}
	res, err := s.resetSource(source, "dashboard", r)
	s.afterReset(w, r, "source", source, res, err)
}

// afterReset sends the browser back to the dashboard with the outcome
// sealed in the URL (sealFlash), so that reloading the page shows the
// message without resetting again, and nobody can make up an outcome.
func (s *server) afterReset(w http.ResponseWriter, r *http.Request, by, name string, res locker.ResetResult, err error) {
	if err != nil {
		s.pageError(w, r, failStatus(err), failMessage(err, res))
		return
	}
	done := s.sealFlash(flash{By: by, Name: name, Released: res.Released, Refused: res.Refused}, s.now())
	http.Redirect(w, r, "/?done="+done, http.StatusSeeOther)
}

func (s *server) pageError(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		s.log.Error("web request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	s.render(w, r, status, errorPage(chrome{Title: http.StatusText(status), Version: s.opts.Version}, status, sentence(err.Error())))
}

// securityHeaders are sent with every page: scripts and styles come from
// this server only, and no other site may frame the dashboard (a framed
// Reset button could be clicked by a deceived user).
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
}

func (s *server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	h := w.Header()
	securityHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "X-Live")
	// Render into memory first so that a failure can still change the status.
	var b bytes.Buffer
	ctx := s.withCluster(r.Context(), r)
	if isLive(r) {
		// The live part of a cluster node's page carries the line that
		// says who served it, so that it stays current (nothing on a
		// single node).
		c = templ.Join(clusterBar(), c)
	}
	if err := c.Render(ctx, &b); err != nil {
		s.log.Error("render failed", "path", r.URL.Path, "err", err)
		http.Error(w, "500 internal server error: the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes()) // a write error means the client left
}
