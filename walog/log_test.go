package walog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// open opens the log at path and returns it with the holders it replayed.
func open(t testing.TB, path string, opts Options) (*Log, map[string]Holder) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	got := make(map[string]Holder)
	l, err := Open(path, opts, func(k string, h *Holder) error {
		if _, dup := got[k]; dup {
			return fmt.Errorf("restored twice: %q", k)
		}
		got[k] = *h
		return nil
	})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l, got
}

func holder(i int) Holder {
	return Holder{
		Source: fmt.Sprintf("svc-%d", i),
		Remote: fmt.Sprintf("10.0.0.%d:%d", i%250, 40000+i),
		Since:  time.Unix(1764500000, int64(i)*1001),
		Token:  1000 + uint64(i),
	}
}

func equalHolders(t *testing.T, got, want map[string]Holder) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replayed %d holders, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || g.Source != w.Source || g.Remote != w.Remote || !g.Since.Equal(w.Since) ||
			g.Token != w.Token || g.Session != w.Session || g.TTL != w.TTL {
			t.Fatalf("holder of %q: got %+v (present %v), want %+v", k, g, ok, w)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, got := open(t, path, Options{})
	if len(got) != 0 {
		t.Fatalf("a new log replayed %v", got)
	}
	want := make(map[string]Holder)
	for i := range 20 {
		k := fmt.Sprintf("key/%d", i)
		if err := l.Acquire(k, holder(i)); err != nil {
			t.Fatal(err)
		}
		want[k] = holder(i)
	}
	for i := 0; i < 20; i += 3 {
		k := fmt.Sprintf("key/%d", i)
		if err := l.Release(k); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}
	// Re-acquire a released key with another holder: the later record wins.
	if err := l.Acquire("key/3", holder(99)); err != nil {
		t.Fatal(err)
	}
	want["key/3"] = holder(99)
	// Unicode and the longest fields the format allows survive.
	long := strings.Repeat("é", MaxFieldLen/2)
	if err := l.Acquire(long, Holder{Source: long, Remote: "[::1]:1", Since: time.Unix(0, 1)}); err != nil {
		t.Fatal(err)
	}
	want[long] = Holder{Source: long, Remote: "[::1]:1", Since: time.Unix(0, 1)}
	if err := l.Acquire(long+"x", Holder{}); err == nil {
		t.Fatal("Acquire took a key longer than MaxFieldLen")
	}
	size := l.Stats().SizeBytes
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire("late", Holder{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != size {
		t.Fatalf("file size %v (%v), Stats said %d", fi.Size(), err, size)
	}

	_, got = open(t, path, Options{})
	equalHolders(t, got, want)
}

// build writes a log holding the given records and returns the file's bytes
// and the offset of every record.
func build(t *testing.T, path string, n int) ([]byte, []int64) {
	t.Helper()
	l, _ := open(t, path, Options{})
	for i := range n {
		k := fmt.Sprintf("key/%d", i/2)
		var err error
		if i%2 == 0 {
			err = l.Acquire(k, holder(i))
		} else {
			err = l.Release(k)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(headerSize); off < int64(len(data)); {
		offs = append(offs, off)
		off += frameSize + int64(binary.BigEndian.Uint32(data[off+4:]))
	}
	if len(offs) != n {
		t.Fatalf("found %d records, wrote %d", len(offs), n)
	}
	return data, offs
}

// wantAfter is the live set after the first n records written by build.
func wantAfter(n int) map[string]Holder {
	want := make(map[string]Holder)
	for i := range n {
		k := fmt.Sprintf("key/%d", i/2)
		if i%2 == 0 {
			want[k] = holder(i)
		} else {
			delete(want, k)
		}
	}
	return want
}

func TestTornTailAtEveryOffset(t *testing.T) {
	dir := t.TempDir()
	const records = 7 // the last one is an acquire, so cutting it shows
	data, offs := build(t, filepath.Join(dir, "full.wal"), records)
	last := offs[len(offs)-1]
	for cut := last; cut < int64(len(data)); cut++ {
		t.Run(fmt.Sprintf("cut at %d", cut), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "locks.wal")
			if err := os.WriteFile(path, data[:cut], 0o600); err != nil {
				t.Fatal(err)
			}
			l, got := open(t, path, Options{})
			equalHolders(t, got, wantAfter(records-1))
			if fi, _ := os.Stat(path); fi.Size() != last {
				t.Fatalf("torn tail not cut: size %d, want %d", fi.Size(), last)
			}
			// The log goes on from the cut, and the next start sees it.
			if err := l.Acquire("after", holder(1)); err != nil {
				t.Fatal(err)
			}
			l.Close()
			_, got = open(t, path, Options{})
			want := wantAfter(records - 1)
			want["after"] = holder(1)
			equalHolders(t, got, want)
		})
	}
	t.Run("zeroed space after the last record", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "locks.wal")
		if err := os.WriteFile(path, append(bytes.Clone(data), make([]byte, 4096)...), 0o600); err != nil {
			t.Fatal(err)
		}
		_, got := open(t, path, Options{})
		equalHolders(t, got, wantAfter(records))
		if fi, _ := os.Stat(path); fi.Size() != int64(len(data)) {
			t.Fatalf("zeroed tail not cut: size %d, want %d", fi.Size(), len(data))
		}
	})
}

