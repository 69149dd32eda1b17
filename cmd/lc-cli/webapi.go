package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/locking-center/locking-center/web/api"
	"github.com/locking-center/locking-center/web/keypath"
)

// errNotHeld is the JSON API's 404 for one key.
var errNotHeld = errors.New("not held")

// maxAPIBody bounds what lc-cli reads from the JSON API.
const maxAPIBody = 64 << 20

// webAPI reads the JSON API of a server, or of any node of a cluster. It
// is used by one goroutine at a time.
type webAPI struct {
	// bases are the addresses to ask (scheme, userinfo and host), in the
	// order given; next is the one to ask first, the last that answered.
	bases []*url.URL
	next  int
	http  *http.Client
}

// newWebAPI accepts HOST:PORT or a URL (for https, or a password:
// https://admin:secret@host:22120), or a comma-separated list of them,
// the web ports of a cluster's nodes. With tlsCfg (lc-cli's --tls-*) a
// HOST:PORT is reached over https, trusting what the lock port trusts: a
// server with TLS_CERT serves both ports with that certificate.
func newWebAPI(address string, tlsCfg *tls.Config) (*webAPI, error) {
	w := &webAPI{http: &http.Client{Timeout: 10 * time.Second}}
	https := false
	for entry := range strings.SplitSeq(address, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		raw := entry
		if !strings.Contains(raw, "://") {
			scheme := "http://"
			if tlsCfg != nil {
				scheme = "https://"
			}
			raw = scheme + raw
		}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("--web-address %q: want HOST:PORT or an http(s) URL, or a comma-separated list of them", entry)
		}
		https = https || u.Scheme == "https"
		w.bases = append(w.bases, &url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host})
	}
	if len(w.bases) == 0 {
		return nil, fmt.Errorf("--web-address %q: want HOST:PORT or an http(s) URL", address)
	}
	if tlsCfg != nil && https {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tlsCfg.Clone()
		w.http.Transport = tr
	}
	return w, nil
}

// hosts names the addresses asked, for messages.
func (w *webAPI) hosts() string {
	h := make([]string, len(w.bases))
	for i, b := range w.bases {
		h[i] = b.Host
	}
	return strings.Join(h, ",")
}

