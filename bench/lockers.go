package bench

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/locking-center/locking-center/wire"
)

// Lockers is the load of the throughput benchmarks over TCP (walog's
// in-process one and walog/crashtest's against the binary): at least n
// goroutines of b.RunParallel, each locking then unlocking keys of its own
// on the server at addr, one connection per request. It resets the timer
// before the load, stops it after, and reports acquires/s.
func Lockers(b *testing.B, addr string, n int) {
	var next atomic.Int64
	b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		src := fmt.Sprintf("bench-%d", id)
		for i := 0; pb.Next(); i++ {
			k := fmt.Sprintf("bench/%d/%d", id, i%16)
			if err := request(addr, wire.Lock, k, src); err != nil {
				b.Error(err)
				return
			}
			if err := request(addr, wire.Unlock, k, src); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquires/s")
}

// request sends one frame and expects '+'. It closes with a reset (linger
// 0) once the answer is read, as the Go client does not: a benchmark making
// tens of thousands of connections a second would otherwise fill the
// kernel's TIME_WAIT table (shared with everything else on the machine)
// and measure the port search in connect(2) instead of the lock server.
func request(addr string, a wire.Action, key, source string) error {
	var buf [wire.MaxFrame]byte
	frame, err := wire.Frame{Action: a, Key: key, Source: source}.Append(buf[:0])
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
	if ans[0] != wire.AnswerOK {
		return fmt.Errorf("%v %q: answered %q", a, key, ans[0])
	}
	return nil
}