func openErr(t *testing.T, data []byte) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "locks.wal")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(path, Options{Logger: quiet()}, func(string, *Holder) error { return nil })
	if err == nil {
		l.Close()
		return nil
	}
	after, rerr := os.ReadFile(path)
	if rerr != nil || !bytes.Equal(after, data) {
		t.Fatalf("a refused log was modified (%v)", rerr)
	}
	return err
}

func wantCorrupt(t *testing.T, err error, off int64) {
	t.Helper()
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
		t.Fatalf("got %v, want an error wrapping ErrCorrupt", err)
	}
	if ce.Offset != off {
		t.Fatalf("corruption reported at offset %d, want %d: %v", ce.Offset, off, err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("byte offset %d", off)) || !strings.Contains(err.Error(), "locks.wal") {
		t.Fatalf("message %q does not name the file and offset", err)
	}
}

func TestCorruptionOfEveryRecord(t *testing.T) {
	data, offs := build(t, filepath.Join(t.TempDir(), "full.wal"), 8)
	ends := append(offs[1:], int64(len(data)))
	for i, off := range offs {
		t.Run(fmt.Sprintf("record %d at %d", i, off), func(t *testing.T) {
			// Every byte of the record, the last one included: a whole
			// record is never mistaken for a torn one.
			for b := off; b < ends[i]; b++ {
				bad := bytes.Clone(data)
				bad[b] ^= 0x20
				wantCorrupt(t, openErr(t, bad), off)
			}
		})
	}
	t.Run("header", func(t *testing.T) {
		for b := range headerSize {
			bad := bytes.Clone(data)
			bad[b] ^= 0x01
			wantCorrupt(t, openErr(t, bad), 0)
		}
	})
	t.Run("unknown version", func(t *testing.T) {
		bad := bytes.Clone(data)
		bad[11] = 3
		h := castagnoliSum(bad[:12])
		copy(bad[12:16], h)
		err := openErr(t, bad)
		wantCorrupt(t, err, 0)
		if !strings.Contains(err.Error(), "version 3") {
			t.Fatalf("message %q does not name the version", err)
		}
	})
	t.Run("unknown record type", func(t *testing.T) {
		rec := appendReleaseRecord(nil, "k", 1)
		rec[frameSize] = 9
		rec = sealFrame(rec, 0)
		err := openErr(t, append(bytes.Clone(data), rec...))
		wantCorrupt(t, err, int64(len(data)))
		if !strings.Contains(err.Error(), "unknown record type 9") {
			t.Fatalf("message %q does not name the type", err)
		}
	})
	t.Run("length out of range", func(t *testing.T) {
		rec := make([]byte, frameSize)
		rec[4], rec[5], rec[6], rec[7] = 0xff, 0xff, 0xff, 0xff
		wantCorrupt(t, openErr(t, append(bytes.Clone(data), rec...)), int64(len(data)))
	})
	t.Run("garbage after zeroes", func(t *testing.T) {
		bad := append(bytes.Clone(data), make([]byte, 100)...)
		bad[len(bad)-1] = 1
		wantCorrupt(t, openErr(t, bad), int64(len(data)))
	})
	t.Run("short header", func(t *testing.T) {
		wantCorrupt(t, openErr(t, data[:headerSize-1]), 0)
	})
}

func castagnoliSum(b []byte) []byte {
	return binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, castagnoli))
}

func TestEmptyFileIsANewLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, got := open(t, path, Options{})
	if len(got) != 0 {
		t.Fatal(got)
	}
	if err := l.Acquire("a", holder(1)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, got = open(t, path, Options{})
	equalHolders(t, got, map[string]Holder{"a": holder(1)})
}