// get fetches path?query and returns the body of a 200 answer. It asks
// the nodes in turn: one that cannot be reached, or answers 503 (a node
// of a cluster that does not serve this read: a follower with no leader,
// or one that does not forward), makes it ask the next. The read is
// consistent=1: a follower forwards it to the leader, so that it shows
// every change already acknowledged (a single server ignores it).
func (w *webAPI) get(ctx context.Context, path string, query url.Values) ([]byte, http.Header, error) {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("consistent", "1")
	var errs []string
	for i := range w.bases {
		n := (w.next + i) % len(w.bases)
		body, hdr, next, err := w.getFrom(ctx, w.bases[n], path, q)
		if !next {
			if err == nil || errors.Is(err, errNotHeld) {
				w.next = n
			}
			return body, hdr, err
		}
		errs = append(errs, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return nil, nil, errors.New(strings.Join(errs, "; "))
}

// getFrom is get at one node; next is true when another node may answer.
func (w *webAPI) getFrom(ctx context.Context, base *url.URL, path string, query url.Values) (body []byte, hdr http.Header, next bool, err error) {
	u := *base
	u.User = nil
	u.RawPath = path // already escaped
	u.Path, _ = url.PathUnescape(path)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, false, err
	}
	if base.User != nil {
		pw, _ := base.User.Password()
		req.SetBasicAuth(base.User.Username(), pw)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := w.http.Do(req)
	if err != nil {
		return nil, nil, true, fmt.Errorf("cannot reach the JSON API at %s: %s (see --web-address or LC_WEB_ADDRESS)", base.Host, rootCause(err))
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if err != nil {
		return nil, nil, true, fmt.Errorf("reading %s at %s: %w", path, base.Host, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return body, resp.Header, false, nil
	case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/api/v1/keys/"):
		return nil, nil, false, errNotHeld
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, nil, false, fmt.Errorf("the JSON API at %s asks for a password: use --web-address http://admin:PASSWORD@%s", base.Host, base.Host)
	case resp.StatusCode == http.StatusServiceUnavailable:
		return nil, nil, true, fmt.Errorf("GET %s at %s: %s (a cluster node that does not serve it; give --web-address the other nodes too)", path, base.Host, resp.Status)
	}
	return nil, nil, false, fmt.Errorf("GET %s at %s: %s", path, base.Host, resp.Status)
}

// key fetches one key with its queue; errNotHeld when nobody holds it.
func (w *webAPI) key(ctx context.Context, key string) (*api.KeyDetail, error) {
	body, _, err := w.get(ctx, "/api/v1/keys/"+keypath.Encode(key), nil)
	if err != nil {
		return nil, err
	}
	var k api.KeyDetail
	if err := json.Unmarshal(body, &k); err != nil {
		return nil, fmt.Errorf("the JSON API sent a key that does not decode: %w", err)
	}
	return &k, nil
}

// keys fetches the first page of held keys, as large as the API allows;
// more is true when further pages follow.
func (w *webAPI) keys(ctx context.Context) (keys []api.KeyDetail, more bool, err error) {
	body, hdr, err := w.get(ctx, "/api/v1/keys", url.Values{"limit": {"10000"}})
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(body, &keys); err != nil {
		return nil, false, fmt.Errorf("the JSON API sent a list that does not decode: %w", err)
	}
	return keys, hdr.Get("Link") != "", nil
}

func (a *app) cmdKeys(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("keys")
	asJSON := fs.Bool("json", false, "print the JSON list")
	prefix := fs.String("prefix", "", "only keys that start with P")
	limit := fs.Int("limit", 0, "at most N keys")
	pos, _, sep, done, err := a.parse("keys", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	if len(pos) > 0 || sep {
		return 0, a.usage("keys", "keys takes no arguments (filter with --prefix)")
	}
	if *limit < 0 {
		return 0, a.usage("keys", "--limit %d: want a positive number", *limit)
	}
	wapi, err := newWebAPI(a.webAddress, a.tls)
	if err != nil {
		return 0, a.usage("keys", "%v", err)
	}
	q := url.Values{}
	if *prefix != "" {
		q.Set("prefix", *prefix)
	}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	body, hdr, err := wapi.get(ctx, "/api/v1/keys", q)
	if err != nil {
		return 0, withCode(exitServer, "keys: %w", err)
	}
	var keys []api.KeyDetail
	if err := json.Unmarshal(body, &keys); err != nil {
		return 0, withCode(exitServer, "keys: the JSON API sent a list that does not decode: %w", err)
	}
	if *asJSON {
		a.stdout.Write(body)
		if len(body) == 0 || body[len(body)-1] != '\n' {
			fmt.Fprintln(a.stdout)
		}
		return exitOK, nil
	}
	writeKeys(a.stdout, keys, time.Now())
	if hdr.Get("Link") != "" {
		fmt.Fprintf(a.stderr, "lc-cli: more keys follow; raise --limit or narrow --prefix\n")
	}
	return exitOK, nil
}

// writeKeys prints the held keys as an aligned table.
func writeKeys(w io.Writer, keys []api.KeyDetail, now time.Time) {
	if len(keys) == 0 {
		fmt.Fprintln(w, "no key is held")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSOURCE\tHELD FOR\tWAITERS")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", printable(raw(k.Key, k.KeyBase64)), printable(raw(k.Source, k.SourceBase64)),
			age(now.Sub(k.Since)), k.Waiters)
	}
	tw.Flush()
}

// raw is a key or source's own bytes: the API's base64 copy when it has
// one (the text form shows bytes that are not UTF-8 as U+FFFD), else text.
func raw(text, b64 string) string {
	if b64 == "" {
		return text
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return text
	}
	return string(b)
}

// age formats a duration the way people read it: 45s, 12m3s, 5h2m, 3d4h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	switch {
	case d < time.Hour:
		return d.String()
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, (d%time.Hour)/time.Minute)
	}
	days := d / (24 * time.Hour)
	return fmt.Sprintf("%dd%dh", days, (d-days*24*time.Hour)/time.Hour)
}
