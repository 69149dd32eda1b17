package client_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
)

// The tests in this file run a Session against a scripted peer on
// net.Pipe: each test plays the server's side frame by frame, so that
// losses, crossings and refusals happen exactly where the test puts them.

// fakeNet hands the session's connections to the test.
type fakeNet struct {
	conns   chan net.Conn
	refused chan struct{} // a dial failed (capacity 1)
	mu      sync.Mutex    // guards down
	down    bool          // dials fail, as with a server that is away
}

func newFakeNet() *fakeNet {
	return &fakeNet{conns: make(chan net.Conn, 4), refused: make(chan struct{}, 1)}
}

// awaitDial waits until a dial has failed: the session noticed its drop
// and is resuming.
func (n *fakeNet) awaitDial(t *testing.T) {
	t.Helper()
	select {
	case <-n.refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not try to reconnect")
	}
}

func (n *fakeNet) dial(ctx context.Context, _ string) (net.Conn, error) {
	n.mu.Lock()
	down := n.down
	n.mu.Unlock()
	if down {
		select {
		case n.refused <- struct{}{}:
		default:
		}
		return nil, errors.New("connection refused (fake)")
	}
	c, s := net.Pipe()
	select {
	case n.conns <- s:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (n *fakeNet) setDown(down bool) {
	n.mu.Lock()
	n.down = down
	n.mu.Unlock()
}

// peer is the server's end of one session connection.
type peer struct {
	t      *testing.T
	c      net.Conn
	ttlMS  uint32
	resume uint64
	source string
	auth   string
}

// accept takes the next connection and reads its open frame.
func (n *fakeNet) accept(t *testing.T) *peer {
	t.Helper()
	var c net.Conn
	select {
	case c = <-n.conns:
	case <-time.After(10 * time.Second):
		t.Fatal("the session made no connection")
	}
	p := &peer{t: t, c: c}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	h := p.read(14)
	if h[0] != 16 || h[1] != 1 {
		t.Fatalf("open frame starts %x, want 10 01", h[:2])
	}
	p.ttlMS = binary.BigEndian.Uint32(h[2:6])
	p.resume = binary.BigEndian.Uint64(h[6:14])
	p.source = string(p.read(int(p.read(1)[0])))
	p.auth = string(p.read(int(p.read(1)[0])))
	return p
}

func (p *peer) read(n int) []byte {
	p.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(p.c, b); err != nil {
		p.t.Fatalf("fake server read: %v", err)
	}
	return b
}

func (p *peer) write(b []byte) {
	p.t.Helper()
	if _, err := p.c.Write(b); err != nil {
		p.t.Fatalf("fake server write: %v", err)
	}
}

// opened answers the open frame.
func (p *peer) opened(status byte, ttlMS uint32, id uint64) {
	p.t.Helper()
	b := []byte{status}
	b = binary.BigEndian.AppendUint32(b, ttlMS)
	p.write(binary.BigEndian.AppendUint64(b, id))
}

type request struct {
	action byte
	id     uint32
	token  uint64
	key    string
}

func (p *peer) request() request {
	p.t.Helper()
	h := p.read(14)
	return request{
		action: h[0],
		id:     binary.BigEndian.Uint32(h[1:5]),
		token:  binary.BigEndian.Uint64(h[5:13]),
		key:    string(p.read(int(h[13]))),
	}
}

// next reads requests, answering Pings, until one that is not a Ping.
func (p *peer) next() request {
	p.t.Helper()
	for {
		r := p.request()
		if r.action != 7 {
			return r
		}
		p.answer(r.id, '+', 0)
	}
}

func (p *peer) expect(action byte, key string) request {
	p.t.Helper()
	r := p.next()
	if r.action != action || r.key != key {
		p.t.Fatalf("request %+v, want action %d key %q", r, action, key)
	}
	return r
}

func (p *peer) answer(id uint32, status byte, token uint64) {
	p.t.Helper()
	b := binary.BigEndian.AppendUint32(nil, id)
	b = append(b, status)
	p.write(binary.BigEndian.AppendUint64(b, token))
}

// open starts a session on a fake peer with the given TTL.
func openFake(t *testing.T, ttlMS uint32, opts ...client.Option) (*client.Session, *peer, *fakeNet) {
	t.Helper()
	n := newFakeNet()
	type opened struct {
		s   *client.Session
		err error
	}
	res := make(chan opened, 1)
	go func() {
		s, err := client.NewSession(context.Background(), "fake:1",
			append([]client.Option{client.WithDialFunc(n.dial)}, opts...)...)
		res <- opened{s, err}
	}()
	p := n.accept(t)
	p.opened('+', ttlMS, 0xc0ffee)
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_ = o.s.Close(ctx) // the fake may be gone: a local end is enough
	})
	return o.s, p, n
}

