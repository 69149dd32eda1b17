package walog

import (
	"fmt"
	"io"
	"os"
	"time"
)

// FS is the part of the file system the log uses. It exists so tests can
// inject failed writes, short writes, failed fsyncs, failed renames and a
// full disk; OSFS is the real one.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// SyncDir fsyncs a directory, making renames and creations in it
	// durable.
	SyncDir(dir string) error
}

// File is an open file of an FS.
type File interface {
	io.Reader
	io.Writer
	io.Closer
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
}

// OSFS is the operating system's file system.
type OSFS struct{}

// OpenFile opens a file with os.OpenFile.
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // *os.PathError: already names the file
	}
	return osFile{f}, nil
}

// osFile is an os.File whose Sync is syncFile (fdatasync on Linux).
type osFile struct{ *os.File }

func (f osFile) Sync() error { return syncFile(f.File) }

// SyncAppend is Sync for a small append; see syncAppend.
func (f osFile) SyncAppend() error { return syncAppend(f.File) }

// appendSyncer is a File with a cheaper fsync for a small append, which
// the writer uses for its batches while they are small and their fsyncs
// quick (see quickSync). A File without it (the tests' fault-injecting
// one) is synced with Sync.
type appendSyncer interface{ SyncAppend() error }

// smallAppend is the largest batch synced with SyncAppend: about a
// thousand records, ten times a busy batch here.
const smallAppend = 64 << 10

// quickSync is how long the previous batch's fsync may have taken for the
// next to use SyncAppend. Holding a processor pays only while fsyncs are
// short: on a slow or stalling disk the scheduler's handoff costs little
// beside the fsync, while a processor held for milliseconds would be
// missed by the connections and by the garbage collector. A variable so a
// test can raise it.
var quickSync = time.Millisecond

// Rename renames with os.Rename.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove removes with os.Remove.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// SyncDir opens dir and fsyncs it.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("fsync folder %s: %w", dir, err)
	}
	return d.Close()
}

// writeTemp creates (or truncates) the temporary file tmp, writes data and
// fsyncs it: the first half of every rename-based rewrite. The file is left
// open for appending so the caller can add to it before committing it.
func writeTemp(fsys FS, tmp string, data []byte) (File, error) {
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := writeSync(f, data, tmp); err != nil {
		f.Close()
		fsys.Remove(tmp)
		return nil, err
	}
	return f, nil
}

// commitTemp appends tail to the temporary file f, fsyncs it, renames it
// over path and fsyncs the folder: the second half of every rewrite. When
// it fails before the rename, path is untouched and tmp is removed; renamed
// reports whether path may now name the new file.
func commitTemp(fsys FS, f File, tmp, path, dir string, tail []byte) (renamed bool, err error) {
	if len(tail) > 0 {
		if err := writeSync(f, tail, tmp); err != nil {
			f.Close()
			fsys.Remove(tmp)
			return false, err
		}
	}
	if err := fsys.Rename(tmp, path); err != nil {
		f.Close()
		fsys.Remove(tmp)
		return false, fmt.Errorf("rename %s over %s: %w", tmp, path, err)
	}
	// Sync the folder so the rename itself survives a crash (etcd does
	// the same for its WAL).
	if err := fsys.SyncDir(dir); err != nil {
		return true, err
	}
	return true, nil
}

// writeAll writes data with one write; a short write is an error.
func writeAll(f File, data []byte, name string) error {
	n, err := f.Write(data)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// writeSync writes data with one write and fsyncs it.
func writeSync(f File, data []byte, name string) error {
	if err := writeAll(f, data, name); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", name, err)
	}
	return nil
}
