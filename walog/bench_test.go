package walog_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/bench"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/walog"
	"github.com/locking-center/locking-center/wire"
)

// lockers is the concurrency the targets are stated for.
const lockers = 64

// fsyncEach is the design group commit replaces: every record is written
// and fsynced on its own, one at a time.
type fsyncEach struct {
	mu     sync.Mutex // guards f and the file offset
	f      *os.File
	fsyncs atomic.Int64
}

// Commit writes the batch and fsyncs it before it returns, alone: the
// next batch waits for the lock.
func (j *fsyncEach) Commit(batch []locker.Change) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var rec []byte
	for _, c := range batch {
		extra := 8
		if c.Grant {
			extra += 8 + 8 + 4 + len(c.Holder.Source) + len(c.Holder.Remote)
		}
		rec = binary.BigEndian.AppendUint32(rec, uint32(len(c.Key)+extra))
		rec = append(rec, c.Key...)
		rec = append(rec, make([]byte, extra)...)
	}
	if _, err := j.f.Write(rec); err != nil {
		return err
	}
	j.fsyncs.Add(1)
	return j.f.Sync()
}

// lockUnlock runs 64 lockers, each on keys of its own, each doing a lock
// and an unlock per iteration, and reports acquires per second.
func lockUnlock(b *testing.B, table *locker.Table) {
	var next atomic.Int64
	bench.SetLockers(b, lockers)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		h := locker.Holder{Source: fmt.Sprintf("bench-%d", id), Remote: "127.0.0.1:40000"}
		keys := make([]string, 16)
		for i := range keys {
			keys[i] = fmt.Sprintf("bench/%d/%d", id, i)
		}
		for i := 0; pb.Next(); i++ {
			k := keys[i%len(keys)]
			if _, err := table.TryLock(k, h); err != nil {
				b.Error(err)
				return
			}
			if _, err := table.Unlock(k); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
}

// BenchmarkAcquire compares, in process (engine and log, no sockets), 64
// lockers on distinct keys with group commit against one fsync per record.
// Target: group commit reaches at least 10 times the acquires/s.
func BenchmarkAcquire(b *testing.B) {
	b.Run("group-commit", func(b *testing.B) {
		table, l := durableTable(b, filepath.Join(b.TempDir(), "locks.wal"), walog.Options{})
		lockUnlock(b, table)
		b.ReportMetric(float64(l.Stats().Fsyncs)/float64(b.N), "fsyncs/acquire")
	})
	b.Run("fsync-per-acquire", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "each.log"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		j := &fsyncEach{f: f}
		lockUnlock(b, locker.New(locker.Options{Journal: j}))
		b.ReportMetric(float64(j.fsyncs.Load())/float64(b.N), "fsyncs/acquire")
	})
}

// BenchmarkTCP runs 64 lockers over the real protocol (a connection per
// request), in memory and with the log. Target: with the log, at least 0.8
// times the in-memory acquires/s. The 256-locker runs show whether the gap
// is CPU (it stays) or fsync latency that more concurrency hides (it
// closes).
//
// With server and lockers in one process they share one Go scheduler, and
// a lock and an unlock each wait for about one and a half turns of the
// writer (an fsync of 200-450 µs under load plus the wait for the writer to
// be scheduled again), so the ratio here is lower than against the real
// binary: walog/crashtest's BinaryTCP is the figure the target is judged by.
func BenchmarkTCP(b *testing.B) {
	for _, n := range []int{lockers, 4 * lockers} {
		b.Run(fmt.Sprintf("lockers=%d", n), func(b *testing.B) { benchTCP(b, n) })
	}
}

func benchTCP(b *testing.B, n int) {
	b.Run("memory", func(b *testing.B) {
		tcpLockers(b, n, locker.New(locker.Options{}))
	})
	b.Run("wal", func(b *testing.B) {
		var syncing atomic.Int64
		table, l := durableTable(b, filepath.Join(b.TempDir(), "locks.wal"),
			walog.Options{OnFsync: func(d time.Duration) { syncing.Add(int64(d)) }})
		tcpLockers(b, n, table)
		st := l.Stats()
		b.ReportMetric(float64(st.Fsyncs)/float64(b.N), "fsyncs/acquire")
		b.ReportMetric(float64(syncing.Load())/float64(st.Fsyncs)/1e3, "µs/fsync")
		b.ReportMetric(float64(b.Elapsed())/float64(st.Fsyncs)/1e3, "µs/batch")
	})
}

