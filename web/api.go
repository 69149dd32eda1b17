package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
)

// apiError is the body of every JSON error answer.
type apiError struct {
	Error string `json:"error"`
}

func apiKeyOf(ki *locker.KeyInfo) api.HeldKey {
	k := api.HeldKey{Key: ki.Key, Source: ki.Holder.Source, Remote: ki.Holder.Remote, Since: ki.Since.UTC(), Waiters: ki.Waiters,
		Token: ki.Token, KeyBase64: rawBase64(ki.Key), SourceBase64: rawBase64(ki.Holder.Source)}
	if ki.Holder.Session != 0 {
		id := ki.Holder.Session.String()
		k.Session = &id
	}
	return k
}

// rawBase64 is s in base64 when s is not UTF-8, else "".
func rawBase64(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// The JSON list's page size: without ?limit= a page holds DefaultLimit
// keys, and a larger ?limit= is lowered to MaxLimit. The limit applied is
// sent in the X-Limit header.
const (
	DefaultLimit = 1000
	MaxLimit     = 10000
)

// apiList serves GET /api/v1/keys: held keys in bytewise key order.
// ?prefix= keeps keys that start with it; ?limit=N returns at most N keys
// (DefaultLimit without it, at most MaxLimit) and, when more follow, a Link
// header (rel="next") whose ?after= cursor continues after the last key
// of the page.
func (s *server) apiList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sel := selection{filter: filter{Prefix: q.Get("prefix"), After: q.Get("after")}, Order: byKey, Limit: DefaultLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.apiFail(w, r, http.StatusBadRequest, fmt.Errorf("limit=%q: want a whole number of at least 1", v))
			return
		}
		sel.Limit = min(n, MaxLimit)
	}
	v := s.view(sel, s.now())
	w.Header().Set("X-Limit", strconv.Itoa(sel.Limit))
	if v.More {
		next := url.Values{"limit": {strconv.Itoa(sel.Limit)}, "after": {v.Last}}
		if sel.Prefix != "" {
			next.Set("prefix", sel.Prefix)
		}
		w.Header().Set("Link", fmt.Sprintf("</api/v1/keys?%s>; rel=\"next\"", next.Encode()))
	}
	out := make([]api.HeldKey, len(v.Rows))
	for i := range v.Rows {
		out[i] = apiKeyOf(&v.Rows[i])
	}
	writeJSON(w, http.StatusOK, out)
}

// apiKey serves GET /api/v1/keys/{key}: the holder and the whole queue, or
// 404 when the key is not held.
func (s *server) apiKey(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	ki, ok := s.opts.Table.Key(key)
	if !ok {
		s.apiFail(w, r, http.StatusNotFound, fmt.Errorf("key %q is not held", key))
		return
	}
	out := api.KeyDetail{HeldKey: apiKeyOf(&ki), Queue: make([]api.Waiter, len(ki.Queue))}
	for i, q := range ki.Queue {
		out.Queue[i] = api.Waiter{Source: q.Source, Remote: q.Remote, Since: q.Since.UTC(), SourceBase64: rawBase64(q.Source)}
	}
	writeJSON(w, http.StatusOK, out)
}

// apiResetKey serves POST /api/v1/reset/key with body {"key": "..."}.
func (s *server) apiResetKey(w http.ResponseWriter, r *http.Request) {
	if key, ok := s.apiResetTarget(w, r, "key"); ok {
		res, err := s.resetKey(key, "api", r)
		s.apiReset(w, r, res, err)
	}
}

// apiResetSource serves POST /api/v1/reset/source with body {"source": "..."}.
func (s *server) apiResetSource(w http.ResponseWriter, r *http.Request) {
	if source, ok := s.apiResetTarget(w, r, "source"); ok {
		res, err := s.resetSource(source, "api", r)
		s.apiReset(w, r, res, err)
	}
}

// apiResetTarget reads the target of a reset from its JSON body: exactly
// one of field ("key" or "source", a JSON string) and field+"_base64" (the
// raw bytes in standard base64, for a key or source that is not UTF-8),
// non-empty. On failure it has answered 400, or 413 for a body over
// maxBody.
func (s *server) apiResetTarget(w http.ResponseWriter, r *http.Request, field string) (string, bool) {
	fields, err := readStrictObject(w, r, field, field+"_base64")
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errBodyTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		s.apiFail(w, r, status, err)
		return "", false
	}
	plain, hasPlain := fields[field]
	b64, hasB64 := fields[field+"_base64"]
	var v string
	switch {
	case hasPlain && hasB64:
		err = fmt.Errorf("give %q or %q, not both", field, field+"_base64")
	case hasB64:
		var raw []byte
		if raw, err = base64.StdEncoding.Strict().DecodeString(b64); err != nil {
			err = fmt.Errorf("field %q: not standard base64: %w", field+"_base64", err)
		}
		v = string(raw)
	default:
		v = plain
	}
	if err == nil && v == "" {
		err = fmt.Errorf(`want a JSON body {%q: "..."} (or {%q: "..."} for raw bytes) with a non-empty %s`,
			field, field+"_base64", field)
	}
	if err != nil {
		s.apiFail(w, r, http.StatusBadRequest, err)
		return "", false
	}
	return v, true
}

