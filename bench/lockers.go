package bench

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// Lockers is the load of the throughput benchmarks over TCP (walog's
// in-process one and walog/crashtest's against the binary): at least n
// goroutines of b.RunParallel, each locking then unlocking keys of its own
// on the server at addr, one connection per request. It resets the timer
// before the load, stops it after, and reports acquires/s.
func Lockers(b *testing.B, addr string, n int) {
	var next atomic.Int64
	SetLockers(b, n)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		for i := 0; pb.Next(); i++ {
			if err := cycle(addr, id, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
}

// SetLockers makes b.RunParallel run at least n goroutines.
func SetLockers(b *testing.B, n int) {
	b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
}

// Alternating runs the load of Lockers (n lockers, keys of their own)
// against each of addrs in turn, slice acquires at a time, until b.N
// acquires are done between them, and returns each server's acquires per
// second.
//
// Why: Lockers run one after the other compare two moments of the machine,
// and a VM's speed drifts by several per cent within a minute. Taking turns
// every few hundred milliseconds spreads that drift over every server
// alike, so the ratio of two servers is measured, not the drift. The
// lockers wait for each other at the end of a turn; at a few milliseconds
// against a turn's hundreds, that costs every server about the same.
func Alternating(b *testing.B, n, slice int, addrs ...string) []float64 {
	took := make([]time.Duration, len(addrs))
	done := make([]int, len(addrs))
	share := max(1, b.N/len(addrs))
	b.ResetTimer()
	for done[0] < share {
		for i, addr := range addrs {
			k := min(slice, share-done[i])
			start := time.Now()
			if err := turnOf(addr, n, k); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
			done[i] += k
		}
	}
	b.StopTimer()
	perSecond := make([]float64, len(addrs))
	for i := range addrs {
		perSecond[i] = float64(done[i]) / took[i].Seconds()
	}
	return perSecond
}

// turnOf runs n lockers against addr until they have made acquires lock
// cycles between them, and returns the first error.
func turnOf(addr string, n, acquires int) error {
	var left atomic.Int64
	left.Store(int64(acquires))
	errs := make(chan error, n)
	for id := range n {
		go func() { // ends when the turn's acquires are used up or one fails
			for i := 0; left.Add(-1) >= 0; i++ {
				if err := cycle(addr, int64(id), i); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cycle is locker id's i-th lock cycle: Lock, then Unlock, of one of its
// own sixteen keys.
func cycle(addr string, id int64, i int) error {
	k := fmt.Sprintf("bench/%d/%d", id, i%16)
	src := fmt.Sprintf("bench-%d", id)
	if err := request(addr, protocol.Lock, k, src); err != nil {
		return err
	}
	return request(addr, protocol.Unlock, k, src)
}

// request sends one frame and expects '+'. It closes with a reset (linger
// 0) once the answer is read, as the Go client does not: a benchmark making
// tens of thousands of connections a second would otherwise fill the
// kernel's TIME_WAIT table (shared with everything else on the machine)
// and measure the port search in connect(2) instead of the lock server.
func request(addr string, a protocol.Action, key, source string) error {
	var buf [protocol.MaxFrame]byte
	frame, err := protocol.Frame{Action: a, Key: key, Source: source}.Append(buf[:0])
	if err != nil {
		return err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(frame); err != nil {
		return err
	}
	var ans [1]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		return fmt.Errorf("%v %q: %w", a, key, err)
	}
	c.(*net.TCPConn).SetLinger(0)
	if ans[0] != protocol.AnswerOK {
		return fmt.Errorf("%v %q: answered %q", a, key, ans[0])
	}
	return nil
}