type lockResult struct {
	token uint64
	err   error
}

func goLock(s *client.Session, ctx context.Context, key string) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		tok, err := s.Lock(ctx, key)
		ch <- lockResult{tok, err}
	}()
	return ch
}

func TestSessionOpenFrame(t *testing.T) {
	s, p, _ := openFake(t, 4000, client.WithSource("svc"), client.WithAuthToken("pw"), client.WithTTL(4*time.Second))
	if p.ttlMS != 4000 || p.resume != 0 || p.source != "svc" || p.auth != "pw" {
		t.Fatalf("open frame: ttl %d resume %x source %q auth %q", p.ttlMS, p.resume, p.source, p.auth)
	}
	if s.ID() != 0xc0ffee || s.TTL() != 4*time.Second {
		t.Fatalf("ID %x TTL %v, want c0ffee 4s", s.ID(), s.TTL())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err of a live session: %v", err)
	}
}

func TestSessionRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer []byte
	}{
		{"refused", append([]byte{'-'}, make([]byte, 12)...)},
		{"v1 server", []byte{'-'}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newFakeNet()
			errc := make(chan error, 1)
			go func() {
				_, err := client.NewSession(context.Background(), "fake:1", client.WithDialFunc(n.dial))
				errc <- err
			}()
			p := n.accept(t)
			p.write(c.answer)
			p.c.Close()
			if err := <-errc; !errors.Is(err, client.ErrRefused) {
				t.Fatalf("NewSession = %v, want ErrRefused", err)
			}
		})
	}
}

// TestSessionOutOfOrder checks a request's bytes and that answers are
// matched by id whatever their order.
func TestSessionOutOfOrder(t *testing.T) {
	s, p, _ := openFake(t, 60000)
	ctx := context.Background()
	a := goLock(s, ctx, "a")
	ra := p.expect(1, "a")
	b := goLock(s, ctx, "bb")
	raw := p.read(14 + 2)
	if raw[0] != 1 || raw[13] != 2 || string(raw[14:]) != "bb" || hex.EncodeToString(raw[5:13]) != "0000000000000000" {
		t.Fatalf("Lock bb frame %x", raw)
	}
	idb := binary.BigEndian.Uint32(raw[1:5])
	if idb == ra.id {
		t.Fatal("two pending requests with one id")
	}
	p.answer(idb, '+', 22)
	p.answer(ra.id, '+', 11)
	if r := <-b; r.err != nil || r.token != 22 {
		t.Fatalf("Lock bb = %+v, want token 22", r)
	}
	if r := <-a; r.err != nil || r.token != 11 {
		t.Fatalf("Lock a = %+v, want token 11", r)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Unlock(ctx, "a", 11) }()
	u := p.expect(2, "a")
	if u.token != 11 {
		t.Fatalf("Unlock token %d, want 11", u.token)
	}
	p.answer(u.id, '-', 0)
	if err := <-errc; !errors.Is(err, client.ErrNotHeld) || !errors.Is(err, client.ErrRefused) {
		t.Fatalf("Unlock answered '-' = %v, want ErrNotHeld", err)
	}
	tc := make(chan error, 1)
	go func() { _, err := s.TryLock(ctx, "bb"); tc <- err }()
	tr := p.expect(5, "bb")
	p.answer(tr.id, '#', 0)
	if err := <-tc; !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock answered '#' = %v, want ErrLocked", err)
	}
}

