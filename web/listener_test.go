package web

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// limitedServer serves a handler answering "ok" through o.Listener on a
// free port of 127.0.0.1, with NewHTTPServer's settings as changed by mod.
func limitedServer(t *testing.T, o Options, mod func(*http.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.Logger = slog.New(slog.DiscardHandler)
	lim := o.Listener(ln)
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	if mod != nil {
		mod(srv)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lim) }) // returns ErrServerClosed at Shutdown
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		wg.Wait()
	})
	return ln.Addr().String()
}

// keepAlive is one raw HTTP/1.1 connection that keeps itself open.
type keepAlive struct {
	c net.Conn
	r *bufio.Reader
}

func dialFrom(t *testing.T, addr, local string) *keepAlive {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &keepAlive{c: c, r: bufio.NewReader(c)}
}

// get sends one request and returns the answer's status and body.
func (k *keepAlive) get(t *testing.T) (int, string) {
	t.Helper()
	if _, err := io.WriteString(k.c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		return 0, err.Error()
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestListenerBounds: past MaxConnections, or past MaxConnectionsPerPeer
// from one address, a connection is answered 503 with the reason; a
// slot is free again once its connection closes.
func TestListenerBounds(t *testing.T) {
	addr := limitedServer(t, Options{MaxConnections: 3, MaxConnectionsPerPeer: 2}, nil)
	a1, a2 := dialFrom(t, addr, "127.0.0.1"), dialFrom(t, addr, "127.0.0.1")
	for _, k := range []*keepAlive{a1, a2} {
		if code, body := k.get(t); code != 200 || body != "ok" {
			t.Fatalf("within the bounds: %d %q", code, body)
		}
	}
	if code, body := dialFrom(t, addr, "127.0.0.1").get(t); code != 503 || !strings.Contains(body, "at most 2 connections at once from one address") {
		t.Fatalf("third from one address: %d %q", code, body)
	}
	b1 := dialFrom(t, addr, "127.0.0.2") // another peer
	if code, _ := b1.get(t); code != 200 {
		t.Fatalf("another address: %d", code)
	}
	if code, body := dialFrom(t, addr, "127.0.0.3").get(t); code != 503 || !strings.Contains(body, "at most 3 connections at once") {
		t.Fatalf("past the bound: %d %q", code, body)
	}
	// The kept-alive connections still work, and closing one frees its slot.
	if code, _ := a1.get(t); code != 200 {
		t.Fatalf("kept-alive: %d", code)
	}
	b1.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := dialFrom(t, addr, "127.0.0.3").get(t)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot of a closed connection never came back (last answer %d)", code)
		}
		time.Sleep(10 * time.Millisecond) // the server sees the close on its next read
	}
}

// TestIdleConnectionsClosed: an idle keep-alive connection is closed by
// the server after IdleTimeout and gives its slot back, so idle clients
// cannot hold the port.
func TestIdleConnectionsClosed(t *testing.T) {
	if s := NewHTTPServer(nil); s.IdleTimeout == 0 || s.ReadTimeout == 0 || s.WriteTimeout == 0 || s.ReadHeaderTimeout == 0 {
		t.Fatalf("NewHTTPServer leaves a timeout unset: %+v", s)
	}
	addr := limitedServer(t, Options{MaxConnections: 1}, func(s *http.Server) { s.IdleTimeout = 100 * time.Millisecond })
	idle := dialFrom(t, addr, "")
	if code, _ := idle.get(t); code != 200 {
		t.Fatalf("first: %d", code)
	}
	if _, err := idle.r.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF from the server closing it", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, _ := dialFrom(t, addr, "").get(t); code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle connection's slot never came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
