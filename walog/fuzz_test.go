package walog_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/locking-center/locking-center/walog"
)

// sampleLog returns the bytes of a log written through the real code: a
// few grants (v1 and session), releases, and a compaction's rewrite.
func sampleLog(tb testing.TB) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "locks.wal")
	fsys := newMemFS()
	l, err := walog.Open(path, walog.Options{FS: fsys, CompactFloor: 512, Logger: quiet()}, func(string, *walog.Holder) error { return nil })
	if err != nil {
		tb.Fatal(err)
	}
	for i := range 12 {
		k := fmt.Sprintf("k%d", i%5)
		h := walog.Holder{Source: "svc", Remote: "10.0.0.1:4000", Since: time.Unix(1764500000, 0), Token: uint64(100 + i)}
		if i%3 == 0 {
			h.Session, h.TTL = 0xabcdef, 10*time.Second
		}
		if err := l.Acquire(k, h); err != nil {
			tb.Fatal(err)
		}
		if i%2 == 1 {
			if err := l.Release(k); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	fsys.mu.Lock()
	defer fsys.mu.Unlock()
	return slices.Clone(fsys.names[path].data)
}

// replayBytes opens a log holding b (as fsynced) and returns what it
// restored, or Open's error; the log is closed again.
func replayBytes(t *testing.T, fsys *memFS, path string) (map[string]walog.Holder, error) {
	got := make(map[string]walog.Holder)
	l, err := walog.Open(path, walog.Options{FS: fsys, Logger: quiet()}, func(k string, h *walog.Holder) error {
		if _, dup := got[k]; dup {
			t.Fatalf("%q restored twice", k)
		}
		got[k] = *h
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := l.Acquire("fuzz/after", walog.Holder{Source: "f", Token: l.HighToken() + 1}); err != nil {
		t.Fatalf("a log that opened refuses a record: %v", err)
	}
	if err := l.Release("fuzz/after"); err != nil {
		t.Fatalf("a log that opened refuses a release: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return got, nil
}

// FuzzReplay opens logs of arbitrary bytes (seeded with a real log and its
// damaged forms): Open never panics and never allocates past what a
// length checked against its maximum allows; it refuses with an error
// that wraps ErrCorrupt, or it opens, takes records, and a second Open of
// what it left restores the same holders.
func FuzzReplay(f *testing.F) {
	good := sampleLog(f)
	f.Add(good)
	f.Add(good[:len(good)-3])               // torn tail
	f.Add(good[:16])                        // header only
	f.Add(append(slices.Clone(good), 0, 0)) // zeros after the last record
	flipped := slices.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	f.Add(flipped)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "locks.wal")
		fsys := newMemFS()
		n := &memNode{data: slices.Clone(b), synced: slices.Clone(b)}
		fsys.names[path], fsys.synced[path] = n, n
		first, err := replayBytes(t, fsys, path)
		if err != nil {
			if !errors.Is(err, walog.ErrCorrupt) {
				t.Fatalf("Open refused with an error that is not ErrCorrupt: %v", err)
			}
			return
		}
		second, err := replayBytes(t, fsys, path)
		if err != nil {
			t.Fatalf("the log opened once, then not again: %v", err)
		}
		if len(first) != len(second) {
			t.Fatalf("first open restored %d holders, the second %d", len(first), len(second))
		}
		for k, h := range first {
			g, ok := second[k]
			if !ok || g.Token != h.Token || g.Source != h.Source || g.Session != h.Session {
				t.Fatalf("%q restored as %+v, then as %+v (present %v)", k, h, g, ok)
			}
		}
	})
}
