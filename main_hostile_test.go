package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// openRawSession opens a session on addr with the protocol's own frames
// and returns the connection after a '+'.
func openRawSession(t *testing.T, addr string, ttlMillis uint32) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := protocol.Open{Version: protocol.SessionVersion, TTLMillis: ttlMillis}.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ans [protocol.OpenAnswerSize]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		t.Fatalf("open answer: %v", err)
	}
	if ans[0] != protocol.AnswerOK {
		t.Fatalf("open answered %q", ans[0])
	}
	_ = c.SetReadDeadline(time.Time{})
	return c
}

// peakRSS returns the largest resident set the process pid has had.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("the server's peak memory: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// pings returns n Ping requests, back to back.
func pings(t *testing.T, n int) []byte {
	t.Helper()
	var b []byte
	for i := range n {
		var err error
		if b, err = (protocol.Request{Action: protocol.Ping, ID: uint32(i)}).Append(b); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// awaitLog waits until the server has logged a line containing what.
func awaitLog(t *testing.T, p *process, what string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.Logs(), what) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged within %v\n%s", what, within, p.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// floodBound is the growth of the server's peak memory the flood tests
// allow: a connection's own bound (docs/security.md) with room for the
// runtime's own growth.
const floodBound = 48 << 20

// TestBinarySessionFloodGetsAnswersThroughout sends Pings without pause on
// one session connection while reading on another goroutine, the way a
// hostile or merely eager client does: the answers must keep arriving in
// every interval of the flood, the connection must not be dropped, and the
// server's memory must stay bounded. 14-byte Pings never fill a 4,096-byte
// read buffer evenly, so a server that writes only when its buffer is
// empty answers nothing and grows without bound.
func TestBinarySessionFloodGetsAnswersThroughout(t *testing.T) {
	p := startBinary(t, "REQUEST_TIMEOUT=2s")
	pid := p.Cmd.Process.Pid
	before := peakRSS(t, pid)
	c := openRawSession(t, p.Addr, 60000)
	defer c.Close()

	const flood = 6 * time.Second
	const interval = 500 * time.Millisecond
	// The Pings go out in writes of a megabyte that each end in the middle
	// of a Ping, the next write carrying its rest: every frame arrives
	// whole, but what has arrived never ends on a frame's end.
	stream := pings(t, 150000) // 2,100,000 bytes: two periods of 1,050,000
	half := protocol.RequestHeaderSize / 2
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Go(func() {
		if _, err := c.Write(stream[:half]); err != nil {
			writeErr = err
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Write(stream[half : half+len(stream)/2])
			sent.Add(int64(n))
			if err != nil {
				writeErr = err
				return
			}
		}
	})

	buckets := make([]int64, flood/interval)
	start := time.Now()
	buf := make([]byte, 64<<10)
	var readErr error
	for {
		elapsed := time.Since(start)
		if elapsed >= flood {
			break
		}
		_ = c.SetReadDeadline(time.Now().Add(interval))
		n, err := c.Read(buf)
		if i := int(time.Since(start) / interval); i < len(buckets) {
			buckets[i] += int64(n)
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			readErr = err
			break
		}
	}
	close(stop)
	peak := peakRSS(t, pid)
	c.Close()
	wg.Wait()

	var answered int64
	for _, b := range buckets {
		answered += b
	}
	t.Logf("flood: %d bytes of Pings sent, %d bytes of answers read in %v; answers per %v: %v",
		sent.Load(), answered, flood, interval, buckets)
	t.Logf("server peak memory: %.1f MiB before the flood, %.1f MiB after it", float64(before)/(1<<20), float64(peak)/(1<<20))
	if readErr != nil {
		t.Fatalf("connection dropped during the flood after %d bytes of answers: %v (write: %v)\n%s", answered, readErr, writeErr, p.Logs())
	}
	for i, b := range buckets {
		if b == 0 {
			t.Errorf("no answers in interval %d of the flood (%v): %v", i, interval, buckets)
		}
	}
	if peak-before > floodBound {
		t.Errorf("the server's peak memory grew by %.1f MiB during the flood; bound %d MiB", float64(peak-before)/(1<<20), floodBound>>20)
	}
	if strings.Contains(p.Logs(), "frame incomplete") {
		t.Errorf("a whole-framed flood was dropped as incomplete:\n%s", p.Logs())
	}
}

// TestBinarySessionFloodThatNeverReads sends Pings without pause and reads
// nothing: the server must stop reading once its answers wait unwritten
// (TCP flow control then holds the sender), keep its memory bounded, and
// drop the connection once its answers cannot be written for
// REQUEST_TIMEOUT — while every other client is served.
func TestBinarySessionFloodThatNeverReads(t *testing.T) {
	p := startBinary(t, "REQUEST_TIMEOUT=2s")
	pid := p.Cmd.Process.Pid
	before := peakRSS(t, pid)
	c := openRawSession(t, p.Addr, 60000)
	defer c.Close()

	// Writes that end mid-Ping, as in the flood above.
	stream := pings(t, 6000)
	half := protocol.RequestHeaderSize / 2
	sent, err := c.Write(stream[:half])
	deadline := time.Now().Add(15 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		var n int
		n, err = c.Write(stream[half : half+len(stream)/2])
		sent += n
	}
	peak := peakRSS(t, pid)
	t.Logf("never-reading flood: %d bytes written before the writes stopped (%v)", sent, err)
	t.Logf("server peak memory: %.1f MiB before, %.1f MiB after", float64(before)/(1<<20), float64(peak)/(1<<20))
	if err == nil {
		t.Fatalf("the server kept reading for 15 s from a client that reads nothing (%d bytes)", sent)
	}
	if peak-before > floodBound {
		t.Errorf("the server's peak memory grew by %.1f MiB; bound %d MiB", float64(peak-before)/(1<<20), floodBound>>20)
	}
	// Its answers cannot be written for REQUEST_TIMEOUT (nobody reads
	// them): the server drops the connection and says so.
	awaitLog(t, p, "session answers not delivered", 20*time.Second)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, rerr := c.Read(make([]byte, 64<<10)); rerr != nil {
			if errors.Is(rerr, os.ErrDeadlineExceeded) {
				t.Fatalf("the dropped connection did not end\n%s", p.Logs())
			}
			break
		}
	}
	// Meanwhile and after, another client is served.
	if got := raw(t, p.Addr, []byte{5, 1, 'k', 0}); got != '+' {
		t.Errorf("TryLock of another client answered %q", got)
	}
}

// dialFrom opens a session from the loopback address local (127.0.0.x:
// every one of them is this host on Linux) and returns the open's status
// and session id.
func dialFrom(t *testing.T, local, addr string, resume uint64) (byte, uint64) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame, err := protocol.Open{Version: protocol.SessionVersion, TTLMillis: 600000, Resume: resume}.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [protocol.OpenAnswerSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("open answer: %v", err)
	}
	a, err := protocol.DecodeOpenAnswer(b[:])
	if err != nil {
		t.Fatal(err)
	}
	return a.Status, a.Session
}

