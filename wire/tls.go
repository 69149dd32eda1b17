package wire

import (
	"crypto/tls"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Both protocols run unchanged inside TLS when Server.TLSConfig is set;
// this file is what the socket under them needs to keep behaving.
//
//   - The handshake runs in the connection's own goroutine (never in the
//     accept loop) under RequestTimeout, read and write, so a client that
//     connects and never finishes it holds its slot no longer than one
//     that never sends its frame. The connection was counted (both
//     connection limits) when it was accepted, before the handshake.
//   - Keepalive is set at accept: the code that sets it for waiters and
//     sessions looks for a *net.TCPConn, which a TLS connection is not, and
//     beside a handshake four setsockopt calls cost nothing.
//   - crypto/tls makes a write that timed out fatal to the connection (a
//     record half sent cannot be taken back). So the socket under TLS
//     first offers every record to the kernel without a deadline, as the
//     session writer does on a plain socket; only what the send buffer
//     did not take waits under the deadline. A session peer whose buffer
//     is full when a grant is handed over is then dropped rather than
//     served later (its session can resume; the grant is handed on).
//   - Closing sends close_notify only if the send buffer takes it at once:
//     crypto/tls would otherwise wait up to 5 s for a peer that does not
//     read, under the locks of whoever closes.
//
// A hang-up still ends a v1 wait: the client's close_notify, or its FIN,
// reads as the end of the stream.

// tlsConn is a server-side TLS connection over a tlsSocket.
type tlsConn struct {
	*tls.Conn
	sock *tlsSocket
}

// Close sends close_notify if it leaves at once, and closes the socket.
func (c *tlsConn) Close() error {
	c.sock.closing.Store(true)
	return c.Conn.Close()
}

// tlsSocket is the TCP connection under a tlsConn. Its writes come from
// crypto/tls, one at a time (under the tls.Conn's output lock), so raw
// needs no lock of its own.
type tlsSocket struct {
	net.Conn
	raw *rawWriter // nil when the connection has no socket (tests)
	// writeDeadline is the deadline crypto/tls set, in Unix nanoseconds (0:
	// none); it is applied to the socket only for what the kernel did not
	// take at once.
	writeDeadline atomic.Int64
	closing       atomic.Bool // Close was called: nothing waits any more
}

func (s *tlsSocket) SetWriteDeadline(t time.Time) error {
	var ns int64
	if !t.IsZero() {
		ns = t.UnixNano()
	}
	s.writeDeadline.Store(ns)
	return nil
}

func (s *tlsSocket) SetDeadline(t time.Time) error {
	_ = s.SetWriteDeadline(t)
	return s.Conn.SetReadDeadline(t)
}

func (s *tlsSocket) Write(b []byte) (int, error) {
	n := 0
	if s.raw != nil {
		var err error
		if n, err = s.raw.writeNow(b); err != nil || n == len(b) {
			return n, err
		}
	}
	if s.closing.Load() {
		return n, os.ErrDeadlineExceeded // a close waits for nobody
	}
	var d time.Time
	if ns := s.writeDeadline.Load(); ns != 0 {
		d = time.Unix(0, ns)
	}
	_ = s.Conn.SetWriteDeadline(d)
	m, err := s.Conn.Write(b[n:])
	_ = s.Conn.SetWriteDeadline(time.Time{})
	return n + m, err
}

// wrapTLS makes an accepted connection a server-side TLS one; the
// handshake is left to handshake, in the connection's goroutine.
func (s *Server) wrapTLS(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetKeepAliveConfig(sessionKeepAlive); err != nil {
			s.Logger.Warn("keepalive not set on a TLS connection", "peer", c.RemoteAddr().String(), "err", err)
		}
	}
	sock := &tlsSocket{Conn: c, raw: rawConn(c)}
	return &tlsConn{Conn: tls.Server(sock, s.TLSConfig), sock: sock}
}

// handshake runs a TLS connection's handshake under RequestTimeout and
// reports whether it succeeded; failures are logged at most once a second.
func (s *Server) handshake(c net.Conn) bool {
	tc, ok := c.(*tlsConn)
	if !ok {
		return true
	}
	_ = tc.SetDeadline(time.Now().Add(s.RequestTimeout))
	err := tc.Handshake()
	_ = tc.SetDeadline(time.Time{})
	if err != nil {
		if !s.closing.Load() {
			if ok, held := s.handshakeLog.allow(time.Now()); ok {
				s.Logger.Info("tls handshake failed", "peer", c.RemoteAddr().String(), "err", err, "held_back", held)
			}
		}
		return false
	}
	return true
}
