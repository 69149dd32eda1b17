package walog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// FS is the part of the file system the log uses. It exists so tests can
// inject failed writes, short writes, failed fsyncs, failed renames, a full
// disk, a read-only file system and running out of descriptors; OSFS is the
// real one.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	Lstat(name string) (os.FileInfo, error)
	// OpenDir opens a directory so that it can be fsynced, which makes
	// renames and creations in it durable.
	OpenDir(dir string) (Dir, error)
}

// Dir is an open directory of an FS.
type Dir interface {
	Sync() error
	Close() error
}

// File is an open file of an FS. Its errors name the file by the name it
// was opened under (see renamed).
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
	return osFile{File: f, name: name}, nil
}

// osFile is an os.File whose Sync is syncFile (fdatasync on Linux) and
// whose errors name it by name: the log's name once a rewrite has renamed
// the temporary file it was opened as over the log.
type osFile struct {
	*os.File
	name string
}

// renamed returns f, which a rename has just moved to name, with its
// errors naming it so. Without it every error of the log after its first
// compaction would name a temporary file that no longer exists.
func renamed(f File, name string) File {
	if of, ok := f.(osFile); ok {
		of.name = name
		return of
	}
	return f // the tests' files follow renames themselves
}

// named rewrites the path of a *os.PathError about f to f's current name.
func (f osFile) named(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == f.File.Name() {
		pe.Path = f.name
	}
	return err
}

func (f osFile) Write(b []byte) (int, error) {
	n, err := f.File.Write(b)
	return n, f.named(err)
}

func (f osFile) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	return n, f.named(err)
}

func (f osFile) Truncate(size int64) error { return f.named(f.File.Truncate(size)) }

func (f osFile) Stat() (os.FileInfo, error) {
	fi, err := f.File.Stat()
	return fi, f.named(err)
}

func (f osFile) Close() error { return f.named(f.File.Close()) }

func (f osFile) Sync() error { return f.named(syncFile(f.File)) }

// SyncAppend is Sync for a small append; see syncAppend.
func (f osFile) SyncAppend() error { return f.named(syncAppend(f.File)) }

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

// Lstat stats with os.Lstat.
func (OSFS) Lstat(name string) (os.FileInfo, error) { return os.Lstat(name) }

// OpenDir opens dir with os.Open.
func (OSFS) OpenDir(dir string) (Dir, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// writeTemp creates (or truncates) the temporary file tmp, writes data and
// fsyncs it: the first half of every rename-based rewrite. The file is left
// open for appending so the caller can add to it before committing it.
func writeTemp(fsys FS, tmp string, data []byte) (File, error) {
	f, err := fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	err = writeAll(f, data, tmp)
	if err == nil {
		failpoint("compact-temp-written")
		if err = f.Sync(); err != nil {
			err = pathError("fsync", tmp, err)
		}
	}
	if err != nil {
		f.Close()
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", tmp, rerr))
		}
		return nil, err
	}
	return f, nil
}

// commitTemp appends tail to the temporary file f, fsyncs it, renames it
// over path and fsyncs the folder: the second half of every rewrite. When
// it fails before the rename, path is untouched and tmp is removed; moved
// reports whether path may now name the new file, and with a nil error f
// then names path (see renamed).
//
// The folder is opened before the rename, not after: opening needs a free
// descriptor, and running out of them (EMFILE) is not a disk failure. Here
// it is a failed rewrite that leaves the old file in place; after the
// rename it would leave a rename that cannot be made durable, which the
// log could only treat as a failed fsync.
func commitTemp(fsys FS, f File, tmp, path, dir string, tail []byte) (moved bool, _ File, err error) {
	abandon := func(err error) (bool, File, error) {
		f.Close()
		if rerr := fsys.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", tmp, rerr))
		}
		return false, f, err
	}
	if len(tail) > 0 {
		if err := writeSync(f, tail, tmp); err != nil {
			return abandon(err)
		}
	}
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return abandon(fmt.Errorf("open folder %s to fsync it: %w", dir, err))
	}
	defer d.Close() // read-only: closing it reports nothing about the disk
	failpoint("compact-temp-synced")
	if err := fsys.Rename(tmp, path); err != nil {
		return abandon(err) // *os.LinkError: names both files
	}
	failpoint("compact-renamed")
	f = renamed(f, path)
	// Sync the folder so the rename itself survives a crash (etcd does
	// the same for its WAL).
	if err := d.Sync(); err != nil {
		return true, f, pathError("fsync", dir, err)
	}
	failpoint("compact-folder-synced")
	return true, f, nil
}

// pathError returns err as an *os.PathError about name, unless it already
// is one (which names its file itself).
func pathError(op, name string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return err
	}
	return &os.PathError{Op: op, Path: name, Err: err}
}

// writeAll writes data with one write; a short write is an error.
func writeAll(f File, data []byte, name string) error {
	n, err := f.Write(data)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return pathError("write", name, err)
	}
	return nil
}

// writeSync writes data with one write and fsyncs it.
func writeSync(f File, data []byte, name string) error {
	if err := writeAll(f, data, name); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return pathError("fsync", name, err)
	}
	return nil
}
