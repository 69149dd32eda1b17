package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"

	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/locker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testServer struct {
	*Server
	addr string
	log  *lctest.SyncBuffer
	// tls, when set, is the configuration every connection of the test's
	// helpers (send, openSession) dials with.
	tls *tls.Config
}

// dial connects to the server, inside TLS when ts.tls is set.
func (ts *testServer) dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	if ts.tls != nil {
		c = tls.Client(c, ts.tls)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func startServer(t testing.TB, configure func(*Server)) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startServerOn(t, l, configure)
}

// startServerOn serves on l until the test ends.
func startServerOn(t testing.TB, l net.Listener, configure func(*Server)) *testServer {
	t.Helper()
	logs := &lctest.SyncBuffer{}
	s := &Server{
		Table:  locker.New(locker.Options{}),
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
	if configure != nil {
		configure(s)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return &testServer{Server: s, addr: l.Addr().String(), log: logs}
}

func frame(a protocol.Action, key, source string) []byte {
	b, err := protocol.Frame{Action: a, Key: key, Source: source}.Append(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// send writes raw bytes on a new connection and returns the connection.
func (ts *testServer) send(t *testing.T, raw []byte) net.Conn {
	t.Helper()
	c := ts.dial(t)
	if _, err := c.Write(raw); err != nil {
		t.Fatal(err)
	}
	return c
}

// answer reads the one-byte answer, or returns 0 when the server closed
// the connection without one.
func answer(t *testing.T, c net.Conn) byte {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	n, err := c.Read(b[:])
	if n == 1 {
		return b[0]
	}
	if err != io.EOF && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
		t.Fatalf("reading the answer: %v", err)
	}
	return 0
}

func (ts *testServer) ask(t *testing.T, a protocol.Action, key, source string) byte {
	t.Helper()
	return answer(t, ts.send(t, frame(a, key, source)))
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (ts *testServer) queued(key string) int {
	ki, ok := ts.Table.Key(key)
	if !ok {
		return -1
	}
	return ki.Waiters
}

func TestAnswers(t *testing.T) {
	ts := startServer(t, nil)
	steps := []struct {
		a    protocol.Action
		key  string
		want byte
	}{
		{protocol.Lock, "k", '+'}, {protocol.TryLock, "k", '#'}, {protocol.Unlock, "k", '+'}, {protocol.Unlock, "k", '-'},
		{protocol.TryLock, "k", '+'}, {protocol.ResetByKey, "k", '+'}, {protocol.ResetByKey, "k", '+'}, {protocol.Lock, "k", '+'},
		{protocol.ResetBySource, "", '+'}, {protocol.Unlock, "k", '-'},
	}
	for i, s := range steps {
		if got := ts.ask(t, s.a, s.key, ""); got != s.want {
			t.Fatalf("step %d: %s %q answered %q, want %q", i, s.a, s.key, got, s.want)
		}
	}
}

func TestEmptySourceIsPeerIP(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", ""); got != '+' {
		t.Fatalf("lock: %q", got)
	}
	ki, _ := ts.Table.Key("k")
	if ki.Holder.Source != "127.0.0.1" || !strings.HasPrefix(ki.Holder.Remote, "127.0.0.1:") {
		t.Fatalf("holder = %+v, want source 127.0.0.1 and a remote with a port", ki.Holder)
	}
	// ResetBySource with an empty source resets the caller's own address.
	if got := ts.ask(t, protocol.ResetBySource, "", ""); got != '+' {
		t.Fatalf("reset source: %q", got)
	}
	if _, held := ts.Table.Key("k"); held {
		t.Fatal("ResetBySource with an empty source did not release the peer's key")
	}
}

func TestBadInput(t *testing.T) {
	ts := startServer(t, nil)
	cases := []struct {
		name   string
		raw    []byte
		reason string
	}{
		{"unknown action", []byte{9, 1, 'k', 0}, "unknown action"},
		{"action zero", []byte{0, 1, 'k', 0}, "unknown action"},
		{"negative key size", []byte{1, 0xff}, "negative size"},
		{"negative source size", []byte{1, 1, 'k', 0x90}, "negative size"},
		{"empty key for lock", []byte{1, 0, 0}, "empty key"},
		{"empty key for unlock", []byte{2, 0, 0}, "empty key"},
		{"empty key for reset", []byte{3, 0, 0}, "empty key"},
		{"empty key for trylock", []byte{5, 0, 0}, "empty key"},
		{"bytes after a lock frame", append(frame(protocol.Lock, "t", ""), 'x'), "bytes after the lock frame"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c0 := ts.send(t, c.raw)
			if got := answer(t, c0); got != '-' {
				t.Fatalf("answer %q, want '-'", got)
			}
			peer := c0.LocalAddr().String()
			waitUntil(t, "the log line", func() bool { return strings.Contains(ts.log.String(), peer) })
			var line string
			for _, l := range strings.Split(ts.log.String(), "\n") {
				if strings.Contains(l, peer) {
					line = l
				}
			}
			if !strings.Contains(line, c.reason) {
				t.Fatalf("log line %q does not give the reason %q", line, c.reason)
			}
		})
	}
	if _, held := ts.Table.Key("t"); held {
		t.Fatal("a lock frame with trailing bytes was granted")
	}
	// Trailing bytes are ignored for the other actions.
	if got := answer(t, ts.send(t, append(frame(protocol.TryLock, "u", ""), "junk"...))); got != '+' {
		t.Fatalf("trylock with trailing bytes: %q", got)
	}
	if got := answer(t, ts.send(t, append(frame(protocol.Unlock, "u", ""), "junk"...))); got != '+' {
		t.Fatalf("unlock with trailing bytes: %q", got)
	}
}

func TestStalledFrameIsClosed(t *testing.T) {
	ts := startServer(t, func(s *Server) { s.RequestTimeout = 100 * time.Millisecond })
	c := ts.send(t, []byte{1, 5, 'a', 'b'}) // promises 5 key bytes, sends 2
	start := time.Now()
	if got := answer(t, c); got != 0 {
		t.Fatalf("answered %q to an incomplete frame", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v", d)
	}
	// Nothing at all within the timeout: closed too.
	if got := answer(t, ts.send(t, nil)); got != 0 {
		t.Fatalf("answered %q to a silent client", got)
	}
}

func TestHangUpWithdrawsWaiter(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", "holder"); got != '+' {
		t.Fatal(got)
	}
	ghost := ts.send(t, frame(protocol.Lock, "k", "ghost"))
	waitUntil(t, "ghost queued", func() bool { return ts.queued("k") == 1 })
	live := ts.send(t, frame(protocol.Lock, "k", "live"))
	waitUntil(t, "live queued", func() bool { return ts.queued("k") == 2 })
	ghost.Close()
	waitUntil(t, "ghost withdrawn", func() bool { return ts.queued("k") == 1 })
	if got := ts.ask(t, protocol.Unlock, "k", ""); got != '+' {
		t.Fatal(got)
	}
	if got := answer(t, live); got != '+' {
		t.Fatalf("live waiter answered %q", got)
	}
	if ki, _ := ts.Table.Key("k"); ki.Holder.Source != "live" {
		t.Fatalf("holder %q, want live", ki.Holder.Source)
	}
}

func TestTrailingBytesWhileWaiting(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", ""); got != '+' {
		t.Fatal(got)
	}
	c := ts.send(t, frame(protocol.Lock, "k", "w"))
	waitUntil(t, "queued", func() bool { return ts.queued("k") == 1 })
	if _, err := c.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, c); got != '-' {
		t.Fatalf("answered %q to bytes sent while waiting", got)
	}
	waitUntil(t, "withdrawn", func() bool { return ts.queued("k") == 0 })
}

