package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The drivers are tested against small fake servers on real loopback
// sockets, written from the protocol: the benchmark's figures mean nothing if
// its drivers speak the protocol wrong.

// listenTest listens on a free loopback port and closes it at the test's end.
func listenTest(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// serveWG runs serve for every accepted connection, one goroutine each, and
// waits for them at the test's end.
func serveWG(t *testing.T, l net.Listener, serve func(net.Conn)) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); serve(c) })
		}
	})
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
}

func TestV1ClientSendsOneFramePerConnection(t *testing.T) {
	l := listenTest(t)
	frames := make(chan []byte, 2)
	serveWG(t, l, func(c net.Conn) {
		r := bufio.NewReader(c)
		action, _ := r.ReadByte()
		ks, _ := r.ReadByte()
		key := make([]byte, ks)
		_, _ = io.ReadFull(r, key)
		ss, _ := r.ReadByte()
		src := make([]byte, ss)
		_, _ = io.ReadFull(r, src)
		frame := append([]byte{action, ks}, key...)
		frames <- append(append(frame, ss), src...)
		answer := byte('+')
		if string(key) == "busy" {
			answer = '-'
		}
		_, _ = c.Write([]byte{answer})
	})
	c := &v1Client{addr: l.Addr().String(), source: "src"}
	ctx := context.Background()
	if err := c.Lock(ctx, "k1"); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if got, want := string(<-frames), "\x01\x02k1\x03src"; got != want {
		t.Errorf("Lock frame %q, want %q", got, want)
	}
	if err := c.Unlock(ctx, "k1"); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if got, want := string(<-frames), "\x02\x02k1\x03src"; got != want {
		t.Errorf("Unlock frame %q, want %q", got, want)
	}
	if err := c.Lock(ctx, "busy"); !errors.Is(err, errRefused) {
		t.Errorf("Lock answered '-': err %v, want errRefused", err)
	}
}

// fakeSession is a session server for one connection: it checks the open
// frame, grants every Lock at once with a new token, checks that every
// Unlock carries the token of its key's grant, and answers out of order on
// request: a Lock of the key "later" is answered only after the next request
// has been answered.
type fakeSession struct {
	t       *testing.T
	refuse  bool
	reverse bool // answer the requests that arrived together in reverse order

	mu      sync.Mutex // guards unlocks
	unlocks int        // Unlocks that carried the right token
}

