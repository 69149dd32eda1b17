package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/web/api"
)

func TestParseArgsAcceptsFlagsAfterKey(t *testing.T) {
	for _, c := range []struct {
		args    []string
		pos     []string
		child   []string
		sep     bool
		timeout time.Duration
	}{
		{[]string{"k"}, []string{"k"}, nil, false, 0},
		{[]string{"--timeout", "5s", "k"}, []string{"k"}, nil, false, 5 * time.Second},
		{[]string{"k", "--timeout", "5s", "--", "cmd", "--timeout", "x"}, []string{"k"}, []string{"cmd", "--timeout", "x"}, true, 5 * time.Second},
		{[]string{"k", "-timeout=2", "--", "sh", "-c", "exit 1"}, []string{"k"}, []string{"sh", "-c", "exit 1"}, true, 2 * time.Second},
		{[]string{"k", "--"}, []string{"k"}, []string{}, true, 0},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var d durationFlag
		fs.Var(&d, "timeout", "")
		pos, child, sep, err := parseArgs(fs, c.args)
		if err != nil || !reflect.DeepEqual(pos, c.pos) || !reflect.DeepEqual(child, c.child) || sep != c.sep || d.d != c.timeout {
			t.Errorf("%q: pos %q child %q sep %v timeout %v err %v", c.args, pos, child, sep, d.d, err)
		}
	}
}

func TestDurationFlag(t *testing.T) {
	for in, want := range map[string]time.Duration{"30s": 30 * time.Second, "5m": 5 * time.Minute, "30": 30 * time.Second, "0.5": 500 * time.Millisecond, "0": 0} {
		var d durationFlag
		if err := d.Set(in); err != nil || d.d != want {
			t.Errorf("%q: %v %v, want %v", in, d.d, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-1s", "-3"} {
		var d durationFlag
		if err := d.Set(in); err == nil {
			t.Errorf("%q accepted as %v", in, d.d)
		}
	}
}

func TestAge(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 400 * time.Millisecond: "0s", 45 * time.Second: "45s",
		12*time.Minute + 3*time.Second: "12m3s", 5*time.Hour + 2*time.Minute + 9*time.Second: "5h2m",
		76 * time.Hour: "3d4h",
	} {
		if got := age(d); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"deploy/prod": "deploy/prod", "clé": "clé", "a\x1b[2Jb": `"a\x1b[2Jb"`, "tab\t": `"tab\t"`, "\xff": `"\xff"`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStatusPlace(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	queue := []api.Waiter{
		{Source: "bob", Remote: "10.0.0.2:1000", Since: start.Add(-time.Minute)},
		{Source: "carol", Remote: "10.0.0.3:2000", Since: start.Add(-10 * time.Second)},
		{Source: "carol", Remote: "10.0.0.3:2001", Since: start.Add(20 * time.Millisecond)},
		{Source: "10.0.0.9", Remote: "10.0.0.9:3000", Since: start.Add(time.Second)},
	}
	s := &status{a: &app{source: "carol"}, start: start}
	if got := s.place(queue); got != 2 || s.me != "10.0.0.3:2001" {
		t.Errorf("place by source and time = %d (%q), want 2", got, s.me)
	}
	// Once recognised, the entry is followed by its remote address.
	if got := s.place(queue[1:]); got != 1 {
		t.Errorf("after the head left: %d, want 1", got)
	}
	anon := &status{a: &app{}, start: start}
	if got := anon.place(queue); got != 3 {
		t.Errorf("place without a source = %d, want 3 (the entry whose source is its IP)", got)
	}
	if got := (&status{a: &app{source: "dave"}, start: start}).place(queue); got != -1 {
		t.Errorf("place of an absent waiter = %d, want -1", got)
	}
}

// TestReleaseRetriesOnlyUnsent: the release after a command is tried
// again while the server cannot be reached at all (nothing was sent), and
// never once its frame was sent and the answer did not come (a server that
// reads it and hangs up, as one that is restarting does): that Unlock may
// have been applied, and a second could release whoever took the key since.
func TestReleaseRetriesOnlyUnsent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens: every attempt is refused before sending
	start := time.Now()
	if err := release(client.New(addr), "k", 3, 10*time.Millisecond); !errors.Is(err, client.ErrUnreachable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("release with no server: %v, want ErrUnreachable (not sent)", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("release gave up after %v: it did not back off and try again (10ms, then 20ms)", d)
	}

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			var frame [protocol.MaxFrame]byte
			_, _ = c.Read(frame[:])
			conns.Add(1)
			c.Close() // read, and no answer
		}
	})
	defer wg.Wait()
	defer ln.Close()
	if err := release(client.New(ln.Addr().String()), "k", 5, time.Millisecond); !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("release whose answer was lost: %v, want ErrOutcomeUnknown", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("release sent the Unlock %d times, want once", n)
	}
}

func TestWriteSessions(t *testing.T) {
	var b strings.Builder
	writeSessions(&b, nil)
	if b.String() != "no session is open\n" {
		t.Errorf("empty list: %q", b.String())
	}
	b.Reset()
	writeSessions(&b, []api.Session{
		{Session: "00c0ffee12345678", Source: "svc", Remote: "10.0.0.2:5000", Connected: true, TTLMillis: 10000, ExpiresInMillis: 9700, Holds: 2},
		{Session: "0000000000000abc", Source: "cron", Remote: "10.0.0.3:6000", TTLMillis: 600000, ExpiresInMillis: 65000, Waiting: 1},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SESSION") {
		t.Fatalf("table:\n%s", b.String())
	}
	for _, want := range []string{"00c0ffee12345678  svc", "connected", "10s", "9.7s", "disconnected", "10m0s", "1m5s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestWriteKeysShowsRawBytes: a key that is not UTF-8 is shown from the
// API's base64 copy of its bytes, not from the text form's U+FFFD.
func TestWriteKeysShowsRawBytes(t *testing.T) {
	var b strings.Builder
	k := api.KeyDetail{HeldKey: api.HeldKey{Key: "a\uFFFDb", KeyBase64: base64.StdEncoding.EncodeToString([]byte("a\xffb")), Source: "svc", Since: time.Now()}}
	writeKeys(&b, []api.KeyDetail{k}, time.Now())
	if !strings.Contains(b.String(), `"a\xffb"`) {
		t.Fatalf("keys table:\n%s\nwant the key's own bytes, quoted", b.String())
	}
}

func TestCheckAddresses(t *testing.T) {
	for _, ok := range []string{"localhost:22119", "a:1,b:2,c:3", " a:1 , b:2 ,", "[::1]:22119,127.0.0.1:22119"} {
		if err := checkAddresses(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ",", "localhost", "a:1,b", ":22119", "a:1,:2"} {
		if err := checkAddresses(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestWebAPIList(t *testing.T) {
	w, err := newWebAPI("a:22120, https://admin:pw@b:22120,", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.bases) != 2 || w.bases[0].String() != "http://a:22120" || w.bases[1].Host != "b:22120" || w.bases[1].User.Username() != "admin" {
		t.Fatalf("bases %v", w.bases)
	}
	if w.hosts() != "a:22120,b:22120" {
		t.Fatalf("hosts %q", w.hosts())
	}
	for _, bad := range []string{"", " , ", "ftp://x:1", "a:1,http://"} {
		if _, err := newWebAPI(bad, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
