package walog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// Errors returned by Acquire and Release. Compare with errors.Is.
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

// DefaultCompactFloor is the size under which the log is never compacted,
// so that a log with few live holders is not rewritten on every unlock. It
// keeps such a log well under the 256 KiB bound walog/README.md states.
const DefaultCompactFloor = 64 << 10

// maxBatch bounds the records of one write, so one batch cannot hold an
// unbounded buffer; at the queue's depth it is never reached in practice.
const maxBatch = 4096

// lingerFor bounds how long a batch waits for more records (see gather):
// about one fsync here, so at worst it doubles a waiter's wait, and only
// when several lockers are writing at once.
const lingerFor = 250 * time.Microsecond

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
	highToken   atomic.Uint64 // high, for readers outside the writer
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
	writing    sync.Mutex
	f          File
	lock       *os.File // the lock file, flocked while the log is open
	live       map[string]Holder
	liveBytes  int64  // encoded size of the live grant operations
	high       uint64 // the highest token in the log (grants and marks)
	compacting bool
	compacted  chan compactResult // the compactor's answer; capacity 1
	tail       []byte             // records written since the snapshot
	retryAt    int64              // after a failed compaction, wait for this size
	lastSync   time.Duration      // the previous batch's fsync
	closeErr   error
	prev       int    // records in the previous batch
	buf        []byte // the bytes of the batch being written, reused
}

type request struct {
	rec     []byte // encoded records
	records int    // how many records rec holds
	ops     []op
	done    chan error // its outcome, when the writer goroutine writes it (nil for a lone locker writing its own)
}

type compactResult struct {
	f    File
	size int64
	err  error
}

// Open opens the log at path, creating it if needed, replays it, calls
// restore for every live holder, and starts the writer. A stray temporary
// file from an interrupted compaction is removed first. If the log is
// corrupt the error wraps ErrCorrupt and names the file and byte offset; an
// error from restore stops the open and is returned.
//
// restore may change h.Token: a holder from a version 1 log comes with
// token 0, and the caller gives it one; the log is then rewritten in the
// current version with those tokens before Open returns.
//
// The file path+".lock" is locked (flock) while the log is open: a second
// process opening the same log fails with ErrInUse.
func Open(path string, opts Options, restore func(key string, h *Holder) error) (*Log, error) {
	l := &Log{
		path:      path,
		tmp:       path + ".tmp",
		dir:       filepath.Dir(path),
		fs:        opts.FS,
		logger:    opts.Logger,
		onFsync:   opts.OnFsync,
		floor:     opts.CompactFloor,
		queue:     make(chan *request, maxBatch),
		done:      make(chan struct{}),
		live:      make(map[string]Holder),
		compacted: make(chan compactResult, 1),
		direct:    true,
	}
	l.lone.Store(true)
	if l.fs == nil {
		l.fs = OSFS{}
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	if l.onFsync == nil {
		l.onFsync = func(time.Duration) {}
	}
	if failpointsOn && failpointFloor() > 0 {
		l.floor = failpointFloor()
	}
	if l.floor <= 0 {
		l.floor = DefaultCompactFloor
	}

	// A folder given for the log (as etcd and PostgreSQL take a data
	// folder) is refused before the lock file is made beside it, and a
	// missing folder is named as such rather than through the lock file.
	// The folder is not made here: a mistyped path would then start with
	// an empty table instead of the log it meant.
	if fi, err := os.Stat(path); strings.HasSuffix(path, string(filepath.Separator)) || err == nil && fi.IsDir() {
		return nil, fmt.Errorf("walog: %s is a folder; the log is a file, for instance %s", path, filepath.Join(path, "locks.wal"))
	}
	if fi, err := os.Stat(l.dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("walog: the log's folder %s does not exist; make it first", l.dir)
	} else if err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("walog: the log's folder %s is not a folder", l.dir)
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, err
	}
	l.lock = lock
	ok := false
	defer func() {
		if !ok {
			unlockFile(lock)
		}
	}()

	// Look before removing: on a read-only file system unlink fails with
	// EROFS even for a name that does not exist, and the start would then
	// report a temporary file that is not there instead of the log.
	if _, err := l.fs.Lstat(l.tmp); err == nil {
		if err := l.fs.Remove(l.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("walog: remove the temporary file of an interrupted compaction: %w", err)
		}
		l.logger.Warn("walog: removed the temporary file of an interrupted compaction", "file", l.tmp)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("walog: look for a stray temporary file: %w", err)
	}

	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	fresh := errors.Is(err, fs.ErrNotExist)
	if fresh {
		// A new log is made whole in a temporary file and renamed into
		// place, so a log that exists always has its header.
		var tf File
		if tf, err = writeTemp(l.fs, l.tmp, appendHeader(nil)); err == nil {
			var moved bool
			if moved, tf, err = commitTemp(l.fs, tf, l.tmp, path, l.dir, nil); err != nil {
				if moved {
					tf.Close()
				}
			} else {
				f = tf
			}
		}
		if err != nil {
			return nil, fmt.Errorf("walog: create %s: %w", path, err)
		}
		l.logger.Info("walog: created a new log", "file", path)
	} else if err != nil {
		return nil, fmt.Errorf("walog: open: %w", err)
	}
	l.f = f
	size := int64(headerSize)
	version := uint32(version2)
	if !fresh { // a fresh file's offset is past its header: nothing to read
		if size, version, err = l.replay(); err != nil {
			l.f.Close()
			return nil, err
		}
	}
	if failpointsOn && sabotaged("forget-holds") {
		clear(l.live) // a planted bug for the crash test to find
	}
	l.size.Store(size)
	retokened := false
	for k, h := range l.live {
		token := h.Token
		if err := restore(k, &h); err != nil {
			l.f.Close()
			return nil, fmt.Errorf("walog: restore %q from %s: %w", k, path, err)
		}
		retokened = retokened || h.Token != token
		l.live[k] = h
		l.high = max(l.high, h.Token)
	}
	l.highToken.Store(l.high)
	// A hold whose token the caller changed must be on disk under its new
	// token before anything is appended: a later release names the grant
	// by that token, and a replay would not match it to the old one.
	if version != version2 || retokened {
		if err := l.upgrade(); err != nil {
			l.f.Close()
			return nil, err
		}
		l.logger.Info("walog: rewrote the log in version 2 with the tokens of its holds",
			"file", path, "from_version", version, "held_keys", len(l.live))
	}
	l.logger.Debug("walog: replayed", "file", path, "bytes", size, "held_keys", len(l.live))
	ok = true
	go l.run()
	return l, nil
}

