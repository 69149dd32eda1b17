package client_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if code == 0 {
		if leaked := leakedGoroutines(); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutine(s) of the client or its tests outlived the tests:\n\n%s\n", len(leaked), strings.Join(leaked, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of the goroutines that run, or were
// started by, code of this module (the client, its tests and their fake
// servers), once they have had 5s to end. It is the standard library's
// stand-in for a leak-checking package, so that the client module requires
// nothing at all, not even for its tests: goroutines of the runtime and
// the testing package are not the client's and are not counted.
func leakedGoroutines() []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<16)
		for {
			n := runtime.Stack(buf, true)
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		var leaked []string
		for i, g := range strings.Split(string(buf), "\n\n") {
			if i == 0 { // the dump starts with this goroutine's own stack
				continue
			}
			if strings.Contains(g, "github.com/locking-center/locking-center/client") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serve starts the real server on loopback ports; its JSON API shows the
// lock table to the tests.
func serve(t *testing.T) (addr string, srv *realServer) {
	t.Helper()
	srv = startReal(t)
	return srv.addr, srv
}

// waitQueued waits until key is held with n waiters behind its holder.
func waitQueued(t *testing.T, srv *realServer, key string, n int) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d waiters on %q", n, key), func() bool { return srv.waiters(key) == n })
}

// held reports whether key is held, as the JSON API shows it.
func held(srv *realServer, key string) bool { return srv.key(key) != nil }

// vectorsPath is the shared vector file: $LC_VECTORS (clients/run-tests
// sets it), else the repository's copy, the one every client reads.
func vectorsPath() string {
	if p := os.Getenv("LC_VECTORS"); p != "" {
		return p
	}
	return filepath.Join("..", "wire", "testdata", "vectors.json")
}

// TestVectors checks that the client puts exactly the shared vectors' bytes
// on the wire and refuses the invalid ones before connecting.
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile(vectorsPath())
	if err != nil {
		t.Fatalf("the shared test vectors (set LC_VECTORS outside the repository): %v", err)
	}
	var v struct {
		Frames []struct {
			Name   string
			Action int
			Key    string
			Source string
			Hex    string
		}
		Invalid []struct {
			Name   string
			Action int
			Key    string
			Source string
		}
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan []byte)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(got)
				return
			}
			// Read until a whole frame is in, then a little more to catch
			// stray bytes after it.
			buf := make([]byte, 0, 2*protocol.MaxFrame)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				var b [protocol.MaxFrame]byte
				n, err := c.Read(b[:])
				buf = append(buf, b[:n]...)
				if _, _, derr := protocol.Decode(buf); derr == nil || err != nil {
					break
				}
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			var extra [8]byte
			n, _ := c.Read(extra[:])
			buf = append(buf, extra[:n]...)
			_, _ = c.Write([]byte{'+'})
			c.Close()
			got <- buf
		}
	}()
	ctx := context.Background()
	for _, f := range v.Frames {
		if protocol.Action(f.Action) == protocol.ResetByKey && f.Source != "" {
			t.Fatalf("%s: the Go client sends no source with ResetByKey", f.Name)
		}
		c := client.New(l.Addr().String(), client.WithSource(f.Source))
		if err = call(ctx, c, protocol.Action(f.Action), f.Key, f.Source); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if b := <-got; hex.EncodeToString(b) != f.Hex {
			t.Fatalf("%s: sent %x, want %s", f.Name, b, f.Hex)
		}
	}
	dead := "127.0.0.1:1" // nothing listens: a refusal must come before connecting
	for _, f := range v.Invalid {
		c := client.New(dead, client.WithSource(f.Source))
		err := call(ctx, c, protocol.Action(f.Action), f.Key, f.Source)
		if !errors.Is(err, client.ErrRefused) || errors.Is(err, client.ErrUnreachable) {
			t.Errorf("%s: err = %v, want ErrRefused before connecting", f.Name, err)
		}
	}
}

// call makes the client call for action a.
func call(ctx context.Context, c *client.Client, a protocol.Action, key, source string) error {
	switch a {
	case protocol.Lock:
		return c.Lock(ctx, key)
	case protocol.Unlock:
		return c.Unlock(ctx, key)
	case protocol.ResetByKey:
		return c.ResetByKey(ctx, key)
	case protocol.ResetBySource:
		return c.ResetBySource(ctx, source)
	case protocol.TryLock:
		return c.TryLock(ctx, key)
	}
	return fmt.Errorf("no client call for action %d", a)
}

