package wire

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/tlsconf/tlstest"
	"github.com/locking-center/locking-center/walog"
)

// benchPeer is a minimal session client for benchmarks: one request at a
// time on its own connection.
type benchPeer struct {
	c   net.Conn
	buf []byte
	ans [protocol.AnswerSize]byte
	id  uint32
}

func (ts *testServer) benchPeer(b *testing.B) *benchPeer {
	c := ts.dial(b) // inside TLS for the *TLS benchmarks
	o, _ := protocol.Open{Version: protocol.SessionVersion}.Append(nil)
	c.Write(o)
	var a [protocol.OpenAnswerSize]byte
	if _, err := io.ReadFull(c, a[:]); err != nil || a[0] != protocol.AnswerOK {
		b.Fatalf("open: %x %v", a, err)
	}
	return &benchPeer{c: c}
}

func (p *benchPeer) call(b *testing.B, a protocol.Action, token uint64, key string) protocol.Answer {
	p.id++
	p.buf, _ = protocol.Request{Action: a, ID: p.id, Token: token, Key: key}.Append(p.buf[:0])
	if _, err := p.c.Write(p.buf); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(p.c, p.ans[:]); err != nil {
		b.Fatal(err)
	}
	ans, _ := protocol.DecodeAnswer(p.ans[:])
	return ans
}

func (p *benchPeer) cycle(b *testing.B, key string) {
	got := p.call(b, protocol.Lock, 0, key)
	if got.Status != protocol.AnswerOK {
		b.Fatalf("Lock %q: %+v", key, got)
	}
	if got = p.call(b, protocol.Unlock, got.Token, key); got.Status != protocol.AnswerOK {
		b.Fatalf("Unlock %q: %+v", key, got)
	}
}

// BenchmarkSessionCycle is one client's Lock+Unlock of fresh keys on a
// session, in process over loopback TCP (workload A of bench-compare).
func BenchmarkSessionCycle(b *testing.B) {
	benchSessionCycle(b, startServer(b, nil))
}

// BenchmarkSessionCycleTLS is BenchmarkSessionCycle inside TLS 1.3.
func BenchmarkSessionCycleTLS(b *testing.B) {
	benchSessionCycle(b, startBenchTLS(b))
}

// startBenchTLS serves TLS with a certificate of a CA made here (ECDSA
// P-256, as tlstest makes them) and dials with that CA.
func startBenchTLS(b *testing.B) *testServer {
	ca := tlstest.NewCA(b, "bench CA")
	leaf := ca.Issue(b, tlstest.Options{})
	ts := startServer(b, func(s *Server) {
		s.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{leaf.TLS}}
	})
	ts.tls = &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	return ts
}

func benchSessionCycle(b *testing.B, ts *testServer) {
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
	benchSessionParallel(b, startServer(b, nil))
}

// BenchmarkSessionParallelTLS is BenchmarkSessionParallel inside TLS 1.3.
func BenchmarkSessionParallelTLS(b *testing.B) {
	benchSessionParallel(b, startBenchTLS(b))
}

func benchSessionParallel(b *testing.B, ts *testServer) {
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

// BenchmarkV1Cycle is one v1 client's Lock+Unlock of fresh keys: two
// connections a cycle, each with its handshake inside TLS; "resumed"
// resumes a TLS session from the client's ticket cache, as a client with
// a tls.ClientSessionCache does.
func BenchmarkV1Cycle(b *testing.B) {
	for _, mode := range []string{"plain", "tls", "tls-resumed"} {
		b.Run(mode, func(b *testing.B) {
			ts := startServer(b, nil)
			if mode != "plain" {
				ts = startBenchTLS(b)
			}
			if mode == "tls-resumed" {
				ts.tls.ClientSessionCache = tls.NewLRUClientSessionCache(8)
			}
			key := make([]byte, 0, 32)
			var ans [1]byte
			ask := func(a protocol.Action, k string) {
				c, err := net.Dial("tcp", ts.addr)
				if err != nil {
					b.Fatal(err)
				}
				if ts.tls != nil {
					c = tls.Client(c, ts.tls)
				}
				if _, err := c.Write(frame(a, k, "bench")); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, ans[:]); err != nil || ans[0] != protocol.AnswerOK {
					b.Fatalf("%s %q: %q %v", a, k, ans[0], err)
				}
				c.Close()
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				key = fmt.Appendf(key[:0], "v1/%d", i)
				ask(protocol.Lock, string(key))
				ask(protocol.Unlock, string(key))
			}
		})
	}
}