// upgrade rewrites the live set into a new file of the current version, as
// a compaction does, before anything is appended.
func (l *Log) upgrade() error {
	snap := l.snapshot()
	f, err := writeTemp(l.fs, l.tmp, snap)
	if err != nil {
		return fmt.Errorf("walog: rewrite %s in version %d: %w", l.path, version2, err)
	}
	moved, f, err := commitTemp(l.fs, f, l.tmp, l.path, l.dir, nil)
	if err != nil {
		if moved {
			f.Close()
		}
		return fmt.Errorf("walog: rewrite %s in version %d: %w", l.path, version2, err)
	}
	l.f.Close()
	l.f = f
	l.size.Store(int64(len(snap)))
	return nil
}

// snapshot encodes the live set: a header, the token mark, every grant.
func (l *Log) snapshot() []byte {
	ops := make([]op, 0, len(l.live)+1)
	ops = append(ops, op{typ: typeMark, token: l.high})
	for k, h := range l.live {
		ops = append(ops, grantOp(k, h))
	}
	snap := make([]byte, 0, headerSize+frameSize+9+l.liveBytes+int64(frameSize*(1+len(ops)*maxOp/maxPayload)))
	snap, _ = appendRecords(appendHeader(snap), ops)
	return snap
}

// HighToken returns the highest fencing token the log holds a record of:
// every token handed out before (and recorded) is at most this.
func (l *Log) HighToken() uint64 {
	return l.highToken.Load()
}

