package locker

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// rss returns the resident set size of this process after returning freed
// memory to the OS, or 0 where /proc is missing.
func rss() uint64 {
	debug.FreeOSMemory()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// TestMillionKeysLeaveNoTrace holds a million distinct keys at once, the
// worst case for the key maps, releases them, and checks the memory comes
// back: state is dropped and the maps are rebuilt after shrinking.
func TestMillionKeysLeaveNoTrace(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("skipped in -short and -race runs: a million keys under the race detector take minutes")
	}
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	startHeap, startRSS := heapInUse(), rss()
	tb := New(Options{})
	ctx := context.Background()
	h := Holder{Source: "svc", Remote: "127.0.0.1:5000"}
	for _, k := range keys {
		if _, err := tb.Lock(ctx, k, h); err != nil {
			t.Fatal(err)
		}
	}
	peakHeap := heapInUse()
	for _, k := range keys {
		if _, err := tb.Unlock(k); err != nil {
			t.Fatal(err)
		}
	}
	endHeap, endRSS := heapInUse(), rss()
	t.Logf("heap: start %d MiB, with %d keys held %d MiB, after release %d MiB; RSS start %d MiB, end %d MiB",
		startHeap>>20, n, peakHeap>>20, endHeap>>20, startRSS>>20, endRSS>>20)
	const limit = 64 << 20
	if endHeap > startHeap+limit {
		t.Errorf("heap grew by %d MiB after every key was released", (endHeap-startHeap)>>20)
	}
	if endRSS > startRSS+limit {
		t.Errorf("RSS grew by %d MiB after every key was released", (endRSS-startRSS)>>20)
	}
	runtime.KeepAlive(tb)
}

// BenchmarkHeldKeyMemory reports the heap bytes each held key costs.
func BenchmarkHeldKeyMemory(b *testing.B) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	for b.Loop() {
		before := heapInUse()
		tb := New(Options{})
		for _, k := range keys {
			// Fresh strings per key, as the server gets them off the wire.
			h := Holder{Source: strings.Clone("svc-a"), Remote: strings.Clone("127.0.0.1:54321")}
			if _, err := tb.Lock(ctx, strings.Clone(k), h); err != nil {
				b.Fatal(err)
			}
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "heap-bytes/key")
		runtime.KeepAlive(tb)
	}
}

// BenchmarkLockUnlock is the engine's uncontended fast path.
func BenchmarkLockUnlock(b *testing.B) {
	tb := New(Options{})
	ctx := context.Background()
	h := Holder{Source: "svc"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.Lock(ctx, "k", h); err != nil {
			b.Fatal(err)
		}
		if _, err := tb.Unlock("k"); err != nil {
			b.Fatal(err)
		}
	}
}
