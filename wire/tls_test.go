//go:build unix

package wire

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

// startTLSServer serves TLS with a certificate of a CA made here; the
// test's helpers dial it with that CA.
func startTLSServer(t *testing.T, l net.Listener, configure func(*Server)) *testServer {
	t.Helper()
	ca := tlstest.NewCA(t, "wire test CA")
	leaf := ca.Issue(t, tlstest.Options{})
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ts := startServerOn(t, l, func(s *Server) {
		s.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{leaf.TLS}}
		if configure != nil {
			configure(s)
		}
	})
	ts.tls = &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	return ts
}

func TestTLSBothProtocols(t *testing.T) {
	rl := &recordingListener{conns: make(chan net.Conn, 16)}
	var err error
	if rl.Listener, err = (&net.ListenConfig{KeepAlive: -1}).Listen(t.Context(), "tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ts := startTLSServer(t, rl, nil)

	if a := ts.ask(t, protocol.Lock, "k", "holder"); a != protocol.AnswerOK {
		t.Fatalf("Lock over TLS: %q", a)
	}
	<-rl.conns
	// A waiter that hangs up (close_notify: the client's CloseWrite) is
	// withdrawn, as on a plain connection.
	ghost := ts.send(t, frame(protocol.Lock, "k", "ghost"))
	if !keepAliveOn(t, <-rl.conns) {
		t.Error("keepalive is off on a TLS connection")
	}
	waitUntil(t, "ghost queued", func() bool { return ts.queued("k") == 1 })
	if err := ghost.(*tls.Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "ghost withdrawn", func() bool { return ts.queued("k") == 0 })
	// A waiter that stays is granted when the key is unlocked: its
	// watcher's read, stopped by a deadline, leaves the TLS stream usable.
	live := ts.send(t, frame(protocol.Lock, "k", "live"))
	waitUntil(t, "live queued", func() bool { return ts.queued("k") == 1 })
	if a := ts.ask(t, protocol.Unlock, "k", "holder"); a != protocol.AnswerOK {
		t.Fatalf("Unlock over TLS: %q", a)
	}
	if a := answer(t, live); a != protocol.AnswerOK {
		t.Fatalf("the waiter over TLS answered %q after the unlock", a)
	}
	if ki, _ := ts.Table.Key("k"); ki.Holder.Source != "live" {
		t.Fatalf("holder %q, want live", ki.Holder.Source)
	}
	if a := ts.ask(t, protocol.Unlock, "k", ""); a != protocol.AnswerOK {
		t.Fatalf("Unlock over TLS: %q", a)
	}

	p, oa := ts.openSession(t, protocol.Open{TTLMillis: 5000})
	if oa.Status != protocol.AnswerOK {
		t.Fatalf("session open over TLS: %+v", oa)
	}
	tok := p.ask(protocol.Lock, 0, "s").Token
	if a := p.ask(protocol.Ping, 0, ""); a.Status != protocol.AnswerOK {
		t.Fatalf("Ping: %+v", a)
	}
	if a := p.ask(protocol.Unlock, tok, "s"); a.Status != protocol.AnswerOK || a.Token != tok {
		t.Fatalf("Unlock: %+v", a)
	}
}

// TestTLSHandshakeIsBounded: a client that connects and never completes
// the handshake is closed after RequestTimeout and gives its slot back.
func TestTLSHandshakeIsBounded(t *testing.T) {
	ts := startTLSServer(t, nil, func(s *Server) { s.RequestTimeout = 100 * time.Millisecond })
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitUntil(t, "the connection counted", func() bool { return ts.Connections() == 1 })
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("silent client: %v, want the server to close", err)
	}
	waitUntil(t, "the slot given back", func() bool { return ts.Connections() == 0 })

	// A plain v1 frame is no handshake: closed with no answer, and logged.
	if a := answer(t, func() net.Conn {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(frame(protocol.Lock, "k", "plain")); err != nil {
			t.Fatal(err)
		}
		return c
	}()); a == protocol.AnswerOK {
		t.Fatal("a plain frame was granted on a TLS port")
	}
	waitUntil(t, "the failed handshake logged", func() bool { return strings.Contains(ts.log.String(), "tls handshake failed") })
	if _, held := ts.Table.Key("k"); held {
		t.Fatal("a plain frame took a key on a TLS port")
	}
}

// TestTLSConnectionLimit: a connection over the limit reads its '-'
// inside TLS.
func TestTLSConnectionLimit(t *testing.T) {
	ts := startTLSServer(t, nil, func(s *Server) { s.MaxConnections = 1 })
	p, oa := ts.openSession(t, protocol.Open{})
	if oa.Status != protocol.AnswerOK {
		t.Fatalf("open: %+v", oa)
	}
	if a := ts.ask(t, protocol.TryLock, "k", ""); a != protocol.AnswerFail {
		t.Fatalf("v1 over the limit answered %q, want '-'", a)
	}
	if _, o := ts.openSession(t, protocol.Open{}); o.Status != protocol.AnswerFail {
		t.Fatalf("session over the limit: %+v, want '-'", o)
	}
	if a := p.ask(protocol.Ping, 0, ""); a.Status != protocol.AnswerOK {
		t.Fatalf("the session within the limit: %+v", a)
	}
}

// TestTLSSocketWritesWithoutWaitingFirst: the socket under TLS hands a
// record to the kernel even when crypto/tls's deadline has passed (a
// handover's millisecond may be spent before the write starts); only what
// the kernel does not take is bound by it.
func TestTLSSocketWritesWithoutWaitingFirst(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sock := &tlsSocket{Conn: c, raw: rawConn(c)}
	_ = sock.SetWriteDeadline(time.Now().Add(-time.Second))
	if n, err := sock.Write([]byte("answer")); n != 6 || err != nil {
		t.Fatalf("Write past the deadline with room in the buffer: %d, %v", n, err)
	}
	// Past the buffer, the rest waits under the deadline, and times out.
	big := make([]byte, 64<<20)
	_ = sock.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := sock.Write(big)
	if !isTimeout(err) || n == 0 || n == len(big) {
		t.Fatalf("Write to a peer that does not read: %d bytes, %v; want part of it and a timeout", n, err)
	}
	// Closing waits for nobody.
	sock.closing.Store(true)
	start := time.Now()
	if _, err := sock.Write(big); err == nil || time.Since(start) > time.Second {
		t.Fatalf("Write after close: %v after %v", err, time.Since(start))
	}
}