// replay reads the whole file into l.live, cuts a torn tail, and returns
// the size of the file afterwards and its format version.
func (l *Log) replay() (int64, uint32, error) {
	fi, err := l.f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("walog: stat: %w", err)
	}
	fileSize := fi.Size()
	// Size the live set for a log that compaction keeps near twice its
	// live records (about 80 bytes each): growing a map of a million keys
	// step by step costs more than reading the file.
	l.live = make(map[string]Holder, min(fileSize/160, 1<<24))
	if fileSize == 0 {
		// An empty file (made by the operator, say) is a new log.
		if err := writeSync(l.f, appendHeader(nil), l.path); err != nil {
			return 0, 0, fmt.Errorf("walog: initialise: %w", err)
		}
		return headerSize, version2, nil
	}
	corrupt := func(off int64, reason string) error {
		return &CorruptError{Path: l.path, Offset: off, Reason: reason}
	}
	r := bufio.NewReaderSize(l.f, 1<<20)
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, corrupt(0, fmt.Sprintf("file of %d bytes is shorter than the %d-byte header", fileSize, headerSize))
		}
		return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
	}
	version, reason := checkHeader(hdr[:])
	if reason != "" {
		return 0, 0, corrupt(0, reason)
	}
	fsize, limit := frameSize, maxPayload
	if version == version1 {
		fsize, limit = frameSizeV1, maxPayloadV1
	}

	off := int64(headerSize)
	frame := make([]byte, fsize)
	var payload []byte
	torn := ""
	for {
		n, err := io.ReadFull(r, frame)
		if err == io.EOF {
			break
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// Fewer than a frame's bytes cannot be checked at all: the
			// write that would have completed them never happened.
			torn = fmt.Sprintf("file ends %d bytes into a record's frame", n)
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
		}
		var length, check uint64
		if version == version1 {
			length = uint64(binary.BigEndian.Uint16(frame[4:]))
			check = uint64(^binary.BigEndian.Uint16(frame[6:]))
		} else {
			length = uint64(binary.BigEndian.Uint32(frame[4:]))
			check = uint64(^binary.BigEndian.Uint32(frame[8:]))
		}
		if check != length {
			// A frame that is zeros from its start, or from a sector
			// boundary inside it, to the end of the file is the start of
			// a write whose later sectors never reached the disk (or
			// zeroed space the file was extended by).
			if frameCut(off, frame) {
				zero, err := restIsZero(r)
				if err != nil {
					return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
				}
				if zero {
					torn = "zeroed space after the last record"
					if !allZero(frame) {
						torn = "the last record's frame is zeros from a sector boundary on"
					}
					break
				}
			}
			return 0, 0, corrupt(off, "record length fails its check")
		}
		if length == 0 || length > uint64(limit) {
			return 0, 0, corrupt(off, fmt.Sprintf("record length %d out of range", length))
		}
		if off+int64(fsize)+int64(length) > fileSize {
			// Checked before allocating: the length is intact (its copy
			// agrees) and points past the end, so the write was torn.
			torn = "file ends inside a record"
			break
		}
		if uint64(cap(payload)) < length {
			payload = make([]byte, length)
		}
		p := payload[:length]
		if _, err := io.ReadFull(r, p); err != nil {
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				torn = "file ends inside a record"
				break
			}
			return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
		}
		crc := crc32.Update(crc32.Checksum(frame[4:], castagnoli), castagnoli, p)
		if crc != binary.BigEndian.Uint32(frame[:4]) {
			// The last record of the file, with a whole sector of it
			// zeros: a write that the power loss cut short, whose
			// sectors reached the disk in part. Anything else is damage
			// to data that was fsynced, and stops the start.
			if zeroSector(off, frame, p) {
				zero, err := restIsZero(r)
				if err != nil {
					return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
				}
				if zero {
					torn = "the last record fails its checksum and has a sector of zeros (a write cut short)"
					break
				}
			}
			return 0, 0, corrupt(off, "checksum mismatch")
		}
		if reason := decodePayload(version, p, l.apply); reason != "" {
			return 0, 0, corrupt(off, reason)
		}
		off += int64(fsize) + int64(length)
	}
	if torn != "" {
		l.logger.Warn("walog: cut a torn final record; the start goes on",
			"file", l.path, "offset", off, "bytes_dropped", fileSize-off, "reason", torn)
		if err := l.f.Truncate(off); err != nil {
			return 0, 0, fmt.Errorf("walog: cut torn tail of %s at %d: %w", l.path, off, err)
		}
		if err := l.f.Sync(); err != nil {
			return 0, 0, fmt.Errorf("walog: fsync %s after cutting its tail: %w", l.path, err)
		}
	}
	return off, version, nil
}

