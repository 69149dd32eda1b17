package walog_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/walog"
)

// memFS is a file system in memory with a page cache that a crash loses:
// every write, truncation, creation, rename and removal is in the cache
// until fsynced — a file's bytes by the file's fsync, a folder's names by
// the folder's fsync — and Crash puts back only what was synced. It is
// the harsher reading of POSIX that ext4 with data=writeback, or a disk
// with a volatile cache, may give: a rename not followed by a folder fsync
// is lost, and so is a file created but never named durably.
//
// The crash comes at a chosen operation (crashAt); from it on every
// operation fails with EIO, as for a process that no longer exists, until
// Restart. Faults can be injected on one kind of operation.
type memFS struct {
	mu sync.Mutex // guards everything below
	// names and synced are the folder as cached and as fsynced.
	names, synced map[string]*memNode
	ops           int // operations so far
	crashAt       int // the operation that crashes (0: none)
	// crashKind, when set, makes crashAt count only the operations of
	// that kind, from kindOps.
	crashKind string
	kindOps   int
	crashed   bool   // since crashAt, until Restart
	crashedIn string // the kind of operation the crash came at
	// fault, when set, is asked before every operation of a kind
	// ("write", "sync", "rename", "opendir", "syncdir", "open", "remove").
	fault func(op string) error
}

// memNode is a file: its bytes as cached and as fsynced.
type memNode struct {
	data, synced []byte
}

func newMemFS() *memFS {
	return &memFS{names: make(map[string]*memNode), synced: make(map[string]*memNode)}
}

// step counts an operation of kind op and returns its error: EIO after a
// crash, or the injected fault.
func (m *memFS) step(op string) error {
	if m.crashed {
		return syscall.EIO
	}
	m.ops++
	n := m.ops
	if m.crashKind != "" {
		if op != m.crashKind {
			n = -1
		} else {
			m.kindOps++
			n = m.kindOps
		}
	}
	if n == m.crashAt {
		m.crashed, m.crashedIn = true, op
		return syscall.EIO
	}
	if m.fault != nil {
		return m.fault(op)
	}
	return nil
}

// Restart is the machine coming back: every file holds what was fsynced,
// the folder the names it had at its last fsync.
func (m *memFS) Restart() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.names = make(map[string]*memNode)
	for name, n := range m.synced {
		n.data = slices.Clone(n.synced)
		m.names[name] = n
	}
	m.crashed, m.crashAt, m.fault, m.crashKind, m.kindOps = false, 0, nil, "", 0
}

func (m *memFS) OpenFile(name string, flag int, _ os.FileMode) (walog.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("open"); err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	n := m.names[name]
	if n == nil {
		if flag&os.O_CREATE == 0 {
			return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		n = &memNode{}
		m.names[name] = n
	}
	if flag&os.O_TRUNC != 0 {
		n.data = nil
	}
	return &memFile{fs: m, n: n, name: name}, nil
}

func (m *memFS) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("rename"); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	n := m.names[oldpath]
	if n == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrNotExist}
	}
	m.names[newpath] = n
	delete(m.names, oldpath)
	return nil
}

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("remove"); err != nil {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	if m.names[name] == nil {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.names, name)
	return nil
}

func (m *memFS) Lstat(name string) (os.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.names[name]
	if n == nil {
		return nil, &os.PathError{Op: "lstat", Path: name, Err: fs.ErrNotExist}
	}
	return memInfo{name: filepath.Base(name), size: int64(len(n.data))}, nil
}

func (m *memFS) OpenDir(dir string) (walog.Dir, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("opendir"); err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return memDir{fs: m, name: dir}, nil
}

type memDir struct {
	fs   *memFS
	name string
}

func (d memDir) Sync() error {
	m := d.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("syncdir"); err != nil {
		return &os.PathError{Op: "fsync", Path: d.name, Err: err}
	}
	m.synced = make(map[string]*memNode, len(m.names))
	for name, n := range m.names {
		m.synced[name] = n
	}
	return nil
}

func (memDir) Close() error { return nil }

type memFile struct {
	fs   *memFS
	n    *memNode
	name string
	off  int // the read offset; writes append (the log opens with O_APPEND)
}

func (f *memFile) Read(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.crashed {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: syscall.EIO}
	}
	if f.off >= len(f.n.data) {
		return 0, io.EOF
	}
	n := copy(b, f.n.data[f.off:])
	f.off += n
	return n, nil
}

func (f *memFile) Write(b []byte) (int, error) {
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("write"); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			// A full disk takes what fits: half, here.
			f.n.data = append(f.n.data, b[:len(b)/2]...)
			return len(b) / 2, &os.PathError{Op: "write", Path: f.name, Err: err}
		}
		return 0, &os.PathError{Op: "write", Path: f.name, Err: err}
	}
	f.n.data = append(f.n.data, b...)
	return len(b), nil
}

