//go:build unix

package wire

import (
	"os"
	"syscall"
)

// writeNow writes as much of b as the socket's send buffer takes at once,
// without waiting and without a deadline (see sessionConn.write). It
// returns how many bytes the kernel took, and the error of a socket that
// failed; a full buffer is not an error.
func writeNow(rc syscall.RawConn, b []byte) (int, error) {
	n := 0
	var werr error
	// rc.Write's own error (a deadline already past, the socket closed)
	// is not kept: the caller writes what is left with the standard
	// library, which meets the same condition and reports it.
	_ = rc.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := syscall.Write(int(fd), b[n:])
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				if err != syscall.EAGAIN {
					werr = os.NewSyscallError("write", err)
				}
				return true
			}
			if m <= 0 {
				return true
			}
			n += m
		}
		return true // never wait here: the caller waits, under a deadline
	})
	return n, werr
}