// TestSessionCancelCrossesGrant: the Lock's ctx ends, Cancel goes out
// naming it, Lock returns ctx's error at once; the '+' that crossed the
// Cancel is unlocked by its token.
func TestSessionCancelCrossesGrant(t *testing.T) {
	s, p, _ := openFake(t, 60000)
	ctx, cancel := context.WithCancel(context.Background())
	res := goLock(s, ctx, "k")
	l := p.expect(1, "k")
	cancel()
	c := p.next()
	if c.action != 6 || c.id != l.id || c.key != "" {
		t.Fatalf("after the cancel: %+v, want Cancel of id %d", c, l.id)
	}
	if r := <-res; !errors.Is(r.err, context.Canceled) || r.token != 0 {
		t.Fatalf("cancelled Lock = %+v", r)
	}
	p.answer(l.id, '+', 99) // granted before the Cancel arrived
	u := p.expect(2, "k")
	if u.token != 99 {
		t.Fatalf("give-back Unlock token %d, want 99", u.token)
	}
	p.answer(u.id, '+', 99)
}

// TestSessionDropAndResume: a connection lost with a Lock waiting and an
// Unlock unanswered. The Unlock fails with ErrOutcomeUnknown; the Lock
// goes on waiting. The session resumes with its id, and the first requests
// on the new connection are the settling of the Unlock (by its token),
// then the Lock reissued with its old id — whose grant, made before the
// drop, the server answers at once — before the request queued meanwhile.
func TestSessionDropAndResume(t *testing.T) {
	s, p, n := openFake(t, 60000)
	ctx := context.Background()
	h := goLock(s, ctx, "held")
	hr := p.expect(1, "held")
	p.answer(hr.id, '+', 5)
	if r := <-h; r.err != nil {
		t.Fatal(r.err)
	}
	w := goLock(s, ctx, "waiting")
	wr := p.expect(1, "waiting")
	uerr := make(chan error, 1)
	go func() { uerr <- s.Unlock(ctx, "held", 5) }()
	p.expect(2, "held")
	n.setDown(true)
	p.c.Close()
	if err := <-uerr; !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("Unlock unanswered at the drop = %v, want ErrOutcomeUnknown", err)
	}
	later := goLock(s, ctx, "later") // waits for the new connection
	n.setDown(false)
	p2 := n.accept(t)
	if p2.resume != 0xc0ffee {
		t.Fatalf("reconnected with resume %x, want the session id", p2.resume)
	}
	p2.opened('+', 60000, 0xc0ffee)
	u := p2.next()
	if u.action != 2 || u.key != "held" || u.token != 5 {
		t.Fatalf("first after the resume: %+v; want the Unlock of 'held' token 5", u)
	}
	p2.answer(u.id, '-', 0)
	re := p2.expect(1, "waiting")
	if re.id != wr.id {
		t.Fatalf("the Lock was reissued with id %d; it was sent with %d", re.id, wr.id)
	}
	p2.answer(re.id, '+', 4) // the grant made before the drop
	if r := <-w; r.err != nil || r.token != 4 {
		t.Fatalf("reissued Lock = %+v; want its grant, token 4", r)
	}
	l := p2.expect(1, "later")
	if l.id == re.id {
		t.Fatalf("a new request took the id %d of a held grant", l.id)
	}
	p2.answer(l.id, '+', 6)
	if r := <-later; r.err != nil || r.token != 6 {
		t.Fatalf("Lock queued during the resume = %+v", r)
	}
	if s.Err() != nil {
		t.Fatalf("resumed session reports %v", s.Err())
	}
}