func TestLockTryLockUnlock(t *testing.T) {
	addr, _ := serve(t)
	ctx := context.Background()
	a := client.New(addr, client.WithSource("a"))
	if err := a.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := a.TryLock(ctx, "k"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock on a held key = %v, want ErrLocked", err)
	}
	if err := a.Unlock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx, "k"); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("Unlock of a free key = %v, want ErrRefused", err)
	}
	if err := a.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := a.TryLock(ctx, "k"); err != nil {
		t.Fatalf("TryLock after Wait: %v (Wait must leave the key free)", err)
	}
}

func TestCancelWithdrawsWaiter(t *testing.T) {
	addr, srv := serve(t)
	ctx := context.Background()
	a := client.New(addr, client.WithSource("a"))
	if err := a.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- client.New(addr, client.WithSource("b")).Lock(wctx, "k") }()
	waitQueued(t, srv, "k", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	waitQueued(t, srv, "k", 0)

	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer tcancel()
	if err := a.Lock(tctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline = %v", err)
	}
	waitQueued(t, srv, "k", 0)
}

// TestGrantCrossingTheHangUp: a scripted server that answers the waiting
// Lock only after the client gave up, as the real one does when the grant
// and the hang-up cross on the protocol. The client must read that '+' and
// unlock the key on a new connection, still returning ctx's error; with no
// grant it must send nothing more; and from a server that neither answers
// nor closes it must still return once hangUpGrace has passed.
func TestGrantCrossingTheHangUp(t *testing.T) {
	for _, after := range []string{"grant", "close", "silence"} {
		t.Run(after, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			frames := make(chan protocol.Frame, 4)
			served, ended := make(chan struct{}), make(chan struct{})
			go func() { // ends when the listener is closed below
				defer close(served)
				for i := 0; ; i++ {
					c, err := l.Accept()
					if err != nil {
						return
					}
					f, err := readFrame(c)
					if err != nil {
						t.Errorf("fake server: %v", err)
						c.Close()
						return
					}
					frames <- f
					if i == 0 {
						_, _ = io.Copy(io.Discard, c) // a waiter until the client hangs up
						switch after {
						case "grant":
							_, _ = c.Write([]byte{protocol.AnswerOK})
						case "silence":
							select { // keep the connection open, answering nothing
							case <-ended:
							case <-time.After(10 * time.Second):
							}
						}
					} else {
						_, _ = c.Write([]byte{protocol.AnswerOK})
					}
					c.Close()
				}
			}()
			defer func() { close(ended); l.Close(); <-served }()

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- client.New(l.Addr().String()).Lock(ctx, "k") }()
			if f := <-frames; f.Action != protocol.Lock || f.Key != "k" {
				t.Fatalf("first frame %+v, want Lock k", f)
			}
			cancel()
			gaveUp := time.Now()
			if err := <-errc; !errors.Is(err, context.Canceled) || err.Error() != context.Canceled.Error() {
				t.Fatalf("cancelled Lock = %v, want just context.Canceled", err)
			}
			if took := time.Since(gaveUp); after == "silence" && (took < client.HangUpGrace*9/10 || took > client.HangUpGrace+3*time.Second) {
				t.Errorf("from a silent server Lock returned %v after giving up, want about %v", took, client.HangUpGrace)
			}
			// The give-back, if any, was answered before Lock returned.
			select {
			case f := <-frames:
				if after != "grant" {
					t.Fatalf("sent %+v after giving up with no grant", f)
				}
				if f.Action != protocol.Unlock || f.Key != "k" {
					t.Fatalf("after the crossing grant: %+v, want Unlock k", f)
				}
			default:
				if after == "grant" {
					t.Fatal("the grant that crossed the hang-up was not unlocked again")
				}
			}
		})
	}
}

// readFrame reads one whole frame from c.
func readFrame(c net.Conn) (protocol.Frame, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var buf []byte
	b := make([]byte, 1)
	for {
		f, _, err := protocol.Decode(buf)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, protocol.ErrShort) {
			return f, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return f, err
		}
		buf = append(buf, b[0])
	}
}

