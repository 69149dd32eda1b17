package walog

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// Injected faults. FaultFS.Fault returns one of these (or any error) to
// make an operation fail.
var (
	// ErrInjected is a plain I/O error.
	ErrInjected = errors.New("injected I/O error")
	// ErrShort makes a write write half its bytes and report no error.
	ErrShort = errors.New("injected short write")
	// ErrDiskFull makes a write write half its bytes and fail with ENOSPC.
	ErrDiskFull = syscall.ENOSPC
)

// FaultFS is the real file system with faults injected on demand, and a
// memory of what was fsynced so that a power loss can be simulated.
type FaultFS struct {
	OSFS
	// mu guards fault and synced.
	mu sync.Mutex
	// fault is asked before every open ("open"), write ("write"), fsync
	// ("sync"), rename ("rename"), remove ("remove"), folder open
	// ("opendir") and folder fsync ("syncdir"); a non-nil answer is the
	// injected fault.
	fault func(op, name string) error
	// nodes maps a file name to the file's state; a rename moves it.
	nodes map[string]*node
}

// node is one file as the simulated disk knows it.
type node struct {
	// name and synced (the size at the last fsync) are guarded by
	// FaultFS.mu; a rename changes name.
	name   string
	synced int64
}

// SetFault installs the fault hook; nil clears it.
func (fsys *FaultFS) SetFault(f func(op, name string) error) {
	fsys.mu.Lock()
	fsys.fault = f
	fsys.mu.Unlock()
}

func (fsys *FaultFS) check(op, name string) error {
	fsys.mu.Lock()
	f := fsys.fault
	fsys.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(op, name)
}

// OpenFile opens a file whose writes and fsyncs go through the hook.
func (fsys *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if err := fsys.check("open", name); err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	if fsys.nodes == nil {
		fsys.nodes = make(map[string]*node)
	}
	n := fsys.nodes[name]
	if n == nil || flag&os.O_TRUNC != 0 {
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		n = &node{name: name, synced: fi.Size()}
		fsys.nodes[name] = n
	}
	return &faultFile{File: f, fs: fsys, node: n}, nil
}

// Rename renames through the hook.
func (fsys *FaultFS) Rename(oldpath, newpath string) error {
	if err := fsys.check("rename", newpath); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	fsys.mu.Lock()
	if n := fsys.nodes[oldpath]; n != nil {
		n.name = newpath
		fsys.nodes[newpath] = n
		delete(fsys.nodes, oldpath)
	}
	fsys.mu.Unlock()
	return nil
}

// Remove removes through the hook.
func (fsys *FaultFS) Remove(name string) error {
	if err := fsys.check("remove", name); err != nil {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	return os.Remove(name)
}

// OpenDir opens a folder whose fsync goes through the hook.
func (fsys *FaultFS) OpenDir(dir string) (Dir, error) {
	if err := fsys.check("opendir", dir); err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	d, err := fsys.OSFS.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	return &faultDir{Dir: d, fs: fsys, name: dir}, nil
}

type faultDir struct {
	Dir
	fs   *FaultFS
	name string
}

func (d *faultDir) Sync() error {
	if err := d.fs.check("syncdir", d.name); err != nil {
		return &os.PathError{Op: "fsync", Path: d.name, Err: err}
	}
	return d.Dir.Sync()
}

// PowerLoss forgets every byte not fsynced: each file known to the FS is
// cut back to its size at its last fsync.
func (fsys *FaultFS) PowerLoss() error {
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	for name, n := range fsys.nodes {
		if err := os.Truncate(name, n.synced); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

type faultFile struct {
	*os.File
	fs   *FaultFS
	node *node
}

func (f *faultFile) name() string {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return f.node.name
}

func (f *faultFile) Write(b []byte) (int, error) {
	err := f.fs.check("write", f.name())
	switch {
	case err == nil:
		return f.File.Write(b)
	case errors.Is(err, ErrShort):
		return f.File.Write(b[:len(b)/2])
	case errors.Is(err, ErrDiskFull):
		n, _ := f.File.Write(b[:len(b)/2])
		return n, &os.PathError{Op: "write", Path: f.name(), Err: err}
	default:
		return 0, &os.PathError{Op: "write", Path: f.name(), Err: err}
	}
}

func (f *faultFile) Sync() error {
	if err := f.fs.check("sync", f.name()); err != nil {
		return &os.PathError{Op: "fsync", Path: f.name(), Err: err}
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	f.fs.mu.Lock()
	f.node.synced = fi.Size()
	f.fs.mu.Unlock()
	return nil
}

func (f *faultFile) Truncate(size int64) error {
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	f.fs.mu.Lock()
	f.node.synced = min(f.node.synced, size)
	f.fs.mu.Unlock()
	return nil
}