// TestSessionReissueGivenUp: a Lock lost with its connection whose caller
// gives up before the resume is still reissued (a grant may have been
// made for it) and withdrawn at once; the grant the reissue finds is given
// back by its token.
func TestSessionReissueGivenUp(t *testing.T) {
	s, p, n := openFake(t, 60000)
	ctx, cancel := context.WithCancel(context.Background())
	w := goLock(s, ctx, "k")
	first := p.expect(1, "k")
	n.setDown(true)
	p.c.Close()
	// Wait until the drop is noticed (the session dials again), then give up.
	n.awaitDial(t)
	cancel()
	if r := <-w; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("given-up Lock = %+v", r)
	}
	n.setDown(false)
	p2 := n.accept(t)
	p2.opened('+', 60000, 0xc0ffee)
	re := p2.expect(1, "k")
	if re.id != first.id {
		t.Fatalf("reissued with id %d, sent with %d", re.id, first.id)
	}
	c := p2.next()
	if c.action != 6 || c.id != re.id {
		t.Fatalf("after the given-up reissue: %+v; want its Cancel", c)
	}
	p2.answer(re.id, '+', 9) // it had been granted
	u := p2.expect(2, "k")
	if u.token != 9 {
		t.Fatalf("give-back Unlock token %d, want 9", u.token)
	}
	p2.answer(u.id, '+', 9)
}

// TestSessionResumeRefused: the server refuses the resume; the session is
// lost, Done fires, Do's function sees its ctx end, and calls fail.
func TestSessionResumeRefused(t *testing.T) {
	s, p, n := openFake(t, 60000)
	ctx := context.Background()
	doErr := make(chan error, 1)
	inFn := make(chan struct{})
	go func() {
		doErr <- s.Do(ctx, "k", func(ctx context.Context, token uint64) error {
			close(inFn)
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), client.ErrSessionLost) {
				t.Errorf("Do's ctx cause = %v, want ErrSessionLost", context.Cause(ctx))
			}
			return nil
		})
	}()
	l := p.expect(1, "k")
	p.answer(l.id, '+', 1)
	<-inFn
	p.c.Close()
	p2 := n.accept(t)
	p2.opened('-', 0, 0)
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after a refused resume")
	}
	if err := s.Err(); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrSessionLost", err)
	}
	if err := <-doErr; !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Do = %v, want it to report the lost session", err)
	}
	if _, err := s.Lock(ctx, "k"); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Lock on a lost session = %v", err)
	}
	if err := s.Close(ctx); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Close of a lost session = %v", err)
	}
}

// TestSessionTTLPasses: the server stays away; the session is lost about
// one TTL after the server last answered, not later.
func TestSessionTTLPasses(t *testing.T) {
	s, p, n := openFake(t, 600)
	start := time.Now()
	n.setDown(true)
	p.c.Close()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session not lost 5s after its 600ms TTL")
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("lost after %v, want within the 600ms TTL (and a little)", d)
	}
	if err := s.Err(); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Err = %v", err)
	}
}