// sectorSize is the unit a disk writes whole or not at all: the smallest
// in use, so that every real sector boundary is one of these.
const sectorSize = 512

// frameCut reports whether frame, read at file offset off, is zeros from
// its start or from a sector boundary inside it to its end.
func frameCut(off int64, frame []byte) bool {
	for i := range frame {
		if (i == 0 || (off+int64(i))%sectorSize == 0) && allZero(frame[i:]) {
			return true
		}
	}
	return false
}

// zeroSector reports whether the record at file offset off, made of the
// bytes of parts in order, has a piece that is all zeros where the pieces
// are the record cut at every sector boundary (as etcd's WAL decides a
// torn entry): a sector of the write that never reached the disk.
func zeroSector(off int64, parts ...[]byte) bool {
	zero, empty := true, true
	pos := off
	for _, part := range parts {
		for _, c := range part {
			if pos%sectorSize == 0 && pos != off {
				if zero && !empty {
					return true
				}
				zero, empty = true, true
			}
			zero = zero && c == 0
			empty = false
			pos++
		}
	}
	return zero && !empty
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func restIsZero(r *bufio.Reader) (bool, error) {
	for {
		c, err := r.ReadByte()
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if c != 0 {
			return false, nil
		}
	}
}

// apply updates the live set with a durable operation.
func (l *Log) apply(o op) string {
	if reason := l.contradiction(o); reason != "" {
		return reason
	}
	switch o.typ {
	case typeAcquireV1, typeGrant, typeGrantOrigin:
		if old, had := l.live[o.key]; had {
			l.liveBytes -= int64(grantSize(o.key, old))
		}
		l.live[o.key] = o.h
		l.liveBytes += int64(grantSize(o.key, o.h))
	case typeReleaseV1, typeRelease:
		old, had := l.live[o.key]
		if had && (o.token == 0 || o.token == old.Token) {
			l.liveBytes -= int64(grantSize(o.key, old))
			delete(l.live, o.key)
		}
	}
	if o.token > l.high {
		l.high = o.token
		l.highToken.Store(o.token)
	}
	return ""
}

// MaxToken bounds the fencing tokens a log may hold: a log with a token
// of 2^63 or more is refused, so that tokens never wrap (and stay
// positive where a client keeps them in a signed integer).
const MaxToken = 1<<63 - 1

// contradiction says what is wrong with a version 2 operation that cannot
// follow the ones applied before it: a log the engine wrote never holds
// one, so it is damage or a bug, refused like a bad checksum rather than
// replayed into a table that would break its promises (two grants of one
// key, a token that wraps, a TTL no session can have).
func (l *Log) contradiction(o op) string {
	if o.token > MaxToken {
		return fmt.Sprintf("token %d is 2^63 or more: tokens would wrap", o.token)
	}
	switch o.typ {
	case typeGrant, typeGrantOrigin:
		if old, had := l.live[o.key]; had && old.Token != o.token {
			return fmt.Sprintf("grant of key %q under token %d while it is held under token %d, with no release between", o.key, o.token, old.Token)
		}
		if o.h.Session != 0 && (o.h.TTL < time.Second || o.h.TTL > 10*time.Minute) {
			return fmt.Sprintf("grant of key %q to a session with a TTL of %v, outside 1s … 10m", o.key, o.h.TTL)
		}
	case typeRelease:
		old, had := l.live[o.key]
		if !had {
			return fmt.Sprintf("release of key %q under token %d, which is not held", o.key, o.token)
		}
		if o.token != 0 && o.token != old.Token {
			return fmt.Sprintf("release of key %q under token %d, while its current grant is token %d", o.key, o.token, old.Token)
		}
	}
	return ""
}

// Commit records a batch of the engine's changes as one record (see the
// format) and returns once it is durable. It is the log's side of
// locker.Journal.
func (l *Log) Commit(batch []locker.Change) error {
	ops := make([]op, len(batch))
	size := 0
	for i, c := range batch {
		if err := checkField("key", c.Key); err != nil {
			return err
		}
		if c.Grant {
			if err := checkField("source", c.Holder.Source); err != nil {
				return err
			}
			if err := checkField("remote address", c.Holder.Remote); err != nil {
				return err
			}
			h := Holder{Source: c.Holder.Source, Remote: c.Holder.Remote, Since: c.Since,
				Token: c.Token, Session: uint64(c.Holder.Session), TTL: c.TTL}
			if h.Session != 0 {
				h.Action, h.ID = c.Holder.Origin.Action, c.Holder.Origin.ID
			}
			ops[i] = grantOp(c.Key, h)
			size += grantSize(c.Key, h)
		} else {
			ops[i] = op{typ: typeRelease, key: c.Key, token: c.Token}
			size += 1 + 8 + 2 + len(c.Key)
		}
	}
	if failpointsOn && sabotaged("drop-releases") {
		ops = dropReleases(ops) // a planted bug for the crash test to find
	}
	rec, n := appendRecords(make([]byte, 0, frameSize+size), ops)
	return l.submit(&request{rec: rec, records: n, ops: ops})
}

func (l *Log) submit(r *request) error {
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	// A lone locker (the previous batch held one record) that finds the
	// log idle writes its record itself, with whatever else is queued by
	// then: handing it to the writer goroutine and being woken with the
	// answer are two wake-ups of another thread, about a sixth of a durable
	// Lock+Unlock here (see the README's Performance section). Under
	// concurrency the writer goroutine batches as before. l.mu stays held
	// for reading, so Close waits for this batch; the queue cannot close
	// meanwhile, so drain never reports it closed here. The caller's own
	// outcome is returned, not sent to it through a channel.
	if l.direct && l.lone.Load() && len(l.queue) == 0 && l.writing.TryLock() {
		batch := []*request{r}
		l.drain(&batch)
		l.directBatches.Add(1)
		err := l.commit(batch)
		l.maybeCompact()
		l.writing.Unlock()
		l.mu.RUnlock()
		answer(batch[1:], err)
		return err
	}
	r.done = make(chan error, 1)
	l.queue <- r
	l.mu.RUnlock()
	return <-r.done
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

// Close answers every queued record, stops the writer, discards a
// compaction in progress and closes the file. Every record acknowledged
// before is already durable. Later calls return ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return l.closeErr
}

// run is the writer goroutine, started by Open and ended by Close. It
// writes the queued records, holding writing for each batch, and owns the
// compactor goroutine, which it always waits for before it ends.
func (l *Log) run() {
	defer close(l.done)
	batch := make([]*request, 0, maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	l.writing.Lock()
	l.maybeCompact()
	l.writing.Unlock()
	for {
		select {
		case res := <-l.compacted:
			l.writing.Lock()
			l.finishCompaction(res)
			l.maybeCompact()
			l.writing.Unlock()
		case r, ok := <-l.queue:
			l.writing.Lock()
			if !ok {
				l.shutdown()
				l.writing.Unlock()
				return
			}
			batch = append(batch[:0], r)
			open := l.drain(&batch)
			if open && l.prev > 1 {
				open = l.gather(&batch, l.prev, linger)
			}
			err := l.commit(batch)
			if open {
				l.maybeCompact()
			} else {
				l.shutdown()
			}
			l.writing.Unlock()
			answer(batch, err)
			if !open {
				return
			}
			clear(batch) // let the requests go
			// The callers just answered are runnable on the writer's
			// processor. Step aside so they send their '+' now: the next
			// batch's fsync keeps that processor for its whole length
			// (syncAppend), and they would wait behind it, holding back the
			// lockers whose next records would have made that batch larger.
			// Over TCP with 64 lockers this cut the fsyncs per acquire by a
			// fifth (see the README's Performance section).
			runtime.Gosched()
		}
	}
}

// drain appends to batch what is queued, without waiting, and reports
// whether the queue is still open.
func (l *Log) drain(batch *[]*request) bool {
	for len(*batch) < maxBatch {
		select {
		case r, ok := <-l.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, r)
		default:
			return true
		}
	}
	return true
}

// gather waits up to lingerFor for batch to reach want records (as many as
// the previous batch had) and reports whether the queue is still open.
//
// Why wait at all: the lockers answered by the previous batch are about to
// send their next records (an unlock follows a lock). Under concurrency an
// fsync that starts a moment later, with them aboard, saves whole fsyncs,
// and on a busy machine each fsync costs far more than its own duration:
// the writer comes back from it without a processor and waits its turn
// behind every runnable connection before it can start the next one. A
// lone locker (the previous batch held one record) never waits.
func (l *Log) gather(batch *[]*request, want int, linger *time.Timer) (open bool) {
	linger.Reset(lingerFor)
	defer linger.Stop()
	for len(*batch) < want && len(*batch) < maxBatch {
		select {
		case r, ok := <-l.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, r)
		case <-linger.C:
			return true
		}
	}
	return true
}