// tcpLockers serves table over TCP and runs n lockers against it
// (bench.Lockers).
func tcpLockers(b *testing.B, n int, table *locker.Table) {
	srv := &wire.Server{Table: table, Logger: quiet()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // ended by Shutdown below
		defer close(done)
		srv.Serve(ln)
	}()
	defer func() {
		srv.Shutdown(context.Background())
		<-done
	}()
	bench.Lockers(b, ln.Addr().String(), n)
}

// BenchmarkReplay opens a log holding 1,000,000 keys and restores them
// into a table, as a start does. Target: under 3 s.
func BenchmarkReplay(b *testing.B) {
	const held = 1_000_000
	path := filepath.Join(b.TempDir(), "locks.wal")
	if err := walog.WriteTestLog(path, held, -1); err != nil {
		b.Fatal(err)
	}
	fi, _ := os.Stat(path)
	b.Run("log-only", func(b *testing.B) {
		for b.Loop() {
			n := 0
			l, err := walog.Open(path, walog.Options{Logger: quiet()}, func(string, *walog.Holder) error { n++; return nil })
			if err != nil {
				b.Fatal(err)
			}
			l.Close()
			if n != held {
				b.Fatalf("replayed %d keys, want %d", n, held)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/replay")
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
	})
	b.Run("into-table", func(b *testing.B) {
		for b.Loop() {
			table, l := durableTable(b, path, walog.Options{})
			if got := table.Stats().Held; got != held {
				b.Fatalf("restored %d keys, want %d", got, held)
			}
			l.Close()
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/replay")
	})
}

// BenchmarkCompactionStall starts a compaction of a log holding 100,000
// keys while 64 lockers lock and unlock, and reports the longest any one
// acquire or release waited. Target: under 100 ms.
func BenchmarkCompactionStall(b *testing.B) {
	const held = 100_000
	src := filepath.Join(b.TempDir(), "template.wal")
	// A few KiB short of the threshold: the lockers' own records start it.
	if err := walog.WriteTestLog(src, held, 4<<10); err != nil {
		b.Fatal(err)
	}
	template, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	var worst, sumP50, sumCompaction time.Duration
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "locks.wal")
		if err := os.WriteFile(path, template, 0o600); err != nil {
			b.Fatal(err)
		}
		table, l := durableTable(b, path, walog.Options{})
		b.StartTimer()

		start := time.Now()
		var mu sync.Mutex // guards lat
		var lat []time.Duration
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range lockers {
			wg.Go(func() {
				h := locker.Holder{Source: "bench", Remote: "127.0.0.1:1"}
				var mine []time.Duration
				defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("stall/%d/%d", w, i%8)
					t0 := time.Now()
					if _, err := table.TryLock(k, h); err != nil {
						b.Error(err)
						return
					}
					t1 := time.Now()
					if _, err := table.Unlock(k); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, t1.Sub(t0), time.Since(t1))
				}
			})
		}
		for l.Stats().Compactions == 0 && time.Since(start) < 30*time.Second {
			time.Sleep(time.Millisecond) // no event marks the end of a compaction
		}
		took := time.Since(start)
		time.Sleep(20 * time.Millisecond) // a little traffic after the switch
		close(stop)
		wg.Wait()
		if l.Stats().Compactions == 0 {
			b.Fatal("no compaction within 30 s")
		}
		if got := table.Stats().Held; got != held {
			b.Fatalf("%d keys held, want %d", got, held)
		}
		l.Close()
		slices.Sort(lat)
		worst = max(worst, lat[len(lat)-1])
		sumP50 += lat[len(lat)/2]
		sumCompaction += took
	}
	b.ReportMetric(float64(worst)/float64(time.Millisecond), "max-stall-ms")
	b.ReportMetric(float64(sumP50)/float64(b.N)/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(sumCompaction)/float64(b.N)/float64(time.Millisecond), "compaction-ms")
}
