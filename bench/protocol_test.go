package bench

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/wire"
)

// listen listens on a loopback port as main does: without keepalive on
// accepted connections (wire turns it on for waiters only).
func listen(b *testing.B) net.Listener {
	b.Helper()
	lc := net.ListenConfig{KeepAlive: -1}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func lockServer(b *testing.B) string {
	b.Helper()
	l := listen(b)
	s := &wire.Server{Table: locker.New(locker.Options{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	b.Cleanup(func() { _ = s.Shutdown(context.Background()); <-done })
	return l.Addr().String()
}

// bareServer is the floor of a one-request-per-connection protocol: accept,
// read one byte, answer one byte, close, one goroutine per connection.
func bareServer(b *testing.B) string {
	b.Helper()
	l := listen(b)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				var buf [1]byte
				if _, err := c.Read(buf[:]); err == nil {
					_, _ = c.Write([]byte{'+'})
				}
			})
		}
	})
	b.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

func bareExchange(b *testing.B, addr string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	var buf [1]byte
	if _, err := c.Write([]byte{1}); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		b.Fatal(err)
	}
	c.Close()
}

// BenchmarkCycle compares one uncontended Lock+Unlock (two connections) with
// two bare connect+1-byte exchanges, alternating them in the same run so
// that both see the same machine. It reports the ratio; the goal is <= 1.3.
func BenchmarkCycle(b *testing.B) {
	lockAddr, bareAddr := lockServer(b), bareServer(b)
	c := client.New(lockAddr)
	ctx := context.Background()
	var lockTime, bareTime time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		if err := c.Lock(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		if err := c.Unlock(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		bareExchange(b, bareAddr)
		bareExchange(b, bareAddr)
		t2 := time.Now()
		lockTime += t1.Sub(t0)
		bareTime += t2.Sub(t1)
		n++
	}
	b.ReportMetric(float64(lockTime.Microseconds())/float64(n), "µs/lock+unlock")
	b.ReportMetric(float64(bareTime.Microseconds())/float64(n), "µs/2-bare-exchanges")
	b.ReportMetric(float64(lockTime)/float64(bareTime), "ratio")
}

// BenchmarkHandover16 has 16 clients contend for one key; each grant's
// latency runs from the moment the previous holder starts its Unlock to the
// moment the next holder reads '+'.
func BenchmarkHandover16(b *testing.B) {
	addr := lockServer(b)
	const contenders = 16
	ctx := context.Background()
	var releasedAt atomic.Int64 // written only by the holder of the key
	var mu sync.Mutex           // guards samples
	var samples []time.Duration
	var grants atomic.Int64
	total := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range contenders {
		wg.Go(func() {
			c := client.New(addr)
			var mine []time.Duration
			for grants.Load() < total {
				if err := c.Lock(ctx, "hot"); err != nil {
					b.Error(err)
					return
				}
				if at := releasedAt.Load(); at != 0 {
					mine = append(mine, time.Duration(time.Now().UnixNano()-at))
				}
				grants.Add(1)
				releasedAt.Store(time.Now().UnixNano())
				if err := c.Unlock(ctx, "hot"); err != nil {
					b.Error(err)
					return
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	pct := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
