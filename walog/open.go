package walog

// Opening a log: the lock file, the stray temporary file, the replay and
// the upgrade of an older version, then the writer.

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/locking-center/locking-center/locker"
)

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
		state:     locker.NewState(0),
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
		l.state.Clear() // a planted bug for the crash test to find
	}
	l.size.Store(size)
	retokened := false
	var rerr error
	l.state.Each(func(k string, g locker.Grant) bool {
		h := holderOf(g)
		if rerr = restore(k, &h); rerr != nil {
			rerr = fmt.Errorf("walog: restore %q from %s: %w", k, path, rerr)
			return false
		}
		if h.Token != g.Token {
			retokened = true
			// Changing a held key's token (a version 1 hold given one)
			// does not add or remove keys: safe within Each.
			l.state.Retoken(k, h.Token)
		}
		return true
	})
	if rerr != nil {
		l.f.Close()
		return nil, rerr
	}
	l.highToken.Store(l.state.HighToken())
	// A hold whose token the caller changed must be on disk under its new
	// token before anything is appended: a later release names the grant
	// by that token, and a replay would not match it to the old one.
	if version != version2 || retokened {
		if err := l.upgrade(); err != nil {
			l.f.Close()
			return nil, err
		}
		l.logger.Info("walog: rewrote the log in version 2 with the tokens of its holds",
			"file", path, "from_version", version, "held_keys", l.state.Len())
	}
	l.logger.Debug("walog: replayed", "file", path, "bytes", size, "held_keys", l.state.Len())
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

// HighToken returns the highest fencing token the log holds a record of:
// every token handed out before (and recorded) is at most this.
func (l *Log) HighToken() uint64 {
	return l.highToken.Load()
}