func (s *server) apiReset(w http.ResponseWriter, r *http.Request, res locker.ResetResult, err error) {
	if err != nil {
		// The engine left the key held (the release could not be
		// recorded), or its outcome is not known, or "nothing changed"
		// could not be confirmed.
		s.apiFail(w, r, failStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, api.ResetResult{Released: res.Released, Refused: res.Refused})
}

// resetKey is every web reset of a key: the engine's ResetByKey, counted
// and logged.
func (s *server) resetKey(key, via string, r *http.Request) (locker.ResetResult, error) {
	res, err := s.opts.Table.ResetByKey(key)
	if err != nil {
		s.log.Error("reset by key failed", "via", via, "key", key, "peer", r.RemoteAddr, "err", err)
		return res, fmt.Errorf("reset key %q: %w", key, err)
	}
	if res.Released == 0 && res.Refused == 0 {
		if err := s.confirmNothing(); err != nil {
			return res, fmt.Errorf("reset key %q: %w", key, err)
		}
	}
	s.metrics.ResetByKey()
	s.log.Info("reset by key", "via", via, "key", key, "peer", r.RemoteAddr, "released", res.Released, "refused", res.Refused)
	return res, nil
}

// resetSource is every web reset of a source: the engine's ResetBySource,
// counted and logged.
func (s *server) resetSource(source, via string, r *http.Request) (locker.ResetResult, error) {
	res, err := s.opts.Table.ResetBySource(source)
	if err != nil {
		s.log.Error("reset by source failed", "via", via, "source", source, "peer", r.RemoteAddr,
			"released", res.Released, "refused", res.Refused, "err", err)
		return res, fmt.Errorf("reset source %q: %w", source, err)
	}
	if res.Released == 0 && res.Refused == 0 {
		if err := s.confirmNothing(); err != nil {
			return res, fmt.Errorf("reset source %q: %w", source, err)
		}
	}
	s.metrics.ResetBySource()
	s.log.Info("reset by source", "via", via, "source", source, "peer", r.RemoteAddr, "released", res.Released, "refused", res.Refused)
	return res, nil
}

// maxBody bounds a JSON request body: a key or a source is short.
const maxBody = 4 << 10

// errBodyTooLarge is wrapped by readStrictObject for a body over maxBody.
var errBodyTooLarge = fmt.Errorf("request body too large: the limit is %d bytes", maxBody)

// readStrictObject reads a request body that must be one JSON object
// whose members are among allowed, each named exactly (case counts), each
// at most once, each a string; nothing but white space may follow it. The
// body must be UTF-8 (RFC 8259): a string with other bytes would otherwise
// be read as U+FFFD and name another key than the one meant. It returns
// the members found.
func readStrictObject(w http.ResponseWriter, r *http.Request, allowed ...string) (map[string]string, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, errBodyTooLarge
		}
		return nil, fmt.Errorf("read body: %w", err)
	}
	if !utf8.Valid(body) {
		return nil, errors.New("bad JSON body: not UTF-8 (send raw bytes with the _base64 field)")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	bad := func(format string, a ...any) error { return fmt.Errorf("bad JSON body: "+format, a...) }
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, bad("want one JSON object")
	}
	out := make(map[string]string, len(allowed))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad("%v", err)
		}
		name := tok.(string) // inside an object, Token returns member names as strings
		if !slices.Contains(allowed, name) {
			return nil, bad("unknown field %q (the fields are %s)", name, strings.Join(quoteAll(allowed), ", "))
		}
		if _, dup := out[name]; dup {
			return nil, bad("field %q given twice", name)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, bad("%v", err)
		}
		v, ok := tok.(string)
		if !ok {
			return nil, bad("field %q: want a string", name)
		}
		out[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("data after the JSON object")
	}
	return out, nil
}

func quoteAll(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return q
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// encoding/json escapes <, > and & and replaces bytes that are not
	// UTF-8, so keys cannot break out of the document.
	_ = json.NewEncoder(w).Encode(v) // a write error means the client left
}

func (s *server) apiFail(w http.ResponseWriter, r *http.Request, status int, err error) {
	if status >= 500 {
		s.log.Error("web request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, apiError{Error: err.Error()})
}
