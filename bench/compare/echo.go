package main

import (
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

// serveEcho answers every byte it reads with one byte, one goroutine per
// connection. When persistent is false it answers only the first byte and
// closes the connection, as a v1 server closes after its answer (so the
// closed connections wait out TIME_WAIT on the server's side, as they do
// with Locking-Center, not the client's). It returns when l is closed, once
// every connection's goroutine has ended.
func serveEcho(l net.Listener, persistent bool) error {
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
			var b [1]byte
			for {
				if _, err := io.ReadFull(c, b[:]); err != nil {
					return
				}
				if _, err := c.Write(b[:]); err != nil || !persistent {
					return
				}
			}
		})
	}
}
