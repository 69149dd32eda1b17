package wire

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// dialFrom connects to addr from the loopback address src (127.0.0.2 and
// the like: Linux routes all of 127/8 to lo), so that one test can be
// several peers.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stall opens n connections from src that send one byte of a Lock frame
// and nothing more, and returns how many the server refused ('-' or a
// close within refuseWait) and the ones it kept.
func stall(t *testing.T, ts *testServer, src string, n int) (refused int, kept []net.Conn) {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dialFrom(t, src, ts.addr)
		if _, err := conns[i].Write([]byte{byte(protocol.Lock)}); err != nil {
			t.Fatal(err)
		}
	}
	// A refusal comes within about a second (the server reads the first
	// byte briefly); a kept connection says nothing until the request
	// timeout. One deadline for all, so the reads do not add up.
	deadline := time.Now().Add(1500 * time.Millisecond)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		var b [1]byte
		if _, err := c.Read(b[:]); err == nil || !isTimeout(err) {
			refused++
			continue
		}
		kept = append(kept, c)
	}
	return refused, kept
}

// served checks that a client at src gets n Lock+Unlock cycles answered.
func served(t *testing.T, ts *testServer, src string, n int) {
	t.Helper()
	for i := range n {
		c := dialFrom(t, src, ts.addr)
		if _, err := c.Write(frame(protocol.Lock, "legit", "legit")); err != nil {
			t.Fatal(err)
		}
		if got := answer(t, c); got != protocol.AnswerOK {
			t.Fatalf("legitimate Lock %d from %s answered %q beside the stalled sockets", i, src, got)
		}
		c.Close()
		u := dialFrom(t, src, ts.addr)
		if _, err := u.Write(frame(protocol.Unlock, "legit", "legit")); err != nil {
			t.Fatal(err)
		}
		if got := answer(t, u); got != protocol.AnswerOK {
			t.Fatalf("legitimate Unlock %d from %s answered %q", i, src, got)
		}
		u.Close()
		waitUntil(t, "the legitimate connections closed", func() bool { return ts.Connections() < ts.MaxConnections })
	}
}

// TestPerPeerBound: one peer holding stalled sockets at and past its
// bound does not shut out a legitimate client from another address (with
// no per-peer bound it took every place: the 38 of 40 Locks
// answered '-'); past MaxConnections from many peers new clients are
// refused until the request timeout drops the stalled sockets.
func TestPerPeerBound(t *testing.T) {
	ts := startServer(t, func(s *Server) {
		s.MaxConnections = 40
		s.MaxConnectionsPerPeer = 10
		s.RequestTimeout = 6 * time.Second // outlasts the stages below
	})

	// At the bound: all ten kept, the legitimate client served.
	refused, kept := stall(t, ts, "127.0.0.2", 10)
	if refused != 0 || len(kept) != 10 {
		t.Fatalf("at the per-peer bound: %d refused, %d kept; want 0 and 10", refused, len(kept))
	}
	served(t, ts, "127.0.0.1", 5)

	// Past it: the same peer's next 30 are refused, the client served.
	refused, more := stall(t, ts, "127.0.0.2", 30)
	if refused != 30 || len(more) != 0 {
		t.Fatalf("past the per-peer bound: %d refused, %d kept; want 30 and 0", refused, len(more))
	}
	served(t, ts, "127.0.0.1", 40)

	// Four peers at their bound fill MaxConnections: now everyone new is
	// refused, and the request timeout frees the places.
	for _, src := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		for range 10 {
			if _, err := dialFrom(t, src, ts.addr).Write([]byte{byte(protocol.Lock)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, "four peers at their bound", func() bool { return ts.Connections() == ts.MaxConnections })
	c := dialFrom(t, "127.0.0.1", ts.addr)
	if _, err := c.Write(frame(protocol.TryLock, "legit", "legit")); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, c); got != protocol.AnswerFail {
		t.Fatalf("at MaxConnections a new client was answered %q, want '-'", got)
	}
	waitUntil(t, "the request timeout to drop the stalled sockets", func() bool { return ts.Connections() == 0 })
	served(t, ts, "127.0.0.1", 5)

	// (The refusal at MaxConnections came within a second of the others:
	// its line was held back, see TestRefusalsLoggedOncePerSecond.)
	if out := ts.log.String(); !strings.Contains(out, "per-address connection limit") {
		t.Errorf("no log line names the per-address limit:\n%s", out)
	}
}

// TestRefusalsLoggedOncePerSecond: a flood of refused connections writes
// a line a second, each counting the refusals held back since the last,
// not a line each (the issue measured 8,947 lines in 8 s).
func TestRefusalsLoggedOncePerSecond(t *testing.T) {
	ts := startServer(t, func(s *Server) { s.MaxConnections = 1 })
	holder := dialFrom(t, "127.0.0.1", ts.addr)
	if _, err := holder.Write([]byte{byte(protocol.Lock)}); err != nil { // stalled: holds the one place
		t.Fatal(err)
	}
	waitUntil(t, "the stalled connection served", func() bool { return ts.Connections() == 1 })
	const flood = 300
	start := time.Now()
	for range flood {
		c := dialFrom(t, "127.0.0.1", ts.addr)
		c.Close()
	}
	elapsed := time.Since(start)
	lines := strings.Count(ts.log.String(), "connection refused")
	if max := int(elapsed/time.Second) + 2; lines > max || lines == 0 {
		t.Fatalf("%d refusals in %v wrote %d lines, want 1..%d:\n%s", flood, elapsed, lines, max, ts.log)
	}
	// The next line, a second on, counts the ones held back.
	time.Sleep(time.Second) // the limiter's interval; nothing to wait on
	c := dialFrom(t, "127.0.0.1", ts.addr)
	c.Close()
	waitUntil(t, "the line after the flood", func() bool { return strings.Count(ts.log.String(), "connection refused") == lines+1 })
	if !strings.Contains(ts.log.String(), "held_back=") {
		t.Fatalf("no line counts the refusals held back:\n%s", ts.log)
	}
	t.Logf("%d refusals in %v: %d lines", flood, elapsed, lines+1)
}