// TestBinarySessionsCountPerAddress opens sessions from one address, each
// connection closed at once, up to MAX_CONNECTIONS_PER_PEER: one more from
// that address is refused, while another address still opens, and the
// first address can still resume its own.
func TestBinarySessionsCountPerAddress(t *testing.T) {
	p := startBinary(t, "MAX_CONNECTIONS=40", "MAX_CONNECTIONS_PER_PEER=10")
	var ids []uint64
	for i := range 10 {
		st, id := dialFrom(t, "127.0.0.1", p.Addr, 0)
		if st != protocol.AnswerOK {
			t.Fatalf("open %d from 127.0.0.1 answered %q", i+1, st)
		}
		ids = append(ids, id)
	}
	if st, _ := dialFrom(t, "127.0.0.1", p.Addr, 0); st != protocol.AnswerFail {
		t.Fatalf("the 11th session from one address answered %q; want '-'", st)
	}
	if st, _ := dialFrom(t, "127.0.0.2", p.Addr, 0); st != protocol.AnswerOK {
		t.Fatalf("a session from another address answered %q\n%s", st, p.Logs())
	}
	if st, id := dialFrom(t, "127.0.0.1", p.Addr, ids[3]); st != protocol.AnswerOK || id != ids[3] {
		t.Fatalf("resume of its own session from a full address answered %q, %x", st, id)
	}
	// A resume from another address keeps the session counted where it
	// was opened: the full address stays full.
	if st, _ := dialFrom(t, "127.0.0.3", p.Addr, ids[4]); st != protocol.AnswerOK {
		t.Fatalf("resume from another address answered %q", st)
	}
	if st, _ := dialFrom(t, "127.0.0.1", p.Addr, 0); st != protocol.AnswerFail {
		t.Fatalf("after the resumes, another open from the full address answered %q", st)
	}
	if !strings.Contains(p.Logs(), "too many sessions from this address") {
		t.Errorf("the refusal is not logged with its reason:\n%s", p.Logs())
	}
}

// TestBinaryRefusalsAreRateLimited sends 500 v1 frames to a server with
// AUTH_TOKEN set (every one is refused): the log must not get a line
// each.
func TestBinaryRefusalsAreRateLimited(t *testing.T) {
	p := startBinary(t, "AUTH_TOKEN=0123456789abcdef")
	before := strings.Count(p.Logs(), "\n")
	for range 500 {
		if got := raw(t, p.Addr, []byte{5, 1, 'k', 0}); got != '-' {
			t.Fatalf("v1 TryLock with AUTH_TOKEN set answered %q", got)
		}
	}
	lines := strings.Count(p.Logs(), "request rejected")
	t.Logf("500 refused frames, %d log lines (%d lines before)", lines, before)
	if lines == 0 || lines > 50 {
		t.Errorf("500 refused frames logged %d lines; want a few a second", lines)
	}
	if !strings.Contains(p.Logs(), "held_back=") {
		t.Errorf("the lines do not say how many were held back:\n%s", p.Logs())
	}
}
