//go:build unix

package wire

import (
	"context"
	"net"
	"syscall"
	"testing"

	"github.com/locking-center/locking-center/client/protocol"
)

// recordingListener hands every accepted connection, unwrapped, to conns.
type recordingListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.conns <- c
	}
	return c, err
}

func keepAliveOn(t *testing.T, c net.Conn) bool {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
	}); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v != 0
}

// TestKeepAliveOnlyWhileWaiting: behind a listener that leaves keepalive
// off, as main's does, a Lock that waits in the queue turns the probes on
// (its client may vanish without a FIN while it waits), and a connection
// that does not wait never pays for them.
func TestKeepAliveOnlyWhileWaiting(t *testing.T) {
	lc := net.ListenConfig{KeepAlive: -1}
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &recordingListener{Listener: l, conns: make(chan net.Conn, 4)}
	ts := startServerOn(t, rl, nil)

	if a := ts.ask(t, protocol.Lock, "k", "holder"); a != protocol.AnswerOK {
		t.Fatalf("Lock on a free key: %q", a)
	}
	<-rl.conns
	ts.send(t, frame(protocol.Lock, "k", "partial")[:3]) // open, still sending its frame
	partial := <-rl.conns
	waiter := ts.send(t, frame(protocol.Lock, "k", "waiter"))
	waiting := <-rl.conns
	waitUntil(t, "the waiter to queue", func() bool { return ts.queued("k") == 1 })

	if keepAliveOn(t, partial) {
		t.Error("keepalive is on for a connection that is not waiting")
	}
	if !keepAliveOn(t, waiting) {
		t.Error("keepalive is off for a connection waiting in the queue")
	}
	if a := ts.ask(t, protocol.Unlock, "k", "holder"); a != protocol.AnswerOK {
		t.Fatalf("Unlock: %q", a)
	}
	if a := answer(t, waiter); a != protocol.AnswerOK {
		t.Fatalf("waiter: %q after the unlock", a)
	}
}
