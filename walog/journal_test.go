package walog_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/walog"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// durableTable opens the log at path and a table restored from it, as
// main.go does: the table is made first, then the log replayed into it.
func durableTable(t testing.TB, path string, opts walog.Options) (*locker.Table, *walog.Log) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	j := &walog.Journal{}
	table := locker.New(locker.Options{Journal: j})
	l, err := j.Open(path, opts, table)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return table, l
}

func heldKeys(table *locker.Table) map[string]bool {
	held := make(map[string]bool)
	table.Each(func(ki locker.KeyInfo) bool {
		held[ki.Key] = true
		return true
	})
	return held
}

// TestFaultsNeverGrantWhatIsNotDurable injects each fault on the log while
// lockers run, then loses every byte not fsynced and restarts: every key a
// locker was told it holds is still held, no locker was told it holds a key
// the engine did not keep, and after the fault the log refuses everything
// (the engine answers '-') until restart.
func TestFaultsNeverGrantWhatIsNotDurable(t *testing.T) {
	faults := []struct {
		name string
		op   string
		err  error
	}{
		{"failed write", "write", walog.ErrInjected},
		{"short write", "write", walog.ErrShort},
		{"disk full", "write", walog.ErrDiskFull},
		{"failed fsync", "sync", walog.ErrInjected},
	}
	for _, fc := range faults {
		for _, powerLoss := range []bool{false, true} {
			name := fc.name
			if powerLoss {
				name += ", then power loss"
			}
			t.Run(name, func(t *testing.T) {
				testFault(t, fc.op, fc.err, powerLoss)
			})
		}
	}
}