func TestFIFOOverTCP(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", "first"); got != '+' {
		t.Fatal(got)
	}
	const n = 20
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = ts.send(t, frame(protocol.Lock, "k", fmt.Sprint("w", i)))
		waitUntil(t, "queued", func() bool { return ts.queued("k") == i+1 })
	}
	for i, c := range conns {
		if got := ts.ask(t, protocol.Unlock, "k", ""); got != '+' {
			t.Fatal(got)
		}
		if got := answer(t, c); got != '+' {
			t.Fatalf("waiter %d answered %q", i, got)
		}
		if ki, _ := ts.Table.Key("k"); ki.Holder.Source != fmt.Sprint("w", i) {
			t.Fatalf("grant %d went to %s", i, ki.Holder.Source)
		}
	}
}

func TestResetWhileWaiting(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", "a"); got != '+' {
		t.Fatal(got)
	}
	w1 := ts.send(t, frame(protocol.Lock, "k", "b"))
	waitUntil(t, "queued", func() bool { return ts.queued("k") == 1 })
	if got := ts.ask(t, protocol.ResetByKey, "k", ""); got != '+' {
		t.Fatal(got)
	}
	if got := answer(t, w1); got != '-' {
		t.Fatalf("waiter after ResetByKey: %q", got)
	}
	if got := ts.ask(t, protocol.Lock, "k", "a"); got != '+' {
		t.Fatal(got)
	}
	w2 := ts.send(t, frame(protocol.Lock, "k", "b"))
	waitUntil(t, "queued", func() bool { return ts.queued("k") == 1 })
	if got := ts.ask(t, protocol.ResetBySource, "", "b"); got != '+' {
		t.Fatal(got)
	}
	if got := answer(t, w2); got != '-' {
		t.Fatalf("waiter after ResetBySource: %q", got)
	}
	if ki, _ := ts.Table.Key("k"); ki.Holder.Source != "a" {
		t.Fatal("ResetBySource of a waiter's source released another source's key")
	}
}

func TestConnectionLimit(t *testing.T) {
	ts := startServer(t, func(s *Server) { s.MaxConnections = 2 })
	if got := ts.ask(t, protocol.Lock, "k", "h"); got != '+' {
		t.Fatal(got)
	}
	// The server counts a connection until its handler has closed it,
	// which may be just after the client read the answer.
	waitUntil(t, "the holder's connection closed", func() bool { return ts.Connections() == 0 })
	w1 := ts.send(t, frame(protocol.Lock, "k", "w1"))
	w2 := ts.send(t, frame(protocol.Lock, "k", "w2"))
	waitUntil(t, "two waiters", func() bool { return ts.queued("k") == 2 })
	if got := ts.ask(t, protocol.Unlock, "k", ""); got != '-' {
		t.Fatalf("request over the limit answered %q, want '-'", got)
	}
	if !strings.Contains(ts.log.String(), "connection limit") {
		t.Fatal("refused connection not logged")
	}
	// The waiters are unaffected: closing one frees a place for an unlock.
	w2.Close()
	waitUntil(t, "w2 gone", func() bool { return ts.Connections() == 1 })
	if got := ts.ask(t, protocol.Unlock, "k", ""); got != '+' {
		t.Fatal(got)
	}
	if got := answer(t, w1); got != '+' {
		t.Fatalf("w1 answered %q", got)
	}
}

func TestShutdownAnswersNothing(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", "h"); got != '+' {
		t.Fatal(got)
	}
	w := ts.send(t, frame(protocol.Lock, "k", "w"))
	waitUntil(t, "queued", func() bool { return ts.queued("k") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, w); got != 0 {
		t.Fatalf("waiter got %q during shutdown", got)
	}
	if _, err := net.Dial("tcp", ts.addr); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}
