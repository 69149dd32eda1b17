//go:build unix

package wire

import (
	"os"
	"syscall"
)

// rawWriter writes to a socket without waiting and without a deadline
// (see sessionConn.write). It is not safe for concurrent use: a session
// connection has one writer at a time.
type rawWriter struct {
	rc syscall.RawConn
	// fn is w.write, bound once: a closure made per call would cost an
	// allocation per write.
	fn  func(fd uintptr) bool
	b   []byte
	n   int
	err error
}

func newRawWriter(rc syscall.RawConn) *rawWriter {
	w := &rawWriter{rc: rc}
	w.fn = w.write
	return w
}

// writeNow writes as much of b as the socket's send buffer takes at once.
// It returns how many bytes the kernel took, and the error of a socket
// that failed; a full buffer is not an error.
func (w *rawWriter) writeNow(b []byte) (int, error) {
	w.b, w.n, w.err = b, 0, nil
	// rc.Write's own error (a deadline already past, the socket closed)
	// is not kept: the caller writes what is left with the standard
	// library, which meets the same condition and reports it.
	_ = w.rc.Write(w.fn)
	n, err := w.n, w.err
	w.b, w.err = nil, nil
	return n, err
}

func (w *rawWriter) write(fd uintptr) bool {
	for w.n < len(w.b) {
		m, err := syscall.Write(int(fd), w.b[w.n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			if err != syscall.EAGAIN {
				w.err = os.NewSyscallError("write", err)
			}
			return true
		}
		if m <= 0 {
			return true
		}
		w.n += m
	}
	return true // never wait here: the caller waits, under a deadline
}