func (f *fakeSession) serve(c net.Conn) {
	r := bufio.NewReader(c)
	open := make([]byte, 15) // action, version, ttl, resume, sourceSize
	if _, err := io.ReadFull(r, open); err != nil {
		return
	}
	if open[0] != actOpen || open[1] != 1 {
		f.t.Errorf("open frame starts %v, want [16 1]", open[:2])
		return
	}
	if binary.BigEndian.Uint64(open[6:14]) != 0 {
		f.t.Errorf("open frame resumes a session: %v", open)
	}
	src := make([]byte, open[14]+1) // the source and authSize
	if _, err := io.ReadFull(r, src); err != nil || src[len(src)-1] != 0 {
		f.t.Errorf("open frame: source and auth %q, %v", src, err)
		return
	}
	if f.refuse {
		_, _ = c.Write(make([]byte, 13)) // status 0: not '+'
		return
	}
	ans := []byte{'+', 0, 0, 0x27, 0x10, 0, 0, 0, 0, 0, 0, 0, 7}
	if _, err := c.Write(ans); err != nil {
		return
	}
	tokens := make(map[string]uint64)
	next := uint64(100)
	var held []byte  // an answer held back for "later"
	var batch []byte // with reverse: the answers not yet written, last first
	for {
		hdr := make([]byte, 14)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		action, id, token := hdr[0], binary.BigEndian.Uint32(hdr[1:5]), binary.BigEndian.Uint64(hdr[5:13])
		key := make([]byte, hdr[13])
		if _, err := io.ReadFull(r, key); err != nil {
			return
		}
		answer := func(status byte, token uint64) []byte {
			a := binary.BigEndian.AppendUint32(nil, id)
			a = append(a, status)
			return binary.BigEndian.AppendUint64(a, token)
		}
		var out []byte
		switch action {
		case actLock:
			next++
			tokens[string(key)] = next
			out = answer('+', next)
		case actUnlock:
			if want, ok := tokens[string(key)]; ok && token == want {
				delete(tokens, string(key))
				f.mu.Lock()
				f.unlocks++
				f.mu.Unlock()
				out = answer('+', token)
			} else {
				f.t.Errorf("Unlock %q with token %d, want %d", key, token, want)
				out = answer('-', 0)
			}
		case actClose:
			_, _ = c.Write(answer('+', 0))
			return
		default:
			f.t.Errorf("unexpected action %d", action)
			out = answer('-', 0)
		}
		if string(key) == "later" && action == actLock {
			held = out
			continue
		}
		if held != nil {
			out = append(out, held...) // the held answer comes after a later one
			held = nil
		}
		if f.reverse {
			batch = append(out, batch...)
			if r.Buffered() > 0 {
				continue
			}
			out, batch = batch, nil
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

func TestSessionLockUnlockWithTokens(t *testing.T) {
	l := listenTest(t)
	f := &fakeSession{t: t}
	serveWG(t, l, f.serve)
	ctx := context.Background()
	s, err := openSession(ctx, l.Addr().String(), nil, "me", 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	c := &sessionClient{s: s, own: true, tokens: make(map[string]uint64)}
	for i := range 3 {
		key := "k" + strconv.Itoa(i)
		if err := c.Lock(ctx, key); err != nil {
			t.Fatalf("Lock %s: %v", key, err)
		}
		if err := c.Unlock(ctx, key); err != nil {
			t.Fatalf("Unlock %s: %v", key, err)
		}
	}
	if err := c.Unlock(ctx, "never-locked"); err == nil {
		t.Error("Unlock of a key never locked: no error")
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unlocks != 3 {
		t.Errorf("server saw %d Unlocks with their grant's token, want 3", f.unlocks)
	}
}

func TestSessionAnswersOutOfOrder(t *testing.T) {
	l := listenTest(t)
	f := &fakeSession{t: t}
	serveWG(t, l, f.serve)
	ctx := context.Background()
	s, err := openSession(ctx, l.Addr().String(), nil, "", 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.close()
	first := &sessionClient{s: s, tokens: make(map[string]uint64)}
	second := &sessionClient{s: s, tokens: make(map[string]uint64)}
	done := make(chan error, 1)
	go func() { done <- first.Lock(ctx, "later") }()
	// "later" is answered only after the next request's answer, so this Lock
	// must complete while the first still waits.
	waitPending(t, s, 1)
	if err := second.Lock(ctx, "now"); err != nil {
		t.Fatalf("Lock now: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Lock later: %v", err)
	}
	if first.tokens["later"] == 0 || second.tokens["now"] == 0 || first.tokens["later"] == second.tokens["now"] {
		t.Errorf("tokens later %d, now %d: each call must get its own answer", first.tokens["later"], second.tokens["now"])
	}
}

// waitPending waits until n calls are pending on s.
func waitPending(t *testing.T, s *session, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		got := len(s.pending)
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls pending, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSessionSharedByManyGoroutines(t *testing.T) {
	for _, reverse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reverse=%v", reverse), func(t *testing.T) { testSessionShared(t, reverse) })
	}
}

// testSessionShared runs many goroutines on one session; with reverse the
// server answers every batch of requests that arrived together last first,
// so that answers come out of order and the reading passes between callers.
func testSessionShared(t *testing.T, reverse bool) {
	l := listenTest(t)
	f := &fakeSession{t: t, reverse: reverse}
	serveWG(t, l, f.serve)
	ctx := context.Background()
	s, err := openSession(ctx, l.Addr().String(), nil, "", 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	const goroutines, cycles = 32, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			c := &sessionClient{s: s, tokens: make(map[string]uint64)}
			for i := range cycles {
				key := fmt.Sprintf("g%d/%d", g, i)
				if err := c.Lock(ctx, key); err != nil {
					errs <- err
					return
				}
				if err := c.Unlock(ctx, key); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := s.close(); err != nil {
		t.Errorf("close: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := goroutines * cycles; f.unlocks != want {
		t.Errorf("server saw %d good Unlocks, want %d", f.unlocks, want)
	}
}

func TestSessionOpenRefused(t *testing.T) {
	l := listenTest(t)
	f := &fakeSession{t: t, refuse: true}
	serveWG(t, l, f.serve)
	if _, err := openSession(context.Background(), l.Addr().String(), nil, "", 0); !errors.Is(err, errRefused) {
		t.Errorf("open refused: err %v, want errRefused", err)
	}
}

func TestSessionEndFailsPendingCalls(t *testing.T) {
	l := listenTest(t)
	serveWG(t, l, func(c net.Conn) {
		open := make([]byte, 16) // empty source, no auth
		if _, err := io.ReadFull(c, open); err != nil {
			return
		}
		_, _ = c.Write([]byte{'+', 0, 0, 0x27, 0x10, 0, 0, 0, 0, 0, 0, 0, 7})
		req := make([]byte, 15) // one Lock of a 1-byte key, then hang up
		_, _ = io.ReadFull(c, req)
	})
	s, err := openSession(context.Background(), l.Addr().String(), nil, "", 0)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	c := &sessionClient{s: s, tokens: make(map[string]uint64)}
	if err := c.Lock(context.Background(), "k"); err == nil {
		t.Error("Lock on a connection the server closed: no error")
	}
	if err := c.Lock(context.Background(), "k"); err == nil {
		t.Error("Lock on an ended session: no error")
	}
	_ = s.close()
}

func TestEchoFloors(t *testing.T) {
	lc, lp, ls := listenTest(t), listenTest(t), listenTest(t)
	done := make(chan error, 3)
	go func() { done <- serveEcho(lc, echoConnect) }()
	go func() { done <- serveEcho(lp, echoPersistent) }()
	go func() { done <- serveEcho(ls, echoSession) }()
	ctx := context.Background()
	cf := &connectFloor{addr: lc.Addr().String()}
	pf, err := dialPersistentFloor(ctx, lp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := openSession(ctx, ls.Addr().String(), nil, "floor", 0)
	if err != nil {
		t.Fatal(err)
	}
	sf := &sessionClient{s: sess, own: true, tokens: make(map[string]uint64)}
	for i := range 10 {
		for _, c := range []client{cf, pf, sf} {
			if err := c.Lock(ctx, ""); err != nil {
				t.Fatalf("exchange %d: %v", i, err)
			}
			if err := c.Unlock(ctx, ""); err != nil {
				t.Fatalf("exchange %d: %v", i, err)
			}
		}
	}
	// The connect floor's server closes after its answer.
	conn, err := net.Dial("tcp", lc.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = conn.Write([]byte("x"))
	if b, err := io.ReadAll(conn); err != nil || string(b) != "x" {
		t.Errorf("connect floor: read %q, %v; want one byte, then EOF", b, err)
	}
	_ = conn.Close()
	if err := sf.Close(); err != nil {
		t.Errorf("session floor: close: %v", err)
	}
	// Closing the listeners ends the servers, persistent connections included.
	_ = lc.Close()
	_ = lp.Close()
	_ = ls.Close()
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("serveEcho: %v", err)
		}
	}
	_ = pf.Close()
}

// listenTLSTest listens on a free loopback port with TLS, the certificate
// made by makeCerts, and returns the listener and the clients' config.
func listenTLSTest(t *testing.T) (net.Listener, *tls.Config) {
	t.Helper()
	certs, err := makeCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certs.certPath, certs.keyPath)
	if err != nil {
		t.Fatalf("the files makeCerts wrote do not load: %v", err)
	}
	l := tls.NewListener(listenTest(t), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	return l, clientTLS(certs.roots)
}

func TestV1ClientOverTLSResumes(t *testing.T) {
	l, conf := listenTLSTest(t)
	type seen struct {
		frame   string
		resumed bool
	}
	frames := make(chan seen, 4)
	serveWG(t, l, func(c net.Conn) {
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			t.Errorf("server handshake: %v", err)
			return
		}
		r := bufio.NewReader(c)
		hdr := make([]byte, 2)
		if _, err := io.ReadFull(r, hdr); err != nil {
			t.Errorf("read frame: %v", err)
			return
		}
		rest := make([]byte, int(hdr[1])+1)
		_, _ = io.ReadFull(r, rest)
		src := make([]byte, rest[len(rest)-1])
		_, _ = io.ReadFull(r, src)
		frames <- seen{string(hdr) + string(rest) + string(src), tc.ConnectionState().DidResume}
		_, _ = c.Write([]byte{'+'})
	})
	c := &v1Client{addr: l.Addr().String(), tls: conf, source: "src"}
	ctx := context.Background()
	for i := range 2 {
		if err := c.Lock(ctx, "k1"); err != nil {
			t.Fatalf("Lock %d: %v", i, err)
		}
		if got, want := <-frames, "\x01\x02k1\x03src"; got.frame != want {
			t.Errorf("Lock frame %q, want %q", got.frame, want)
		}
		if err := c.Unlock(ctx, "k1"); err != nil {
			t.Fatalf("Unlock %d: %v", i, err)
		}
		got := <-frames
		if want := "\x02\x02k1\x03src"; got.frame != want {
			t.Errorf("Unlock frame %q, want %q", got.frame, want)
		}
		// The first Lock shook hands in full and got a ticket; every
		// connection after it resumes from the shared cache.
		if !got.resumed {
			t.Errorf("cycle %d: the Unlock's connection did not resume the TLS session", i)
		}
	}
}

func TestSessionOverTLS(t *testing.T) {
	l, conf := listenTLSTest(t)
	f := &fakeSession{t: t}
	serveWG(t, l, f.serve)
	ctx := context.Background()
	c, err := sessionConnect(l.Addr().String(), conf)(ctx, 1)
	if err != nil {
		t.Fatalf("open over TLS: %v", err)
	}
	for i := range 3 {
		key := "k" + strconv.Itoa(i)
		if err := c.Lock(ctx, key); err != nil {
			t.Fatalf("Lock %s: %v", key, err)
		}
		if err := c.Unlock(ctx, key); err != nil {
			t.Fatalf("Unlock %s: %v", key, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unlocks != 3 {
		t.Errorf("server saw %d Unlocks with their grant's token, want 3", f.unlocks)
	}
}

func TestTLSClientRefusesAnotherCA(t *testing.T) {
	l, _ := listenTLSTest(t)
	serveWG(t, l, func(c net.Conn) { _ = c.(*tls.Conn).Handshake() })
	other, err := makeCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := &v1Client{addr: l.Addr().String(), tls: clientTLS(other.roots), source: "src"}
	var unknown x509.UnknownAuthorityError
	if err := c.Lock(context.Background(), "k"); !errors.As(err, &unknown) {
		t.Errorf("Lock against a server of another CA: err %v, want x509.UnknownAuthorityError", err)
	}
}
