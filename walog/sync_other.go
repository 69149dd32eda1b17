//go:build !linux

package walog

import "os"

// syncFile makes f's data durable with fsync.
func syncFile(f *os.File) error { return f.Sync() }

// syncAppend is syncFile: the Linux build's cheaper path for the writer's
// batches has no counterpart here.
func syncAppend(f *os.File) error { return f.Sync() }