func testFault(t *testing.T, faultOp string, faultErr error, powerLoss bool) {
	{
		{
			path := filepath.Join(t.TempDir(), "locks.wal")
			fsys := &walog.FaultFS{}
			table, l := durableTable(t, path, walog.Options{FS: fsys})
			h := locker.Holder{Source: "test", Remote: "127.0.0.1:1"}
			if _, err := table.TryLock("before", h); err != nil {
				t.Fatal(err)
			}
			if _, err := table.TryLock("released", h); err != nil {
				t.Fatal(err)
			}

			var mu sync.Mutex // guards granted and refused
			granted := make(map[string]bool)
			refused := make(map[string]bool)
			var wg sync.WaitGroup
			var faulted sync.Once
			start := make(chan struct{})
			for w := range 16 {
				wg.Go(func() {
					<-start
					for i := range 50 {
						k := fmt.Sprintf("w%d-%d", w, i)
						if w == 0 && i == 10 {
							faulted.Do(func() {
								fsys.SetFault(func(op, name string) error {
									if op == faultOp {
										return faultErr
									}
									return nil
								})
							})
						}
						_, err := table.TryLock(k, h)
						mu.Lock()
						switch {
						case err == nil:
							granted[k] = true
						case errors.Is(err, locker.ErrJournal):
							refused[k] = true
						default:
							t.Errorf("TryLock(%q): %v", k, err)
						}
						mu.Unlock()
						if err != nil {
							if _, held := table.Key(k); held {
								t.Errorf("%q refused by the journal but held", k)
							}
						}
					}
				})
			}
			close(start)
			wg.Wait()

			if len(refused) == 0 {
				t.Fatal("no acquire was refused: the fault was not hit")
			}
			if !errors.Is(l.Err(), walog.ErrFailed) {
				t.Fatalf("Err() = %v, want ErrFailed", l.Err())
			}
			if l.Stats().Errors == 0 {
				t.Fatal("Stats().Errors did not count the fault")
			}
			// fsyncgate: even with the disk healthy again, nothing is granted.
			fsys.SetFault(nil)
			if _, err := table.TryLock("after", h); !errors.Is(err, locker.ErrJournal) || !errors.Is(err, walog.ErrFailed) {
				t.Fatalf("TryLock after the fault: %v, want a journal refusal", err)
			}
			if _, err := table.Unlock("released"); !errors.Is(err, locker.ErrJournal) {
				t.Fatalf("Unlock after the fault: %v, want a journal refusal", err)
			}
			if _, held := table.Key("released"); !held {
				t.Fatal("a release that could not be recorded took effect")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := table.Lock(ctx, "lock-after", h); !errors.Is(err, locker.ErrJournal) {
				t.Fatalf("Lock after the fault: %v, want a journal refusal", err)
			}

			// A restart on a healthy disk, with or without the loss of
			// every byte not fsynced.
			l.Close()
			if powerLoss {
				if err := fsys.PowerLoss(); err != nil {
					t.Fatal(err)
				}
			}
			restarted, _ := durableTable(t, path, walog.Options{})
			held := heldKeys(restarted)
			for k := range granted {
				if !held[k] {
					t.Errorf("%q was granted ('+') but is not held after restart", k)
				}
			}
			for _, k := range []string{"before", "released"} {
				if !held[k] {
					t.Errorf("%q was held before the fault but not after restart", k)
				}
			}
			extra := 0
			for k := range held {
				if refused[k] {
					extra++ // written, fsync failed: held by nobody, the safe side
				}
			}
			t.Logf("%d granted, %d refused, %d refused keys restored as held by nobody", len(granted), len(refused), extra)
		}
	}
}

// TestFailedCompactionKeepsTheOldLog fails each step of a compaction before
// the rename: the log goes on with the old file, counts the error, and
// every acknowledged holder survives a power loss.
func TestFailedCompactionKeepsTheOldLog(t *testing.T) {
	for _, op := range []string{"write", "sync", "rename"} {
		t.Run("failed "+op, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "locks.wal")
			fsys := &walog.FaultFS{}
			table, l := durableTable(t, path, walog.Options{FS: fsys, CompactFloor: 2048})
			fsys.SetFault(func(o, name string) error {
				if o == op && (op == "rename" || strings.HasSuffix(name, ".tmp")) {
					return walog.ErrInjected
				}
				return nil
			})
			h := locker.Holder{Source: "s", Remote: "r"}
			want := make(map[string]bool)
			for i := range 400 {
				k := fmt.Sprintf("k%d", i%40)
				if want[k] {
					if _, err := table.Unlock(k); err != nil {
						t.Fatal(err)
					}
					delete(want, k)
					continue
				}
				if _, err := table.TryLock(k, h); err != nil {
					t.Fatal(err)
				}
				want[k] = true
			}
			st := l.Stats()
			if st.Errors == 0 || st.Compactions != 0 || l.Err() != nil {
				t.Fatalf("stats %+v, Err %v: want counted errors, no compaction, a healthy log", st, l.Err())
			}
			// A retry may be writing the temporary file right now; Close
			// waits for it and discards it, and nothing may be left then.
			l.Close()
			if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("temporary file left after a failed compaction: %v", err)
			}
			if err := fsys.PowerLoss(); err != nil {
				t.Fatal(err)
			}
			restarted, _ := durableTable(t, path, walog.Options{})
			if got := heldKeys(restarted); len(got) != len(want) {
				t.Fatalf("restored %v, want %v", got, want)
			}
		})
	}
}

// TestFailedFolderSyncFailsTheLog: once the rename is made, a failed fsync
// of the folder leaves the name pointing at either file after a crash, so
// the log must refuse further records.
func TestFailedFolderSyncFailsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &walog.FaultFS{}
	table, l := durableTable(t, path, walog.Options{FS: fsys, CompactFloor: 2048})
	fsys.SetFault(func(op, _ string) error {
		if op == "syncdir" {
			return syscall.EIO
		}
		return nil
	})
	h := locker.Holder{Source: "s", Remote: "r"}
	var i int
	for ; i < 10000 && l.Err() == nil; i++ {
		k := fmt.Sprintf("k%d", i%20)
		if _, err := table.TryLock(k, h); err != nil {
			break
		}
		if _, err := table.Unlock(k); err != nil {
			break
		}
	}
	if !errors.Is(l.Err(), walog.ErrFailed) {
		t.Fatalf("after %d cycles: Err() = %v, want ErrFailed", i, l.Err())
	}
	if _, err := table.TryLock("next", h); !errors.Is(err, locker.ErrJournal) {
		t.Fatalf("TryLock after a failed folder fsync: %v", err)
	}
}
