package walog

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/locking-center/locking-center/internal/lctest"
)

// churn locks and unlocks a few keys until done says stop, at most n
// cycles, and returns how many it made.
func churn(t *testing.T, l *Log, n int, done func() bool) int {
	t.Helper()
	for i := range n {
		if done() {
			return i
		}
		k := fmt.Sprintf("churn/%d", i%5)
		if err := l.Acquire(k, holder(i)); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := l.Release(k); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	return n
}

// TestFolderOpenFailureIsAFailedCompaction: running out of descriptors
// when the compaction opens the folder (to fsync it after the rename) is
// not a disk failure. The folder is opened before the rename, so the
// compaction fails with the old log untouched, the log stays healthy, and
// a later compaction succeeds; every acknowledged record survives a power
// loss. (With the folder opened after the rename, as before, the first
// EMFILE failed the log until restart.)
func TestFolderOpenFailureIsAFailedCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	var out lctest.SyncBuffer
	l, _ := open(t, path, Options{FS: fsys, CompactFloor: 2048, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	want := map[string]Holder{}
	for i := range 5 {
		k := fmt.Sprintf("held/%d", i)
		if err := l.Acquire(k, holder(i)); err != nil {
			t.Fatal(err)
		}
		want[k] = holder(i)
	}
	fsys.SetFault(func(op, name string) error {
		if op == "opendir" {
			return syscall.EMFILE
		}
		return nil
	})
	churn(t, l, 20000, func() bool { return l.Stats().Errors >= 2 })
	st := l.Stats()
	if st.Errors < 2 || st.Compactions != 0 {
		t.Fatalf("stats %+v: want two failed compactions and none done", st)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("EMFILE on the folder failed the log: %v", err)
	}
	line := out.LineWith("compaction failed")
	if !strings.Contains(line, "file="+filepath.Dir(path)) || !strings.Contains(line, "too many open files") {
		t.Fatalf("the failed compaction's line does not name the folder and the cause: %q", line)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed compaction left its temporary file: %v", err)
	}

	// Descriptors are back: the next attempt compacts.
	fsys.SetFault(nil)
	churn(t, l, 20000, func() bool { return l.Stats().Compactions > 0 })
	if l.Stats().Compactions == 0 || l.Err() != nil {
		t.Fatalf("no compaction once the folder opens again (stats %+v, err %v)", l.Stats(), l.Err())
	}
	if err := l.Acquire("after", holder(99)); err != nil {
		t.Fatal(err)
	}
	want["after"] = holder(99)
	l.Close()
	if err := fsys.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, want)
}

// TestFailedCompactionNamesTheFileThatFailed: the warning after a failed
// compaction names the temporary file whose write failed, with the log
// beside it, not the log as the file that failed.
func TestFailedCompactionNamesTheFileThatFailed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	var out lctest.SyncBuffer
	l, _ := open(t, path, Options{FS: fsys, CompactFloor: 2048, Logger: slog.New(slog.NewTextHandler(&out, nil))})
	fsys.SetFault(func(op, name string) error {
		if op == "write" && strings.HasSuffix(name, ".tmp") {
			return ErrDiskFull
		}
		return nil
	})
	churn(t, l, 20000, func() bool { return l.Stats().Errors > 0 })
	line := out.LineWith("compaction failed")
	if line == "" {
		t.Fatalf("no compaction failed:\n%s", out.String())
	}
	if !strings.Contains(line, "file="+path+".tmp ") || !strings.Contains(line, "log="+path+" ") {
		t.Fatalf("line %q: want file=%s.tmp (what failed) and log=%s", line, path, path)
	}
	if strings.Count(line, path+".tmp") != 2 { // the attribute and the error, once each
		t.Fatalf("line %q names the temporary file other than once in file= and once in err=", line)
	}
}

// TestErrorsAfterCompactionNameTheLog: after a compaction the log's handle
// is the renamed temporary file; a failure on it must name the log, not a
// temporary file that no longer exists.
func TestErrorsAfterCompactionNameTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{CompactFloor: 1024})
	churn(t, l, 20000, func() bool { return l.Stats().Compactions > 0 })
	if l.Stats().Compactions == 0 {
		t.Fatal("no compaction")
	}
	// The writer set l.f before it counted the compaction (an atomic the
	// test has read), and is idle now. Put a read-only descriptor in its
	// place behind its back: the next write fails on it. (Closing it
	// instead would let the next file the process opens take its number,
	// and the write go there.)
	ro, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := syscall.Dup3(int(ro.Fd()), int(l.f.(osFile).File.Fd()), 0); err != nil {
		t.Fatal(err)
	}
	err = l.Acquire("k", holder(1))
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("Acquire on a read-only descriptor: %v, want ErrFailed", err)
	}
	if msg := err.Error(); !strings.Contains(msg, path) || strings.Contains(msg, ".tmp") {
		t.Fatalf("error %q: want it to name %s and no temporary file", msg, path)
	}
}

// TestReadOnlyFileSystem: on a read-only file system unlink fails with
// EROFS even for a name that does not exist. Open must report the log it
// cannot open for writing, not the removal of a temporary file that is not
// there.
func TestReadOnlyFileSystem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	if err := l.Acquire("a", holder(1)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	fsys := &FaultFS{}
	fsys.SetFault(func(op, name string) error {
		if op == "remove" || op == "open" || op == "rename" {
			return syscall.EROFS
		}
		return nil
	})
	l2, err := Open(path, Options{FS: fsys, Logger: quiet()}, func(string, *Holder) error { return nil })
	if err == nil {
		l2.Close()
		t.Fatal("Open succeeded on a read-only file system")
	}
	msg := err.Error()
	if !errors.Is(err, syscall.EROFS) || !strings.Contains(msg, path) || strings.Contains(msg, ".tmp") {
		t.Fatalf("Open: %q, want EROFS naming %s and no temporary file", msg, path)
	}
}
