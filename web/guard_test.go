package web

import (
	"bytes"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestHostCheck is the DNS-rebinding case: with no password, a request
// whose Host is another site's name is refused, reads and resets alike,
// even when it says it is same-origin; the names the server answers for
// pass, and the probes answer any name.
func TestHostCheck(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.ListenAddress = "dash.internal:22120"
		o.AllowedHosts = []string{"locks.example.com", " Proxy.Example.NET:8443 ", "*.corp.example"}
	})
	f.hold("k", "svc", time.Minute)

	evil := []string{"Host", "evil.example", "Origin", "http://evil.example", "Sec-Fetch-Site", "same-origin"}
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/api/v1/reset/key", `{"key":"k"}`},
		{"POST", "/reset/key", "key=k"},
		{"GET", "/", ""},
		{"GET", "/api/v1/keys", ""},
		{"GET", "/keys/k", ""},
		{"GET", "/metrics", ""},
	} {
		hdr := append([]string{"Content-Type", "application/x-www-form-urlencoded"}, evil...)
		w := f.do(c.method, c.target, c.body, hdr...)
		if w.Code != http.StatusMisdirectedRequest || !strings.Contains(w.Body.String(), "DNS rebinding") ||
			!strings.Contains(w.Body.String(), `"evil.example"`) {
			t.Errorf("%s %s with Host evil.example: %d %q", c.method, c.target, w.Code, w.Body)
		}
	}
	if _, held := f.table.Key("k"); !held {
		t.Fatal("a refused rebinding request reset the key")
	}

	hn, _ := os.Hostname()
	for _, host := range []string{
		"localhost", "localhost:9", "LOCALHOST.", "app.localhost:3000", "127.0.0.1", "127.0.0.1:22120",
		"[::1]", "[::1]:22120", "192.0.2.7:22120", "[fe80::1%25eth0]:22120", "dash.internal", "dash.internal:80",
		"locks.example.com", "proxy.example.net", "a.b.corp.example", hn, "",
	} {
		if w := f.do("GET", "/api/v1/keys", "", "Host", host); w.Code != 200 {
			t.Errorf("Host %q: %d %s", host, w.Code, w.Body)
		}
	}
	for _, host := range []string{"evil.example", "corp.example", "localhost.evil.example", "dash.internal.evil", "example.com"} {
		if w := f.do("GET", "/api/v1/keys", "", "Host", host); w.Code != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: %d, want 421", host, w.Code)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if w := f.do("GET", p, "", "Host", "evil.example"); w.Code != 200 {
			t.Errorf("probe %s under any Host: %d", p, w.Code)
		}
	}

	open := newFixture(t, func(o *Options) { o.AllowedHosts = []string{"*"} })
	if w := open.do("GET", "/api/v1/keys", "", "Host", "evil.example"); w.Code != 200 {
		t.Errorf(`AllowedHosts "*": %d`, w.Code)
	}
}

// TestRefusalsLogged: wrong passwords and unknown hosts are logged, one
// line with the peer, and a flood gives one line a second that counts the
// lines held back.
func TestRefusalsLogged(t *testing.T) {
	var buf bytes.Buffer
	f := newFixture(t, func(o *Options) {
		o.Password = "s3cret"
		o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	})
	f.do("GET", "/", "") // a browser's first request carries no password: not an attempt
	if buf.Len() != 0 {
		t.Fatalf("a request without credentials was logged: %s", buf.String())
	}
	for range 50 {
		if w := f.do("GET", "/", "", "Authorization", basic("admin", "guess")); w.Code != 401 {
			t.Fatalf("wrong password: %d", w.Code)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "wrong user or password") || !strings.Contains(lines[0], "peer=192.0.2.1:1234") {
		t.Fatalf("50 failed attempts in one second logged as %q", lines)
	}
	f.now = f.now.Add(time.Second)
	f.do("GET", "/", "", "Authorization", basic("root", "guess"))
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "held_back=49") || !strings.Contains(lines[1], "user=root") {
		t.Fatalf("the next second: %q", lines)
	}

	buf.Reset()
	for range 20 {
		f.do("GET", "/", "", "Host", "evil.example")
	}
	if n := strings.Count(buf.String(), "unknown Host"); n != 1 || !strings.Contains(buf.String(), "host=evil.example") {
		t.Fatalf("20 unknown-host requests logged as %q", buf.String())
	}
}
