package client_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/wire"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serve starts a real protocol server on a loopback port.
func serve(t testing.TB) (addr string, table *locker.Table) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	table = locker.New(locker.Options{})
	s := &wire.Server{Table: table, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		<-done
	})
	return l.Addr().String(), table
}

func waitQueued(t *testing.T, table *locker.Table, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ki, ok := table.Key(key); ok && ki.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d waiters on %q", n, key)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestVectors checks that the client puts exactly the shared vectors' bytes
// on the wire and refuses the invalid ones before connecting.
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("../wire/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
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
			buf := make([]byte, 0, 2*wire.MaxFrame)
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for {
				var b [wire.MaxFrame]byte
				n, err := c.Read(b[:])
				buf = append(buf, b[:n]...)
				if _, _, derr := wire.Decode(buf); derr == nil || err != nil {
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
		if wire.Action(f.Action) == wire.ResetByKey && f.Source != "" {
			t.Fatalf("%s: the Go client sends no source with ResetByKey", f.Name)
		}
		c := client.New(l.Addr().String(), client.WithSource(f.Source))
		if err = call(ctx, c, wire.Action(f.Action), f.Key, f.Source); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if b := <-got; hex.EncodeToString(b) != f.Hex {
			t.Fatalf("%s: sent %x, want %s", f.Name, b, f.Hex)
		}
	}
	dead := "127.0.0.1:1" // nothing listens: a refusal must come before connecting
	for _, f := range v.Invalid {
		c := client.New(dead, client.WithSource(f.Source))
		err := call(ctx, c, wire.Action(f.Action), f.Key, f.Source)
		if !errors.Is(err, client.ErrRefused) || errors.Is(err, client.ErrUnreachable) {
			t.Errorf("%s: err = %v, want ErrRefused before connecting", f.Name, err)
		}
	}
}

// call makes the client call for action a.
func call(ctx context.Context, c *client.Client, a wire.Action, key, source string) error {
	switch a {
	case wire.Lock:
		return c.Lock(ctx, key)
	case wire.Unlock:
		return c.Unlock(ctx, key)
	case wire.ResetByKey:
		return c.ResetByKey(ctx, key)
	case wire.ResetBySource:
		return c.ResetBySource(ctx, source)
	case wire.TryLock:
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
	addr, table := serve(t)
	ctx := context.Background()
	a := client.New(addr, client.WithSource("a"))
	if err := a.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- client.New(addr, client.WithSource("b")).Lock(wctx, "k") }()
	waitQueued(t, table, "k", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	waitQueued(t, table, "k", 0)

	tctx, tcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer tcancel()
	if err := a.Lock(tctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline = %v", err)
	}
	waitQueued(t, table, "k", 0)
}

// TestGrantCrossingTheHangUp: a scripted server that answers the waiting
// Lock only after the client gave up, as the real one does when the grant
// and the hang-up cross on the wire. The client must read that '+' and
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
			frames := make(chan wire.Frame, 4)
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
							_, _ = c.Write([]byte{wire.AnswerOK})
						case "silence":
							select { // keep the connection open, answering nothing
							case <-ended:
							case <-time.After(10 * time.Second):
							}
						}
					} else {
						_, _ = c.Write([]byte{wire.AnswerOK})
					}
					c.Close()
				}
			}()
			defer func() { close(ended); l.Close(); <-served }()

			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- client.New(l.Addr().String()).Lock(ctx, "k") }()
			if f := <-frames; f.Action != wire.Lock || f.Key != "k" {
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
				if f.Action != wire.Unlock || f.Key != "k" {
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
func readFrame(c net.Conn) (wire.Frame, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var buf []byte
	b := make([]byte, 1)
	for {
		f, _, err := wire.Decode(buf)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, wire.ErrShort) {
			return f, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return f, err
		}
		buf = append(buf, b[0])
	}
}

func TestResetWhileWaiting(t *testing.T) {
	addr, table := serve(t)
	ctx := context.Background()
	c := client.New(addr)
	if err := c.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Lock(ctx, "k") }()
	waitQueued(t, table, "k", 1)
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
	addr, table := serve(t)
	ctx := context.Background()
	c := client.New(addr)
	boom := errors.New("boom")
	err := c.Do(ctx, "k", func() error {
		if _, held := table.Key("k"); !held {
			t.Error("Do ran fn without holding the key")
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if _, held := table.Key("k"); held {
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

func exampleServer() (string, func()) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s := &wire.Server{Table: locker.New(locker.Options{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	return l.Addr().String(), func() { _ = s.Shutdown(context.Background()); <-done }
}

// TestDoPanics: a panic in fn must not leave the key held: Do unlocks,
// then the panic goes on.
func TestDoPanics(t *testing.T) {
	addr, table := serve(t)
	c := client.New(addr)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = c.Do(context.Background(), "k", func() error { panic("boom") })
	}()
	if _, held := table.Key("k"); held {
		t.Fatal("Do left the key held after fn panicked")
	}
}

// TestUnlockAnswerLost: a server that reads the Unlock and closes without
// answering. The outcome is unknown, Unlock says so and does not send it
// again (a second Unlock could free whoever took the key since).
func TestUnlockAnswerLost(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	frames := make(chan wire.Frame, 4)
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
	err = client.New(l.Addr().String()).Unlock(context.Background(), "k")
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Unlock whose answer was lost = %v, want ErrOutcomeUnknown", err)
	}
	l.Close()
	<-done
	close(frames)
	if n := len(frames); n != 1 {
		t.Fatalf("the server received %d Unlock frames, want 1", n)
	}
}
