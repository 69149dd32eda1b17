//go:build !unix

package wire

import "syscall"

// writeNow takes nothing where a socket cannot be written without waiting
// through the standard library: every write is deadline-bound.
func writeNow(syscall.RawConn, []byte) (int, error) { return 0, nil }