func TestStrayTempFileRemoved(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	if err := l.Acquire("a", holder(1)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := os.WriteFile(path+".tmp", []byte("half a compaction"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, map[string]Holder{"a": holder(1)})
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stray temporary file still there: %v", err)
	}
}

// TestGroupCommit holds the first fsync until 63 more records are queued
// behind it: they must all go out with one write and one fsync.
func TestGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	l, _ := open(t, path, Options{FS: fsys})
	// Through the writer goroutine, which takes no record from the queue
	// while it syncs (a lone locker writing its own would leave it
	// waiting for the log with one of them): the count below sees all 63.
	l.direct = false
	inSync := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fsys.SetFault(func(op, name string) error {
		if op == "sync" {
			once.Do(func() { close(inSync); <-release })
		}
		return nil
	})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	wg.Go(func() { errs <- l.Acquire("first", holder(0)) })
	<-inSync
	for i := range 63 {
		wg.Go(func() { errs <- l.Acquire(fmt.Sprintf("k%d", i), holder(i)) })
	}
	for len(l.queue) < 63 {
		time.Sleep(time.Millisecond) // no event marks a send; poll the queue
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	if st.Records != 64 || st.Fsyncs != 2 {
		t.Fatalf("64 records took %d fsyncs (records %d), want 2: one for the first, one for the batch", st.Fsyncs, st.Records)
	}
}

// TestLoneLockerWritesItsOwnRecord: a locker alone on an idle log writes
// its records itself instead of handing them to the writer goroutine, as
// durably as every record.
func TestLoneLockerWritesItsOwnRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	want := make(map[string]Holder)
	for i := range 10 {
		k := fmt.Sprintf("k%d", i)
		if err := l.Acquire(k, holder(i)); err != nil {
			t.Fatal(err)
		}
		want[k] = holder(i)
		if i%2 == 0 {
			if err := l.Release(k); err != nil {
				t.Fatal(err)
			}
			delete(want, k)
		}
	}
	// Only the first may go through the writer goroutine: it can hold the
	// log for a moment as it starts.
	if n := l.directBatches.Load(); n < 14 {
		t.Fatalf("%d of 15 records written by the locker itself, want all but at most the first", n)
	}
	if st := l.Stats(); st.Records != 15 || st.Fsyncs != 15 {
		t.Fatalf("%d records, %d fsyncs; want 15 and 15", st.Records, st.Fsyncs)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, want)
}

func TestCompactionKeepsTheLogSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	// One locker per key, as clients would: group commit shares the
	// fsyncs, which keeps the test fast.
	var mu sync.Mutex // guards max
	var max int64
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			k := fmt.Sprintf("key-%d", w)
			for i := range 2000 {
				if err := l.Acquire(k, holder(i)); err != nil {
					t.Error(err)
					return
				}
				if err := l.Release(k); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				max = maxInt(max, l.Stats().SizeBytes)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Leave three held.
	for i := range 3 {
		if err := l.Acquire(fmt.Sprintf("held-%d", i), holder(i)); err != nil {
			t.Fatal(err)
		}
	}
	st := l.Stats()
	if st.Compactions == 0 || max > 256<<10 {
		t.Fatalf("20,000 cycles: %d compactions, the log reached %d bytes (never past 256 KiB)", st.Compactions, max)
	}
	l.Close()
	fi, err := os.Stat(path)
	if err != nil || fi.Size() >= 1<<20 {
		t.Fatalf("log is %v bytes (%v), want under 1 MiB", fi.Size(), err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, map[string]Holder{"held-0": holder(0), "held-1": holder(1), "held-2": holder(2)})
	t.Logf("20,000 cycles on 10 keys: %d compactions, largest %d bytes, final %d bytes", st.Compactions, max, fi.Size())
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// TestCompactionKeepsRecordsWrittenDuringIt holds the compactor inside its
// first write while lockers go on; their records must reach the new log.
func TestCompactionKeepsRecordsWrittenDuringIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	l, _ := open(t, path, Options{FS: fsys, CompactFloor: 4096})
	want := make(map[string]Holder)
	for i := range 20 {
		k := fmt.Sprintf("live-%d", i)
		if err := l.Acquire(k, holder(i)); err != nil {
			t.Fatal(err)
		}
		want[k] = holder(i)
	}
	inCompaction := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fsys.SetFault(func(op, name string) error {
		if op == "write" && strings.HasSuffix(name, ".tmp") {
			once.Do(func() { close(inCompaction); <-release })
		}
		return nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-inCompaction:
				return
			default:
			}
			k := fmt.Sprintf("churn-%d", i%5)
			if err := l.Acquire(k, holder(i)); err != nil {
				t.Error(err)
				return
			}
			if err := l.Release(k); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	<-inCompaction
	<-done
	// While the compactor is stuck, the log still takes records.
	for i := range 30 {
		k := fmt.Sprintf("during-%d", i)
		if err := l.Acquire(k, holder(100+i)); err != nil {
			t.Fatal(err)
		}
		want[k] = holder(100 + i)
	}
	if err := l.Release("live-0"); err != nil {
		t.Fatal(err)
	}
	delete(want, "live-0")
	if l.Stats().Compactions != 0 {
		t.Fatal("compaction finished while its write was held")
	}
	close(release)
	for l.Stats().Compactions == 0 {
		// The writer finishes the compaction between batches; a record
		// gives it a turn.
		if err := l.Acquire("nudge", holder(7)); err != nil {
			t.Fatal(err)
		}
		if err := l.Release("nudge"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Acquire("after", holder(8)); err != nil {
		t.Fatal(err)
	}
	want["after"] = holder(8)
	l.Close()
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, want)
}

// TestPowerLossKeepsEveryAcknowledgedRecord forgets every byte not fsynced
// after a busy run with compactions: every acknowledged record is there.
func TestPowerLossKeepsEveryAcknowledgedRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	l, _ := open(t, path, Options{FS: fsys, CompactFloor: 2048})
	var mu sync.Mutex // guards want
	want := make(map[string]Holder)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			// Each writer's keys are its own; like the engine, it releases
			// a grant before the next of its key, and only a held key.
			held := make(map[string]bool)
			for i := range 200 {
				k := fmt.Sprintf("w%d-k%d", w, i%7)
				h := holder(w*1000 + i)
				if held[k] {
					if err := l.Release(k); err != nil {
						t.Error(err)
						return
					}
					held[k] = false
					mu.Lock()
					delete(want, k)
					mu.Unlock()
				}
				if i%3 == 2 {
					continue
				}
				if err := l.Acquire(k, h); err != nil {
					t.Error(err)
					return
				}
				held[k] = true
				mu.Lock()
				want[k] = h
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if l.Stats().Compactions == 0 {
		t.Fatal("no compaction happened; the test proves less than it says")
	}
	l.Close()
	if err := fsys.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, want)
}

// TestCloseDuringCompaction closes the log while the compactor is stuck in
// its write: Close waits for it, discards the temporary file, and the old
// log is whole.
func TestCloseDuringCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	l, _ := open(t, path, Options{FS: fsys, CompactFloor: 1024})
	inCompaction := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fsys.SetFault(func(op, name string) error {
		if op == "write" && strings.HasSuffix(name, ".tmp") {
			once.Do(func() { close(inCompaction); <-release })
		}
		return nil
	})
	want := map[string]Holder{}
	for i := 0; ; i++ {
		select {
		case <-inCompaction:
		default:
			k := fmt.Sprintf("k%d", i%30)
			if i >= 30 { // a key's grant is released before its next
				if err := l.Release(k); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Acquire(k, holder(i)); err != nil {
				t.Fatal(err)
			}
			want[k] = holder(i)
			continue
		}
		break
	}
	closed := make(chan error)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the compactor was still writing", err)
	case <-time.After(20 * time.Millisecond): // proving a negative: a short look
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left after Close: %v", err)
	}
	_, got := open(t, path, Options{})
	equalHolders(t, got, want)
}

// powerLossLog is a log whose last record R (a grant of "last" of about
// 1.3 KB, so that it spans four sectors) starts before bytes ahead of the
// sector boundary at 1024, behind a grant of "filler" that puts it there.
// Records in after follow R. It returns the file and R's start and end.
func powerLossLog(t *testing.T, version uint32, before int, after ...[]byte) ([]byte, int64, int64) {
	t.Helper()
	header, grant := appendHeader, appendGrantRecord
	if version == version1 {
		header, grant = appendHeaderV1, appendAcquireV1
	}
	hf := Holder{Source: "s", Remote: "r", Since: time.Unix(1, 0), Token: 1}
	data := header(nil)
	overhead := len(grant(nil, "", hf))
	data = grant(data, strings.Repeat("f", 1024-before-len(data)-overhead), hf)
	off := int64(len(data))
	if off != int64(1024-before) {
		t.Fatalf("R at %d, want %d", off, 1024-before)
	}
	data = grant(data, "last", Holder{Source: strings.Repeat("s", 600), Remote: strings.Repeat("r", 600), Since: time.Unix(2, 0), Token: 2})
	end := int64(len(data))
	for _, rec := range after {
		data = append(data, rec...)
	}
	return data, off, end
}

func zeroed(data []byte, from, to int64) []byte {
	data = bytes.Clone(data)
	clear(data[from:min(to, int64(len(data)))])
	return data
}

// TestPowerLossShapedTail: a power loss keeps any subset of the sectors of
// the one write that was not yet fsynced (the writer never starts a write
// before the previous one is fsynced), and the sectors it lost read as
// zeros. When the last record of the file is cut that way — whole frame,
// checksum failing, a sector of it all zeros, nothing but zeros after it —
// it is cut off and the start goes on, as etcd's WAL does. The same damage
// anywhere else is corruption and refuses to start.
func TestPowerLossShapedTail(t *testing.T) {
	small := appendGrantRecord(nil, "after", holder(7))
	torn := []struct {
		name    string
		version uint32
		before  int
		after   [][]byte
		bad     func(data []byte, off, end int64) []byte
	}{
		{"payload zeros from a sector boundary on", version2, 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 1536, end) }},
		{"payload zeros from a sector boundary on, file extended by zeros", version2, 100, nil,
			func(d []byte, off, end int64) []byte { return append(zeroed(d, 1536, end), make([]byte, 4096)...) }},
		{"only the final partial sector lost", version2, 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 2048, end) }},
		{"a middle sector lost, the later ones written", version2, 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 1536, 2048) }},
		{"the sector after the frame lost", version2, 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 1024, 1536) }},
		{"frame cut at a sector boundary", version2, 5, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 1024, end) }},
		{"the whole record zeros", version2, 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, off, end) }},
		{"several records in the lost write", version2, 100, [][]byte{small, small},
			func(d []byte, off, end int64) []byte { return zeroed(d, 1536, int64(len(d))) }},
		{"version 1, payload zeros from a sector boundary on", version1, 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 1536, end) }},
	}
	for _, tc := range torn {
		t.Run("torn: "+tc.name, func(t *testing.T) {
			data, off, end := powerLossLog(t, tc.version, tc.before, tc.after...)
			path := filepath.Join(t.TempDir(), "locks.wal")
			if err := os.WriteFile(path, tc.bad(data, off, end), 0o600); err != nil {
				t.Fatal(err)
			}
			l, got := open(t, path, Options{})
			if _, ok := got["last"]; ok || len(got) != 1 {
				t.Fatalf("replayed %d holders (last: %v), want only the filler", len(got), ok)
			}
			if err := l.Acquire("again", holder(3)); err != nil {
				t.Fatal(err)
			}
			l.Close()
			_, got = open(t, path, Options{})
			if _, ok := got["again"]; !ok || len(got) != 2 {
				t.Fatalf("after the cut the log did not go on: replayed %v", got)
			}
		})
	}

	corrupt := []struct {
		name   string
		before int
		after  [][]byte
		bad    func(data []byte, off, end int64) []byte
	}{
		{"a zero sector, then a whole record", 100, [][]byte{small},
			func(d []byte, off, end int64) []byte { return zeroed(d, 1536, 2048) }},
		{"a zero sector, then garbage", 100, [][]byte{{0, 0, 0, 1}},
			func(d []byte, off, end int64) []byte { return zeroed(d, 1536, 2048) }},
		{"a flipped byte in the last record", 100, nil,
			func(d []byte, off, end int64) []byte { d = bytes.Clone(d); d[off+200] ^= 0x04; return d }},
		{"frame zeros from inside a sector", 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, off+4, end) }},
		{"payload zeros inside a sector, no sector all zeros", 100, nil,
			func(d []byte, off, end int64) []byte { return zeroed(d, 1600, 1700) }},
	}
	for _, tc := range corrupt {
		t.Run("corrupt: "+tc.name, func(t *testing.T) {
			data, off, end := powerLossLog(t, version2, tc.before, tc.after...)
			wantCorrupt(t, openErr(t, tc.bad(data, off, end)), off)
		})
	}
}
