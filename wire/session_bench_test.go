package wire

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/walog"
)

// benchPeer is a minimal session client for benchmarks: one request at a
// time on its own connection.
type benchPeer struct {
	c   net.Conn
	buf []byte
	ans [AnswerSize]byte
	id  uint32
}

func (ts *testServer) benchPeer(b *testing.B) *benchPeer {
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	o, _ := Open{Version: SessionVersion}.Append(nil)
	c.Write(o)
	var a [OpenAnswerSize]byte
	if _, err := io.ReadFull(c, a[:]); err != nil || a[0] != AnswerOK {
		b.Fatalf("open: %x %v", a, err)
	}
	return &benchPeer{c: c}
}

func (p *benchPeer) call(b *testing.B, a Action, token uint64, key string) Answer {
	p.id++
	p.buf, _ = Request{Action: a, ID: p.id, Token: token, Key: key}.Append(p.buf[:0])
	if _, err := p.c.Write(p.buf); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(p.c, p.ans[:]); err != nil {
		b.Fatal(err)
	}
	ans, _ := DecodeAnswer(p.ans[:])
	return ans
}

func (p *benchPeer) cycle(b *testing.B, key string) {
	got := p.call(b, Lock, 0, key)
	if got.Status != AnswerOK {
		b.Fatalf("Lock %q: %+v", key, got)
	}
	if got = p.call(b, Unlock, got.Token, key); got.Status != AnswerOK {
		b.Fatalf("Unlock %q: %+v", key, got)
	}
}

// BenchmarkSessionCycle is one client's Lock+Unlock of fresh keys on a
// session, in process over loopback TCP (workload A of bench-compare).
func BenchmarkSessionCycle(b *testing.B) {
	ts := startServer(b, nil)
	p := ts.benchPeer(b)
	key := make([]byte, 0, 32)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key = fmt.Appendf(key[:0], "k/%d", i)
		p.cycle(b, string(key))
	}
}

// BenchmarkSessionParallel is 32 sessions cycling on their own keys
// (workload B).
func BenchmarkSessionParallel(b *testing.B) {
	ts := startServer(b, nil)
	var next atomic.Int64
	b.SetParallelism(16) // 32 goroutines on 2 processors
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		p := ts.benchPeer(b)
		g := next.Add(1)
		key := make([]byte, 0, 32)
		for i := 0; pb.Next(); i++ {
			key = fmt.Appendf(key[:0], "p%d/%d", g, i)
			p.cycle(b, string(key))
		}
	})
}

// BenchmarkSessionDurable is 64 sessions cycling on their own keys with
// the write-ahead log (workload D, 64 lockers), beside the same in memory.
func BenchmarkSessionDurable(b *testing.B) {
	for _, durable := range []bool{false, true} {
		name := "memory"
		if durable {
			name = "wal"
		}
		b.Run(name, func(b *testing.B) {
			ts := startServer(b, func(s *Server) {
				if !durable {
					return
				}
				j := &walog.Journal{}
				s.Table = locker.New(locker.Options{Journal: j})
				l, err := j.Open(filepath.Join(b.TempDir(), "locks.wal"), walog.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, s.Table)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					st := l.Stats()
					if st.Fsyncs > 0 {
						b.ReportMetric(float64(st.Records)/float64(st.Fsyncs), "records/fsync")
					}
					l.Close()
				})
			})
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 processors
			b.RunParallel(func(pb *testing.PB) {
				p := ts.benchPeer(b)
				g := next.Add(1)
				key := make([]byte, 0, 32)
				for i := 0; pb.Next(); i++ {
					key = fmt.Appendf(key[:0], "d%d/%d", g, i)
					p.cycle(b, string(key))
				}
			})
		})
	}
}