func (f *memFile) Sync() error {
	m := f.fs
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.step("sync"); err != nil {
		return &os.PathError{Op: "fsync", Path: f.name, Err: err}
	}
	f.n.synced = slices.Clone(f.n.data)
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.crashed {
		return &os.PathError{Op: "truncate", Path: f.name, Err: syscall.EIO}
	}
	f.n.data = f.n.data[:min(int(size), len(f.n.data))]
	return nil
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return memInfo{name: filepath.Base(f.name), size: int64(len(f.n.data))}, nil
}

func (f *memFile) Close() error { return nil }

// memInfo is the os.FileInfo of a memFS file.
type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() os.FileMode  { return 0o600 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// keyState is what a client knows of a key it alone uses: the outcome of
// its last request that was answered, and whether a later one is unknown.
type keyState struct {
	held    bool // the last answered request left it held
	unknown bool // a request after it got no clear answer
}

// pageCacheRun drives a table on the log over fsys: workers, each on keys
// of its own, lock and unlock until the first refusal (a crash or a
// fault), and report what they were told.
func pageCacheRun(t *testing.T, table *locker.Table, workers, keysEach, maxOps int, rng *rand.Rand, state map[string]*keyState) {
	t.Helper()
	var mu sync.Mutex // guards state
	var wg sync.WaitGroup
	h := locker.Holder{Source: "pc", Remote: "127.0.0.1:1"}
	for w := range workers {
		wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))
		wg.Go(func() {
			for range maxOps {
				k := fmt.Sprintf("w%d/%d", w, wrng.IntN(keysEach))
				mu.Lock()
				st := state[k]
				if st == nil {
					st = &keyState{}
					state[k] = st
				}
				held, unknown := st.held, st.unknown
				mu.Unlock()
				if unknown {
					continue // this worker stopped hearing about it
				}
				var err error
				switch {
				case !held:
					_, err = table.TryLock(k, h)
				case wrng.IntN(5) == 0:
					_, err = table.ResetByKey(k)
				default:
					_, err = table.Unlock(k)
				}
				mu.Lock()
				if err != nil {
					st.unknown = true
				} else {
					st.held = !held
				}
				mu.Unlock()
				if err != nil {
					if !errors.Is(err, locker.ErrJournal) {
						t.Errorf("%q: %v", k, err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
}

// checkAfterCrash compares the restarted table with what the clients were
// told: an acknowledged grant is held unless its release was acknowledged,
// an acknowledged release is free, and a key whose last request went
// unanswered may be either. Unknown keys are reset, so that every key is
// known again. It returns how many were checked.
func checkAfterCrash(t *testing.T, table *locker.Table, state map[string]*keyState, when string) int {
	t.Helper()
	held := heldKeys(table)
	checked := 0
	for k, st := range state {
		switch {
		case st.unknown:
			if _, err := table.ResetByKey(k); err != nil {
				t.Fatalf("%s: reset %q: %v", when, k, err)
			}
			st.held, st.unknown = false, false
			continue
		case st.held && !held[k]:
			t.Errorf("%s: %q was granted (acknowledged) and not released, but is free after the crash", when, k)
		case !st.held && held[k]:
			t.Errorf("%s: %q was released (acknowledged), but is held after the crash", when, k)
		}
		checked++
	}
	for k := range held {
		if state[k] == nil {
			t.Errorf("%s: %q is held after the crash, but nobody ever locked it", when, k)
		}
	}
	return checked
}

// TestLostPageCache crashes a table on the log over memFS 90 times with
// compactions running (a small floor): two crashes in three at one of
// the first operations of a chosen kind (a write, an fsync, a rename, a
// folder open or fsync), the others at any operation. Each crash loses
// every write, creation and rename not fsynced.
// After each restart every acknowledged grant is held unless its release
// was acknowledged, and every acknowledged release is free.
func TestLostPageCache(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	path := filepath.Join(t.TempDir(), "locks.wal") // the lock file is real; the log is in fsys
	fsys := newMemFS()
	state := make(map[string]*keyState)
	crashedIn := make(map[string]int)
	checked := 0
	const cycles = 90
	for cycle := range cycles {
		table, l := durableTable(t, path, walog.Options{FS: fsys, CompactFloor: 1024})
		if cycle > 0 {
			checked += checkAfterCrash(t, table, state, fmt.Sprintf("cycle %d", cycle))
		}
		// Two cycles in three crash at a chosen kind of operation (the
		// n-th of it), the third at any operation.
		fsys.mu.Lock()
		if kinds := []string{"write", "sync", "rename", "syncdir", "opendir"}; cycle%3 != 2 {
			fsys.crashKind = kinds[(cycle/3*2+cycle%3)%len(kinds)]
			fsys.crashAt = 1 + rng.IntN(3)
		} else {
			fsys.crashAt = fsys.ops + 1 + rng.IntN(400)
		}
		fsys.mu.Unlock()
		pageCacheRun(t, table, 8, 4, 1000, rng, state)
		fsys.mu.Lock()
		crashed, in := fsys.crashed, fsys.crashedIn
		if !crashed { // the load ended first: the crash comes now, between requests
			fsys.crashed, in = true, "idle"
		}
		fsys.mu.Unlock()
		crashedIn[in]++
		l.Close()
		fsys.Restart()
		if t.Failed() {
			break
		}
	}
	table, _ := durableTable(t, path, walog.Options{FS: fsys, CompactFloor: 1024})
	checked += checkAfterCrash(t, table, state, "the end")
	t.Logf("%d crashes (at: %v), %d key states checked after them", cycles, crashedIn, checked)
	if crashedIn["rename"] == 0 || crashedIn["syncdir"] == 0 {
		t.Errorf("no crash came at a compaction's rename or folder fsync (%v): the test proved less than it says", crashedIn)
	}
}

// TestIOErrorsThenLostPageCache injects EIO and ENOSPC on each kind of
// operation — write, fsync, rename, folder open, folder fsync — at a
// random moment under load, then crashes (losing the page cache) and
// restarts: no acknowledged grant is lost and no acknowledged release
// undone, so no '+' was sent for a grant that was not durable. A failed
// write or fsync fails the log until restart; a failed rename or folder
// open fails only the compaction; a failed folder fsync after the rename
// fails the log. (A write or fsync fault may land on the log or on a
// compaction's temporary file: the first fails the log, the second the
// compaction.)
func TestIOErrorsThenLostPageCache(t *testing.T) {
	for _, op := range []string{"write", "sync", "rename", "opendir", "syncdir"} {
		for _, ferr := range []error{syscall.EIO, syscall.ENOSPC} {
			t.Run(op+"/"+ferr.Error(), func(t *testing.T) {
				seed := uint64(time.Now().UnixNano())
				rng := rand.New(rand.NewPCG(seed, 4))
				path := filepath.Join(t.TempDir(), "locks.wal")
				fsys := newMemFS()
				state := make(map[string]*keyState)
				table, l := durableTable(t, path, walog.Options{FS: fsys, CompactFloor: 1024})
				// The fault hits the after-th operation of its kind: for a
				// batch's write or fsync, well into the run; for a
				// compaction's steps, one of its first compactions.
				after := 1 + rng.IntN(3)
				if op == "write" || op == "sync" {
					after = 20 + rng.IntN(200)
				}
				seen, hit := 0, 0
				fsys.mu.Lock()
				fsys.fault = func(kind string) error {
					if kind != op {
						return nil
					}
					if seen++; seen == after {
						hit++
						return ferr
					}
					return nil
				}
				fsys.mu.Unlock()
				pageCacheRun(t, table, 8, 4, 300, rng, state)
				// A write or fsync of the log fails it; of a compaction's
				// temporary file, only the compaction.
				failed, st := l.Err() != nil, l.Stats()
				switch {
				case st.Errors == 0:
					t.Errorf("a %s fault was not counted", op)
				case (op == "rename" || op == "opendir") && failed, op == "syncdir" && !failed:
					t.Errorf("after a %s fault the log failed = %v (%v)", op, failed, l.Err())
				}
				fsys.mu.Lock()
				fsys.crashAt = fsys.ops + 1 // the crash: now
				fsys.mu.Unlock()
				if _, err := table.TryLock("after/fault", locker.Holder{Source: "pc"}); err == nil {
					t.Fatal("a grant after the crash was acknowledged")
				}
				l.Close()
				fsys.mu.Lock()
				h := hit
				fsys.mu.Unlock()
				if h == 0 {
					t.Fatalf("the %s fault was never hit (seed %d)", op, seed)
				}
				fsys.Restart()
				table, _ = durableTable(t, path, walog.Options{FS: fsys, CompactFloor: 1024})
				n := checkAfterCrash(t, table, state, op+" fault")
				t.Logf("seed %d: fault on %s #%d; the log %s; %d compactions, %d errors; %d key states checked after the crash",
					seed, op, after, map[bool]string{true: "failed", false: "went on"}[failed], st.Compactions, st.Errors, n)
			})
		}
	}
}