// commit writes a batch with one write and one fsync and returns what its
// callers are to be answered (see answer). It notes the batch's size for
// the next (prev, lone). l.writing must be held.
func (l *Log) commit(batch []*request) error {
	l.prev = len(batch)
	l.lone.Store(l.prev <= 1)
	if err := l.Err(); err != nil {
		return err
	}
	buf := l.buf[:0]
	for _, r := range batch {
		buf = append(buf, r.rec...)
	}
	err := l.writeBatch(buf)
	if err != nil {
		err = l.fail(err)
	} else {
		failpoint("fsync-before-answer")
		if failpointsOn && hasRelease(batch) {
			failpoint("release-before-apply")
		}
		l.size.Add(int64(len(buf)))
		for _, r := range batch {
			l.records.Add(uint64(r.records))
			for _, o := range r.ops {
				if reason := l.apply(o); reason != "" {
					// The engine planned it against its own table: a bug, and
					// the next start will refuse this log. Said loudly.
					l.logger.Error("walog: a committed record contradicts the log's table; the next start will refuse the log",
						"file", l.path, "reason", reason)
				}
			}
		}
		if l.compacting {
			l.tail = append(l.tail, buf...)
		}
	}
	l.buf = buf
	if cap(buf) > 1<<20 {
		l.buf = nil // do not keep a burst's buffer for ever
	}
	return err
}

