package walog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/bench"
)

// The writer syncs its batches through SyncAppend when the file has it.
var _ appendSyncer = osFile{}

// TestSyncAppend makes a small append durable with one processor and with
// several (the two paths of the Linux build), and reports a failure with
// the file's name, as Sync does.
func TestSyncAppend(t *testing.T) {
	for _, procs := range []int{1, 2} {
		prev := runtime.GOMAXPROCS(procs)
		f, err := OSFS{}.OpenFile(filepath.Join(t.TempDir(), "log"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("record")); err != nil {
			t.Fatal(err)
		}
		err = f.(appendSyncer).SyncAppend()
		f.Close()
		runtime.GOMAXPROCS(prev)
		if err != nil {
			t.Errorf("GOMAXPROCS %d: SyncAppend: %v", procs, err)
		}
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	err = osFile{File: w, name: w.Name()}.SyncAppend()
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Path != w.Name() {
		t.Errorf("SyncAppend on a pipe: %v, want an error naming %s", err, w.Name())
	}
	if runtime.GOOS == "linux" && !errors.Is(err, syscall.EINVAL) {
		t.Errorf("SyncAppend on a pipe: %v, want EINVAL", err)
	}

	c, err := os.CreateTemp(t.TempDir(), "closed")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := (osFile{File: c, name: c.Name()}).SyncAppend(); !errors.As(err, &pe) || pe.Path != c.Name() {
		t.Errorf("SyncAppend on a closed file: %v, want an error naming %s", err, c.Name())
	}
}

// countingFS is OSFS whose files count their fsyncs by kind. With fake
// set they only pretend to sync, taking delay, and call onAppendSync (when
// set) from every SyncAppend.
type countingFS struct {
	OSFS
	sync, syncAppend atomic.Int64
	fake             bool
	delay            atomic.Int64 // nanoseconds
	onAppendSync     atomic.Pointer[func()]
}

type countingFile struct {
	osFile
	fs *countingFS
}

func (fsys *countingFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fsys.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countingFile{f.(osFile), fsys}, nil
}

func (f countingFile) Sync() error { return f.count(&f.fs.sync, f.osFile.Sync) }

func (f countingFile) SyncAppend() error {
	if hook := f.fs.onAppendSync.Load(); hook != nil && f.fs.fake {
		(*hook)()
	}
	return f.count(&f.fs.syncAppend, f.osFile.SyncAppend)
}

// count counts one fsync in n and makes it with sync, or only pretends.
func (f countingFile) count(n *atomic.Int64, sync func() error) error {
	n.Add(1)
	if f.fs.fake {
		time.Sleep(time.Duration(f.fs.delay.Load()))
		return nil
	}
	return sync()
}

// setQuickSync sets quickSync for one test.
func setQuickSync(t *testing.T, d time.Duration) {
	prev := quickSync
	quickSync = d
	t.Cleanup(func() { quickSync = prev })
}

// TestBatchesUseSyncAppend: every batch of records is synced with
// SyncAppend while fsyncs are quick, and only the log's creation and its
// compactions (whole files written at once) with Sync.
func TestBatchesUseSyncAppend(t *testing.T) {
	setQuickSync(t, time.Hour) // whatever this machine's disk does
	fsys := &countingFS{}
	l, _ := open(t, filepath.Join(t.TempDir(), "locks.wal"), Options{FS: fsys, CompactFloor: 4 << 10})
	created := fsys.sync.Load()
	for i := range 200 {
		k := fmt.Sprintf("key-%d", i%10)
		if err := l.Acquire(k, holder(i)); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Compactions == 0 {
		t.Fatal("no compaction: the test cannot tell the two kinds apart")
	}
	if got := uint64(fsys.syncAppend.Load()); got != st.Fsyncs {
		t.Errorf("%d SyncAppend calls for %d batches", got, st.Fsyncs)
	}
	// A compaction syncs its temporary file twice: the snapshot, then
	// with the records written meanwhile; one more may have written its
	// snapshot when Close discarded it.
	if got, max := fsys.sync.Load()-created, 2*int64(st.Compactions)+1; got == 0 || got > max {
		t.Errorf("%d Sync calls for %d compactions, want 1..%d", got, st.Compactions, max)
	}
}

// TestSlowSyncsGoThroughTheScheduler: after a batch whose fsync took
// longer than quickSync the next is synced with Sync, and once an fsync is
// quick again the one after goes back to SyncAppend.
func TestSlowSyncsGoThroughTheScheduler(t *testing.T) {
	setQuickSync(t, 200*time.Millisecond)
	fsys := &countingFS{fake: true}
	l, _ := open(t, filepath.Join(t.TempDir(), "locks.wal"), Options{FS: fsys})
	acquire := func(i int) {
		t.Helper()
		if err := l.Acquire(fmt.Sprintf("key-%d", i), holder(i)); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() [2]int64 { return [2]int64{fsys.syncAppend.Load(), fsys.sync.Load()} }
	base := counts()
	want := func(step string, appends, syncs int64) {
		t.Helper()
		if got := counts(); got != [2]int64{base[0] + appends, base[1] + syncs} {
			t.Fatalf("%s: %d SyncAppend and %d Sync calls, want %d and %d",
				step, got[0]-base[0], got[1]-base[1], appends, syncs)
		}
	}
	acquire(0)
	want("quick disk", 1, 0)
	fsys.delay.Store(int64(250 * time.Millisecond))
	acquire(1) // still after a quick one: SyncAppend, which is slow
	want("first slow fsync", 2, 0)
	acquire(2)
	acquire(3)
	want("after a slow fsync", 2, 2)
	fsys.delay.Store(0)
	acquire(4) // after a slow one: Sync, which is quick
	acquire(5)
	want("quick again", 3, 3)
}

// TestAnsweredCallersRunFirst: the callers a batch answers run before the
// writer starts the next batch's fsync, which may keep the writer's
// processor for its whole length (syncAppend). With one processor the
// order shows: caller A's fsync is held until caller B's record is queued,
// and when B's batch is synced A must have returned. The Go scheduler
// takes from its global queue first once in 61 turns, so a round may see
// the writer first; without the writer stepping aside, every round does.
func TestAnsweredCallersRunFirst(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	setQuickSync(t, time.Hour) // A's fsync, held for the test, is slow
	fsys := &countingFS{fake: true}
	l, _ := open(t, filepath.Join(t.TempDir(), "locks.wal"), Options{FS: fsys})
	l.direct = false // A's and B's records go through the writer goroutine
	const rounds = 40
	first := 0
	for i := range rounds {
		var returned, ranFirst atomic.Bool
		held, proceed := make(chan struct{}), make(chan struct{})
		syncs := 0 // touched by the writer goroutine only
		hook := func() {
			switch syncs++; syncs {
			case 1: // A's batch
				close(held)
				<-proceed
			case 2: // B's batch
				ranFirst.Store(returned.Load())
			}
		}
		fsys.onAppendSync.Store(&hook)
		errA, errB := make(chan error, 1), make(chan error, 1)
		go func() { // ends when A's record is answered
			err := l.Acquire(fmt.Sprintf("a-%d", i), holder(i))
			returned.Store(true)
			errA <- err
		}()
		<-held
		go func() { errB <- l.Acquire(fmt.Sprintf("b-%d", i), holder(i)) }() // ends when B's is answered
		for len(l.queue) == 0 {
			runtime.Gosched() // until B's record waits for the writer
		}
		close(proceed)
		if err := errors.Join(<-errA, <-errB); err != nil {
			t.Fatal(err)
		}
		if n := fsys.syncAppend.Load(); n != int64(2*(i+1)) {
			t.Fatalf("round %d: %d fsyncs so far, want %d: A and B shared a batch", i, n, 2*(i+1))
		}
		if ranFirst.Load() {
			first++
		}
	}
	if first < rounds/2 {
		t.Errorf("the answered caller had returned before the next fsync in %d of %d rounds, want most", first, rounds)
	}
}

// BenchmarkFdatasync measures a 1,000-byte write (about a busy batch) and
// its fdatasync, in wall and CPU time: appended, as the log's batches are
// (the file grows, so the fsync also commits the new size to the file
// system's journal), and overwriting blocks written before, as a
// pre-zeroed reserve at the end of the log would.
func BenchmarkFdatasync(b *testing.B) {
	rec := make([]byte, 1000)
	for _, mode := range []string{"append", "overwrite"} {
		b.Run(mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "synced"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if mode == "overwrite" {
				if err := writeSync(osFile{File: f, name: f.Name()}, make([]byte, b.N*len(rec)), f.Name()); err != nil {
					b.Fatal(err)
				}
			}
			cpu := bench.ProcessCPU()
			b.ResetTimer()
			for i := range b.N {
				if mode == "append" {
					_, err = f.Write(rec)
				} else {
					_, err = f.WriteAt(rec, int64(i*len(rec)))
				}
				if err == nil {
					err = syncFile(f)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(bench.ProcessCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}