func TestResetWhileWaiting(t *testing.T) {
	addr, srv := serve(t)
	ctx := context.Background()
	c := client.New(addr)
	if err := c.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Lock(ctx, "k") }()
	waitQueued(t, srv, "k", 1)
	if err := c.ResetByKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, client.ErrReset) {
		t.Fatalf("Lock reset while waiting = %v, want ErrReset", err)
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	err = client.New(addr).Lock(context.Background(), "k")
	if !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Lock with no server = %v, want ErrUnreachable", err)
	}
}

func TestDo(t *testing.T) {
	addr, srv := serve(t)
	ctx := context.Background()
	c := client.New(addr)
	boom := errors.New("boom")
	err := c.Do(ctx, "k", func() error {
		if !held(srv, "k") {
			t.Error("Do ran fn without holding the key")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if held(srv, "k") {
		t.Fatal("Do left the key held after fn failed")
	}
}

// Example shows the scoped form against a server on this machine.
func Example() {
	addr, stop := exampleServer()
	defer stop()

	c := client.New(addr, client.WithSource("billing"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	err := c.Do(ctx, "invoices/2026-11", func() error {
		fmt.Println("closing the month, alone")
		return nil
	})
	fmt.Println("err:", err)

	if err := c.TryLock(ctx, "invoices/2026-11"); err == nil {
		fmt.Println("the key was free again")
		_ = c.Unlock(ctx, "invoices/2026-11")
	}
	// Output:
	// closing the month, alone
	// err: <nil>
	// the key was free again
}

// exampleServer starts the real server for an example, which has no
// testing.T to fail: it panics when the server cannot start.
func exampleServer() (string, func()) {
	s := newRealServer()
	if err := s.launch(); err != nil {
		s.stop()
		panic(err)
	}
	return s.addr, s.stop
}

// TestDoPanics: a panic in fn must not leave the key held: Do unlocks,
// then the panic goes on.
func TestDoPanics(t *testing.T) {
	addr, srv := serve(t)
	c := client.New(addr)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = c.Do(context.Background(), "k", func() error { panic("boom") })
	}()
	if held(srv, "k") {
		t.Fatal("Do left the key held after fn panicked")
	}
}

// TestUnlockAnswerLost: a server that reads the Unlock and closes without
// answering. The outcome is unknown, Unlock says so and does not send it
// again (a second Unlock could free whoever took the key since), nor to
// another address of the list; a reset, a Lock and a TryLock likewise.
func TestUnlockAnswerLost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	frames := make(chan protocol.Frame, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if f, err := readFrame(c); err == nil {
				frames <- f
			}
			c.Close()
		}
	}()
	// In a list with a second address that would answer: a frame that was
	// sent is not sent to another node either.
	other, _ := serve(t)
	c := client.New(l.Addr().String() + "," + other)
	ctx := context.Background()
	sent := 0
	for range 8 { // random order: the silent node comes first in some
		for _, call := range []struct {
			name string
			do   func() error
		}{
			{"Unlock", func() error { return c.Unlock(ctx, "k") }},
			{"ResetByKey", func() error { return c.ResetByKey(ctx, "k") }},
			{"Lock", func() error { return c.Lock(ctx, "k") }},
			{"TryLock", func() error { return c.TryLock(ctx, "k") }},
		} {
			switch err := call.do(); {
			case err == nil && (call.name == "Lock" || call.name == "TryLock"): // the real server's grant
				if err := client.New(other).Unlock(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			case err == nil || errors.Is(err, client.ErrRefused) && call.name == "Unlock": // the real server's answer
			case errors.Is(err, client.ErrOutcomeUnknown) && errors.Is(err, client.ErrUnreachable):
				sent++
			default:
				t.Fatalf("%s through a silent server and a real one = %v, want ErrOutcomeUnknown or the real answer", call.name, err)
			}
		}
	}
	l.Close()
	<-done
	close(frames)
	if n := len(frames); n != sent {
		t.Fatalf("the silent server received %d frames for %d calls whose answer was lost, want one each", n, sent)
	}
	if sent == 0 {
		t.Fatal("no call went to the silent server in 32")
	}
}
