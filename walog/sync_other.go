//go:build !linux

package walog

import "os"

// syncFile makes f's data durable with fsync.
func syncFile(f *os.File) error { return f.Sync() }