// TestSessionPing: an idle session pings after a third of its TTL; a Ping
// left unanswered drops the connection and the session resumes.
func TestSessionPing(t *testing.T) {
	_, p, n := openFake(t, 900)
	start := time.Now()
	r := p.request()
	if r.action != 7 {
		t.Fatalf("idle session sent %+v, want Ping", r)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 600*time.Millisecond {
		t.Errorf("first Ping after %v, want about 300ms (a third of the TTL)", d)
	}
	p.answer(r.id, '+', 0)
	r = p.request()
	if r.action != 7 {
		t.Fatalf("second request %+v, want Ping", r)
	}
	// Leave it unanswered: the session gives the connection up.
	p2 := n.accept(t)
	if p2.resume != 0xc0ffee {
		t.Fatalf("after an unanswered Ping: open with resume %x", p2.resume)
	}
	p2.opened('+', 900, 0xc0ffee)
}

// TestSessionClose: Close sends Close; the server refuses the pending
// Lock and answers '+'; the Lock reports the close, Err is
// ErrSessionClosed, and later calls fail.
func TestSessionClose(t *testing.T) {
	s, p, _ := openFake(t, 60000)
	ctx := context.Background()
	w := goLock(s, ctx, "k")
	l := p.expect(1, "k")
	cerr := make(chan error, 1)
	go func() { cerr <- s.Close(ctx) }()
	c := p.expect(8, "")
	p.answer(l.id, '-', 0)
	p.answer(c.id, '+', 0)
	p.c.Close()
	if err := <-cerr; err != nil {
		t.Fatalf("Close = %v", err)
	}
	if r := <-w; !errors.Is(r.err, client.ErrSessionClosed) {
		t.Fatalf("Lock refused by the Close = %v, want ErrSessionClosed", r.err)
	}
	if !errors.Is(s.Err(), client.ErrSessionClosed) {
		t.Fatalf("Err after Close = %v", s.Err())
	}
	if _, err := s.TryLock(ctx, "k"); !errors.Is(err, client.ErrSessionClosed) {
		t.Fatalf("TryLock after Close = %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

// TestSessionDoPanics: a panic in fn unlocks the key, then goes on.
func TestSessionDoPanics(t *testing.T) {
	s, p, _ := openFake(t, 60000)
	recovered := make(chan any, 1)
	go func() {
		defer func() { recovered <- recover() }()
		_ = s.Do(context.Background(), "k", func(context.Context, uint64) error { panic("boom") })
	}()
	l := p.expect(1, "k")
	p.answer(l.id, '+', 42)
	u := p.expect(2, "k")
	if u.token != 42 {
		t.Fatalf("Unlock after the panic has token %d, want 42", u.token)
	}
	p.answer(u.id, '+', 42)
	if r := <-recovered; r != "boom" {
		t.Fatalf("recovered %v, want the panic to go on after the unlock", r)
	}
}

// TestSessionPendingBound: the session never has more requests awaiting
// an answer than the server allows on one connection.
func TestSessionPendingBound(t *testing.T) {
	s, p, _ := openFake(t, 60000)
	ctx, cancel := context.WithCancel(context.Background())
	const n = 1100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, _ = s.Lock(ctx, "k"+string(rune('a'+i%26))) })
	}
	var ids []uint32
	for len(ids) < 1023 {
		r := p.next()
		if r.action != 1 {
			t.Fatalf("request %+v, want a Lock", r)
		}
		ids = append(ids, r.id)
	}
	// No 1024th Lock may come before an answer frees a place.
	_ = p.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [1]byte
	if _, err := p.c.Read(b[:]); err == nil {
		t.Fatal("a request beyond the pending bound was sent")
	}
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	p.answer(ids[0], '-', 0)
	r := p.next()
	if r.action != 1 {
		t.Fatalf("after a place was freed: %+v, want the next Lock", r)
	}
	cancel()
	p.c.Close()
	wg.Wait()
}

// TestSessionLostAtTTLWhileConnected: the server keeps the connection but
// neither reads nor answers. The session counts itself lost one TTL after
// the send of the last frame answered (the open), connected or not — not
// sooner, and not a write timeout or a resume later.
func TestSessionLostAtTTLWhileConnected(t *testing.T) {
	before := time.Now()
	s, _, _ := openFake(t, 1000)
	after := time.Now()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session not lost 5s after its 1s TTL")
	}
	lost := time.Now()
	if lost.Sub(before) < time.Second {
		t.Errorf("lost %v after the open was sent, before its 1s TTL", lost.Sub(before))
	}
	if d := lost.Sub(after); d > 1300*time.Millisecond {
		t.Errorf("lost %v after the open was answered, want the 1s TTL (and a little)", d)
	}
	if err := s.Err(); !errors.Is(err, client.ErrSessionLost) {
		t.Fatalf("Err = %v", err)
	}
}
