package cluster

import (
	"errors"
	"io"
	"net"
	"os"
	"time"
)

// maxHeldBytes bounds what is read from a connection held for want of a
// leader: a v1 frame or a session open is far smaller; past it the client
// is left to TCP's flow control.
const maxHeldBytes = 4096

// holdWatch reads a connection while it waits: held for want of a leader,
// or while the leader is dialled (seconds on a bad link). A client that
// hangs up meanwhile is seen, and its connection is then dropped, not
// handed on. A v1 client that gave up and hung up is withdrawn (SPEC §1)
// and may settle what it asked with a reset (SPEC §8.5); the request it
// sent before it left must not be carried out after that. What the client
// sent is kept and read first by whoever takes the connection.
type holdWatch struct {
	c    net.Conn
	buf  []byte        // what the client sent; the reader's until done is closed
	eof  bool          // gone by closing its side, not by a reset or failure; the reader's until done is closed
	gone chan struct{} // closed by the reader when the client closed its side, reset or the connection failed
	done chan struct{} // closed when the reader has ended
}

// watchHeld starts reading c. The reader ends at release (or when c
// fails or ends); whoever starts a watch releases it.
func watchHeld(c net.Conn) *holdWatch {
	w := &holdWatch{c: c, gone: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		b := make([]byte, 512)
		for len(w.buf) < maxHeldBytes {
			n, err := c.Read(b)
			w.buf = append(w.buf, b[:n]...)
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					w.eof = errors.Is(err, io.EOF)
					close(w.gone)
				}
				return
			}
		}
	}()
	return w
}

// release stops the reader and returns the connection to hand on (what
// was read from it comes first), or nil when the client left: c is then
// closed. The client left when its connection was reset or failed, and,
// if eofLeaves, when it closed its side: held for a leader that is a
// hang-up; on a connection about to be forwarded it is the half-close of
// a client that sent its request and waits for the answer, passed on.
func (w *holdWatch) release(eofLeaves bool) net.Conn {
	_ = w.c.SetReadDeadline(time.Now())
	<-w.done
	_ = w.c.SetReadDeadline(time.Time{})
	select {
	case <-w.gone:
		if !w.eof || eofLeaves {
			w.c.Close()
			return nil
		}
	default:
	}
	if len(w.buf) == 0 {
		return w.c
	}
	return &heldConn{Conn: w.c, buf: w.buf}
}

// heldConn is a connection whose first bytes were read while it was held.
type heldConn struct {
	net.Conn
	buf []byte
}

// Read returns the bytes read while held first.
func (h *heldConn) Read(p []byte) (int, error) {
	if len(h.buf) > 0 {
		n := copy(p, h.buf)
		h.buf = h.buf[n:]
		return n, nil
	}
	return h.Conn.Read(p)
}

// WriteTo and ReadFrom send the held bytes first and leave the rest to the
// connection's own io.Copy paths (splice(2) between TCP sockets): every
// forwarded connection goes through a watch while the leader is dialled.
func (h *heldConn) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(h.buf)
	h.buf = nil
	if err != nil {
		return int64(n), err
	}
	m, err := io.Copy(w, h.Conn)
	return int64(n) + m, err
}

// ReadFrom writes what r gives to the connection.
func (h *heldConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(h.Conn, r) }
