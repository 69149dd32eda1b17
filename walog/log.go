package walog

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// Errors returned by Commit. Compare with errors.Is.
var (
	// ErrFailed is wrapped by every refusal after a write or fsync of the
	// log failed. The log stays refused until the process restarts: after a
	// failed fsync the kernel may have dropped the dirty pages and cleared
	// the error, so a retry that succeeds proves nothing (the 2018
	// "fsyncgate" finding). Restarting replays what really is on disk.
	ErrFailed = errors.New("walog: log failed, refusing records until restart")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("walog: log closed")
)

// Options configures a Log. The zero value is usable.
type Options struct {
	// OnFsync, if set, is called from the writer goroutine after every
	// fsync of the log with its duration. It must be fast.
	OnFsync func(time.Duration)
	// Logger receives the torn-tail, compaction and failure lines
	// (default slog.Default).
	Logger *slog.Logger
	// FS is the file system (default OSFS); tests inject faults with it.
	FS FS
	// CompactFloor is the size under which the log is never compacted
	// (default DefaultCompactFloor). Above it, the log is compacted once it
	// is twice the size of its live records.
	CompactFloor int64
}

// Stats are the log's counters, for metrics.
type Stats struct {
	// SizeBytes is the size of the log file.
	SizeBytes int64
	// Compactions counts completed compactions.
	Compactions uint64
	// Errors counts failed operations on the files: writes, fsyncs,
	// renames, failed compactions. Records refused afterwards because the
	// log has failed are not counted again.
	Errors uint64
	// Fsyncs counts fsyncs of the log for appended records (one per batch).
	Fsyncs uint64
	// Records counts records made durable.
	Records uint64
}

// Log is an open write-ahead log. Its methods are safe for concurrent use.
type Log struct {
	path, tmp, dir string
	fs             FS
	logger         *slog.Logger
	onFsync        func(time.Duration)
	floor          int64

	// mu guards closed, and the sending on queue: Close takes it for
	// writing before it closes queue, so nobody sends on a closed channel.
	mu     sync.RWMutex
	closed bool
	queue  chan *request

	done   chan struct{} // closed when the writer goroutine has ended
	failed atomic.Pointer[error]

	size        atomic.Int64
	compactions atomic.Uint64
	errs        atomic.Uint64
	fsyncs      atomic.Uint64
	records     atomic.Uint64
	highToken   atomic.Uint64 // the state's highest token, for readers outside the writer
	// lone is set while the previous batch held one record: a lone locker,
	// whose next record may be written by its own goroutine (see submit).
	lone atomic.Bool
	// direct allows that (tests of the writer goroutine's path turn it off
	// right after Open).
	direct bool
	// directBatches counts batches written by a lone locker's own
	// goroutine (for tests).
	directBatches atomic.Uint64

	// writing is held by whoever writes a batch, and guards every field
	// after it: the writer goroutine, or the goroutine of a lone locker
	// that finds the log idle and writes its own record (see submit).
	// Open owns them before the writer starts.
	writing sync.Mutex
	f       File
	lock    *os.File // the lock file, flocked while the log is open
	// state is what the records say is held: replay builds it, every
	// durable batch is applied to it, compaction writes it out.
	state      *locker.State
	liveBytes  int64 // encoded size of the live grant operations
	compacting bool
	compacted  chan compactResult // the compactor's answer; capacity 1
	tail       []byte             // records written since the snapshot
	retryAt    int64              // after a failed compaction, wait for this size
	lastSync   time.Duration      // the previous batch's fsync
	closeErr   error
	prev       int    // records in the previous batch
	buf        []byte // the bytes of the batch being written, reused
}

// Err returns the error that failed the log (wrapping ErrFailed), or nil
// while the log is healthy.
func (l *Log) Err() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns the log's counters.
func (l *Log) Stats() Stats {
	return Stats{
		SizeBytes:   l.size.Load(),
		Compactions: l.compactions.Load(),
		Errors:      l.errs.Load(),
		Fsyncs:      l.fsyncs.Load(),
		Records:     l.records.Load(),
	}
}