// answer tells every caller of a committed batch its outcome. It is called
// once l.writing is let go: an answered lone locker then finds the log free
// and writes its next record itself (submit) instead of queueing it behind
// a writer that has not yet let go.
func answer(batch []*request, err error) {
	for _, r := range batch {
		r.done <- err
	}
}

func (l *Log) writeBatch(buf []byte) error {
	if err := writeAll(l.f, buf, l.path); err != nil {
		return err
	}
	failpoint("append-before-fsync")
	start := time.Now()
	var err error
	if s, ok := l.f.(appendSyncer); ok && len(buf) <= smallAppend && l.lastSync < quickSync {
		err = s.SyncAppend()
	} else {
		err = l.f.Sync()
	}
	l.lastSync = time.Since(start)
	l.onFsync(l.lastSync)
	l.fsyncs.Add(1)
	if err != nil {
		return pathError("fsync", l.path, err)
	}
	return nil
}

// dropReleases returns ops without its releases (for a sabotage).
func dropReleases(ops []op) []op {
	kept := ops[:0:0]
	for _, o := range ops {
		if o.typ != typeRelease && o.typ != typeReleaseV1 {
			kept = append(kept, o)
		}
	}
	return kept
}

// hasRelease reports whether a batch releases a key (for a failpoint).
func hasRelease(batch []*request) bool {
	for _, r := range batch {
		for _, o := range r.ops {
			if o.typ == typeRelease || o.typ == typeReleaseV1 {
				return true
			}
		}
	}
	return false
}

// fail makes err sticky: every later record is refused with it.
func (l *Log) fail(err error) error {
	l.errs.Add(1)
	err = fmt.Errorf("%w: %w", ErrFailed, err)
	if l.failed.CompareAndSwap(nil, &err) {
		l.logger.Error("walog: the log failed; every lock and unlock is refused until restart",
			"file", l.path, "err", err)
	}
	return *l.failed.Load()
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
	l.logger.Debug("walog: compacted", "file", l.path, "bytes", l.size.Load(), "held_keys", len(l.live))
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

// shutdown ends the writer: it waits for a running compaction, discards
// it, and closes the file.
func (l *Log) shutdown() {
	if l.compacting {
		res := <-l.compacted
		l.compacting = false
		if res.err == nil {
			l.discard(res.f)
		}
	}
	if err := l.f.Close(); err != nil {
		l.closeErr = fmt.Errorf("walog: close %s: %w", l.path, err)
	}
	unlockFile(l.lock)
}
