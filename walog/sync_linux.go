package walog

import (
	"os"
	"runtime"
	"syscall"
)

// syncFile makes f's data durable with fdatasync(2): it flushes the data
// and the metadata needed to read it back (the size of an appended file),
// but not the modification time, which saves a journal commit per batch on
// ext4 and XFS. etcd's WAL does the same on Linux.
func syncFile(f *os.File) error {
	return fdatasync(f, syscall.Syscall)
}

// syncAppend is syncFile for the writer's batches, the one fsync on the
// lock path. It makes the same call without telling the Go scheduler that
// the thread is about to block, so the writer keeps its processor (P) for
// the fsync.
//
// Why: told of a blocking call, the runtime's monitor takes the P away once
// the call has lasted 20 µs and hands it to another thread (a wake-up),
// the writer's thread comes back without a P and sleeps (another switch),
// and with a P taken at every batch the monitor keeps polling at its
// fastest rate. Under load that is most of what the log costs the server
// beyond the fsync itself: over TCP with 64 lockers here, keeping the P
// cut nanosleep calls by 40 %, futex calls by a third and the server's CPU
// per acquire by 4–9 µs (see the README's Performance section).
//
// The price: while the fsync runs, the process has one P fewer, and a
// stop-the-world phase of the garbage collector waits for the fsync to
// end. So it is used only with two or more Ps, for small batches, and
// while fsyncs are quick (see smallAppend and quickSync). If the disk
// stops answering in the middle of one, the whole process stops at its
// next collection instead of only its lock path (which could grant
// nothing either).
func syncAppend(f *os.File) error {
	if runtime.GOMAXPROCS(0) < 2 {
		return syncFile(f) // the only P must stay free for the connections
	}
	return fdatasync(f, syscall.RawSyscall)
}

// fdatasync calls fdatasync(2) on f through call (syscall.Syscall or
// syscall.RawSyscall), holding f's descriptor so a concurrent Close cannot
// hand its number to another file meanwhile.
func fdatasync(f *os.File, call func(trap, a1, a2, a3 uintptr) (r1, r2 uintptr, err syscall.Errno)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		for {
			if _, _, errno = call(syscall.SYS_FDATASYNC, fd, 0, 0); errno != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	if errno != 0 {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: errno}
	}
	return nil
}
