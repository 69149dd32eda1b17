package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// listenLoopback listens on addr, a 127.0.0.1 address.
func listenLoopback(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("echo listen %s: %w", addr, err)
	}
	return l, nil
}

// echoMode is what a floor's listener answers.
type echoMode string

// The floors' modes, in the order startEcho gives them addresses.
const (
	// echoConnect answers the first byte with one byte and closes, as a v1
	// server closes after its answer (so the closed connections wait out
	// TIME_WAIT on the server's side, as they do with Locking-Center).
	echoConnect echoMode = "connect"
	// echoPersistent answers every byte with one byte on the same
	// connection.
	echoPersistent echoMode = "persistent"
	// echoSession speaks the session protocol's framing and answers every
	// request '+' at once, locking nothing.
	echoSession echoMode = "session"
)

var echoModes = []echoMode{echoConnect, echoPersistent, echoSession}

// serveEcho serves mode on l, one goroutine per connection. It returns when
// l is closed, once every connection's goroutine has ended.
func serveEcho(l net.Listener, mode echoMode) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	var mu sync.Mutex // guards conns
	conns := make(map[net.Conn]struct{})
	defer func() {
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("echo accept: %w", err)
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				_ = c.Close()
			}()
			if mode == echoSession {
				serveSessionFloor(c)
				return
			}
			var b [1]byte
			for {
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				if _, err := c.Write(b[:]); err != nil || mode == echoConnect {
					return
				}
			}
		})
	}
}

// serveSessionFloor answers a session's open frame '+' and then every
// request '+' with token 1, writing the answers to the requests that arrived
// together in one write; Close is answered and ends the connection. It
// checks nothing it need not: it is a floor, not a server.
func serveSessionFloor(c net.Conn) {
	r := bufio.NewReaderSize(c, 16<<10)
	head := make([]byte, 15) // action, version, ttl, resume, sourceSize
	if _, err := io.ReadFull(r, head); err != nil {
		return
	}
	if _, err := r.Discard(int(head[14])); err != nil { // source
		return
	}
	authSize, err := r.ReadByte()
	if err != nil {
		return
	}
	if _, err := r.Discard(int(authSize)); err != nil {
		return
	}
	open := []byte{answerOK, 0, 0, 0xea, 0x60, 0, 0, 0, 0, 0, 0, 0, 1} // TTL 60 s, session 1
	if _, err := c.Write(open); err != nil {
		return
	}
	out := make([]byte, 0, 4096)
	hdr := make([]byte, 14) // action, id, token, keySize
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		if size := int8(hdr[13]); size > 0 { // a negative size has no key bytes
			if _, err := r.Discard(int(size)); err != nil {
				return
			}
		}
		out = append(out, hdr[1:5]...) // the id
		out = append(out, answerOK, 0, 0, 0, 0, 0, 0, 0, 1)
		if hdr[0] == actClose || r.Buffered() == 0 {
			if _, err := c.Write(out); err != nil || hdr[0] == actClose {
				return
			}
			out = out[:0]
		}
	}
}
