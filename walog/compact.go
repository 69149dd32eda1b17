package walog

// Compaction: a snapshot of the live holders written beside the log,
// fsynced and renamed over it.

import (
	"errors"
	"fmt"
	"os"

	"github.com/locking-center/locking-center/locker"
)

// DefaultCompactFloor is the size under which the log is never compacted,
// so that a log with few live holders is not rewritten on every unlock. It
// keeps such a log well under the 256 KiB bound walog/README.md states.
const DefaultCompactFloor = 64 << 10

type compactResult struct {
	f    File
	size int64
	err  error
}

// snapshot encodes the live set: a header, the token mark, every grant.
func (l *Log) snapshot() []byte {
	ops := make([]op, 0, l.state.Len()+1)
	ops = append(ops, op{typ: typeMark, token: l.state.HighToken()})
	l.state.Each(func(k string, g locker.Grant) bool {
		ops = append(ops, grantOp(k, holderOf(g)))
		return true
	})
	snap := make([]byte, 0, headerSize+frameSize+9+l.liveBytes+int64(frameSize*(1+len(ops)*maxOp/maxPayload)))
	snap, _ = appendRecords(appendHeader(snap), ops)
	return snap
}

// maybeCompact starts a compaction when the log has grown to twice its
// live records and past the floor.
func (l *Log) maybeCompact() {
	if l.compacting || l.Err() != nil {
		return
	}
	size := l.size.Load()
	if size < l.floor || size < 2*(headerSize+l.liveBytes) || size < l.retryAt {
		return
	}
	// The snapshot is encoded here, between batches, so it is exactly
	// the state the file holds; records that come later go to the tail.
	// Its mark keeps the highest token even when its grant is gone.
	snap := l.snapshot()
	l.compacting = true
	l.tail = l.tail[:0]
	go func() { // ended before the writer ends: run and shutdown wait for it
		f, err := writeTemp(l.fs, l.tmp, snap)
		l.compacted <- compactResult{f: f, size: int64(len(snap)), err: err}
	}()
}

// finishCompaction appends the tail to the compacted file and renames it
// over the log. Lockers wait meanwhile: this is the only stall.
func (l *Log) finishCompaction(res compactResult) {
	l.compacting = false
	tail := l.tail
	l.tail = nil
	if res.err == nil && l.Err() != nil {
		l.discard(res.f)
		return
	}
	var moved bool
	err := res.err
	if err == nil {
		moved, res.f, err = commitTemp(l.fs, res.f, l.tmp, l.path, l.dir, tail)
	}
	if err != nil && !moved {
		// The old log is untouched and still whole: keep using it, and
		// try again once it has grown by another floor's worth. The line
		// names the file that failed (the temporary file, or the folder),
		// not the log, which nothing happened to.
		l.retryAt = l.size.Load() + l.floor
		l.logger.Warn("walog: compaction failed; the log is untouched and stays in use",
			"file", failedFile(err, l.tmp), "log", l.path, "err", err)
		l.errs.Add(1) // after the line: whoever sees the count can read it
		return
	}
	old := l.f
	l.f = res.f
	if cerr := old.Close(); cerr != nil {
		l.logger.Warn("walog: closing the log before compaction", "file", l.path, "err", cerr)
	}
	if err != nil {
		// Renamed but the folder fsync failed: after a crash the name may
		// point at either file, and only the new one will have the next
		// records. Nothing more can be promised durable.
		l.fail(fmt.Errorf("compaction: %w", err))
		return
	}
	l.size.Store(res.size + int64(len(tail)))
	l.compactions.Add(1)
	l.logger.Debug("walog: compacted", "file", l.path, "bytes", l.size.Load(), "held_keys", l.state.Len())
}

// discard closes and removes the temporary file of a compaction that will
// not be committed. Failing to is harmless (the next start removes it) but
// logged.
func (l *Log) discard(f File) {
	if err := errors.Join(f.Close(), l.fs.Remove(l.tmp)); err != nil {
		l.logger.Warn("walog: discarding an unfinished compaction", "file", l.tmp, "err", err)
	}
}

// failedFile returns the file an error of a rewrite is about: the path of
// the first *os.PathError or *os.LinkError in it, else def.
func failedFile(err error, def string) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Path
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Old
	}
	return def
}
