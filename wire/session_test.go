package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
)

// The session codec and its vectors are tested with the codec, in
// client/protocol; these tests run the session server over real sockets.

// peer is a test client of the session protocol.
type peer struct {
	t  *testing.T
	c  net.Conn
	id uint32
}

func (ts *testServer) openSession(t *testing.T, o protocol.Open) (*peer, protocol.OpenAnswer) {
	t.Helper()
	c := ts.dial(t)
	if o.Version == 0 {
		o.Version = protocol.SessionVersion
	}
	b, err := o.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	var ans [protocol.OpenAnswerSize]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, ans[:]); err != nil {
		t.Fatalf("reading the open answer: %v", err)
	}
	oa, _ := protocol.DecodeOpenAnswer(ans[:])
	return &peer{t: t, c: c}, oa
}

func (p *peer) send(a protocol.Action, id uint32, token uint64, key string) {
	p.t.Helper()
	b, err := protocol.Request{Action: a, ID: id, Token: token, Key: key}.Append(nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.c.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

// next reads the next answer; ok is false when the connection ended.
func (p *peer) next() (protocol.Answer, bool) {
	p.t.Helper()
	var b [protocol.AnswerSize]byte
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(p.c, b[:]); err != nil {
		return protocol.Answer{}, false
	}
	a, _ := protocol.DecodeAnswer(b[:])
	return a, true
}

func (p *peer) ask(a protocol.Action, token uint64, key string) protocol.Answer {
	p.t.Helper()
	p.id++
	p.send(a, p.id, token, key)
	ans, ok := p.next()
	if !ok {
		p.t.Fatalf("%s %q: connection closed without an answer", a, key)
	}
	if ans.ID != p.id {
		p.t.Fatalf("%s %q: answer for id %d, want %d", a, key, ans.ID, p.id)
	}
	return ans
}

// closed reports whether the server closes the connection without
// sending anything more.
func (p *peer) closed() bool {
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	n, err := p.c.Read(b[:])
	return n == 0 && err != nil
}

func TestSessionRequests(t *testing.T) {
	ts := startServer(t, nil)
	a, oa := ts.openSession(t, protocol.Open{TTLMillis: 30000, Source: "svc-a"})
	if oa.Status != protocol.AnswerOK || oa.TTLMillis != 30000 || oa.Session == 0 {
		t.Fatalf("open answer %+v", oa)
	}
	b, ob := ts.openSession(t, protocol.Open{})
	if ob.TTLMillis != 10000 || ob.Session == oa.Session {
		t.Fatalf("second open answer %+v (default TTL 10s)", ob)
	}
	got := a.ask(protocol.Lock, 0, "k")
	if got.Status != protocol.AnswerOK || got.Token == 0 {
		t.Fatalf("Lock = %+v", got)
	}
	tok := got.Token
	ki, _ := ts.Table.Key("k")
	if ki.Holder.Session != locker.SessionID(oa.Session) || ki.Token != tok || ki.Holder.Source != "svc-a" {
		t.Fatalf("held key %+v", ki)
	}
	// b waits; its Ping is answered at once meanwhile: out of order.
	b.send(protocol.Lock, 7, 0, "k")
	waitUntil(t, "b queued", func() bool { return ts.queued("k") == 1 })
	b.send(protocol.Ping, 8, 0, "")
	if ans, _ := b.next(); ans.ID != 8 || ans.Status != protocol.AnswerOK {
		t.Fatalf("Ping while a Lock waits: %+v", ans)
	}
	if ans := a.ask(protocol.TryLock, 0, "k"); ans.Status != protocol.AnswerLocked || ans.Token != 0 {
		t.Fatalf("TryLock of a held key = %+v", ans)
	}
	if ans := b.ask(protocol.Unlock, 0, "k"); ans.Status != protocol.AnswerFail {
		t.Fatalf("b unlocking a's key = %+v", ans)
	}
	if ans := a.ask(protocol.Unlock, tok+1, "k"); ans.Status != protocol.AnswerFail {
		t.Fatalf("Unlock by a wrong token = %+v", ans)
	}
	if ans := a.ask(protocol.Unlock, tok, "k"); ans.Status != protocol.AnswerOK || ans.Token != tok {
		t.Fatalf("Unlock = %+v", ans)
	}
	granted, _ := b.next()
	if granted.ID != 7 || granted.Status != protocol.AnswerOK || granted.Token <= tok {
		t.Fatalf("b's grant = %+v (a's token %d)", granted, tok)
	}
	// A stale Unlock by a's old token releases nothing of b's.
	if ans := a.ask(protocol.Unlock, tok, "k"); ans.Status != protocol.AnswerFail {
		t.Fatalf("stale Unlock = %+v", ans)
	}
	// Cancel of a pending Lock is answered '-' on the Lock's id.
	a.send(protocol.Lock, 100, 0, "k")
	waitUntil(t, "a queued", func() bool { return ts.queued("k") == 1 })
	a.send(protocol.Cancel, 100, 0, "")
	if ans, _ := a.next(); ans.ID != 100 || ans.Status != protocol.AnswerFail {
		t.Fatalf("cancelled Lock = %+v", ans)
	}
	a.send(protocol.Cancel, 12345, 0, "") // names nothing: ignored
	if ans := a.ask(protocol.Ping, 0, ""); ans.Status != protocol.AnswerOK {
		t.Fatalf("Ping after a stray Cancel = %+v", ans)
	}
	// Bad requests are answered '-' and the session goes on.
	if ans := a.ask(protocol.Action(42), 0, "k"); ans.Status != protocol.AnswerFail {
		t.Fatalf("unknown action = %+v", ans)
	}
	if ans := a.ask(protocol.Lock, 0, ""); ans.Status != protocol.AnswerFail {
		t.Fatalf("empty key = %+v", ans)
	}
	a.id++
	a.c.Write([]byte{byte(protocol.Lock), 0, 0, 0, byte(a.id), 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	if ans, _ := a.next(); ans.ID != a.id || ans.Status != protocol.AnswerFail {
		t.Fatalf("negative key size = %+v", ans)
	}
	// A pending id reused is answered '-' at once.
	a.send(protocol.Lock, 200, 0, "k")
	waitUntil(t, "a queued again", func() bool { return ts.queued("k") == 1 })
	a.send(protocol.Ping, 200, 0, "")
	if ans, _ := a.next(); ans.ID != 200 || ans.Status != protocol.AnswerFail {
		t.Fatalf("reused pending id = %+v", ans)
	}
	// Close refuses a's pending Lock, releases nothing of b's, and ends.
	a.send(protocol.Close, 201, 0, "")
	first, _ := a.next()
	second, _ := a.next()
	if first.ID != 200 || first.Status != protocol.AnswerFail || second.ID != 201 || second.Status != protocol.AnswerOK {
		t.Fatalf("Close answers %+v then %+v", first, second)
	}
	if !a.closed() {
		t.Fatal("connection still open after Close")
	}
	if ki, _ := ts.Table.Key("k"); ki.Token != granted.Token {
		t.Fatalf("after a's Close the key is %+v", ki)
	}
	if _, ok := ts.Table.SessionInfo(locker.SessionID(oa.Session)); ok {
		t.Fatal("a's session still open after Close")
	}
	// b's Close releases its hold.
	if ans := b.ask(protocol.Close, 0, ""); ans.Status != protocol.AnswerOK {
		t.Fatalf("b Close = %+v", ans)
	}
	waitUntil(t, "k released", func() bool { _, ok := ts.Table.Key("k"); return !ok })
}

func TestSessionDisconnectAndResume(t *testing.T) {
	ts := startServer(t, nil)
	a, oa := ts.openSession(t, protocol.Open{TTLMillis: 60000})
	tok := a.ask(protocol.Lock, 0, "held").Token
	ts.Table.TryLock("busy", locker.Holder{Source: "other"})
	a.send(protocol.Lock, 50, 0, "busy")
	waitUntil(t, "a queued", func() bool { return ts.queued("busy") == 1 })
	a.c.Close()
	// Disconnected: the waiter is withdrawn, the hold stays.
	waitUntil(t, "a disconnected", func() bool {
		info, _ := ts.Table.SessionInfo(locker.SessionID(oa.Session))
		return !info.Connected
	})
	if ts.queued("busy") != 0 {
		t.Fatal("a disconnected session's waiter is still queued")
	}
	if ki, _ := ts.Table.Key("held"); ki.Token != tok {
		t.Fatalf("the hold did not survive the disconnect: %+v", ki)
	}
	a2, oa2 := ts.openSession(t, protocol.Open{Resume: oa.Session, TTLMillis: 1000, Source: "ignored"})
	if oa2.Status != protocol.AnswerOK || oa2.Session != oa.Session || oa2.TTLMillis != 60000 {
		t.Fatalf("resume answer %+v", oa2)
	}
	// Resumed while connected: the old connection is closed first.
	a3, _ := ts.openSession(t, protocol.Open{Resume: oa.Session})
	if !a2.closed() {
		t.Fatal("the old connection of a resumed session is still open")
	}
	if ans := a3.ask(protocol.Unlock, tok, "held"); ans.Status != protocol.AnswerOK || ans.Token != tok {
		t.Fatalf("Unlock after resume = %+v", ans)
	}
	// Unknown sessions and wrong versions are refused with 13 bytes.
	if _, o := ts.openSession(t, protocol.Open{Resume: 42}); o.Status != protocol.AnswerFail || o.Session != 0 {
		t.Fatalf("resume of an unknown session = %+v", o)
	}
	if _, o := ts.openSession(t, protocol.Open{Version: 9}); o.Status != protocol.AnswerFail {
		t.Fatalf("unknown version = %+v", o)
	}
}

func TestSessionVersionAnsweredAtOnce(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.send(t, []byte{16, 2}) // nothing more will come
	var b [protocol.OpenAnswerSize]byte
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != protocol.AnswerFail {
		t.Fatalf("answer to an unknown version: %x, %v", b, err)
	}
}

func TestSessionExpiryClosesConnection(t *testing.T) {
	ts := startServer(t, nil)
	a, oa := ts.openSession(t, protocol.Open{TTLMillis: 1000})
	a.ask(protocol.Lock, 0, "k")
	b, _ := ts.openSession(t, protocol.Open{TTLMillis: 60000})
	b.send(protocol.Lock, 1, 0, "k")
	waitUntil(t, "b queued", func() bool { return ts.queued("k") == 1 })
	// a stays silent past its TTL; the table's reaper ends it.
	for ts.Table.ExpireSessions() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if !a.closed() {
		t.Fatal("an expired session's connection is still open")
	}
	if ans, ok := b.next(); !ok || ans.ID != 1 || ans.Status != protocol.AnswerOK {
		t.Fatalf("b after a expired: %+v, %v", ans, ok)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("expiry took %v past the reaping", took)
	}
	if _, ok := ts.Table.SessionInfo(locker.SessionID(oa.Session)); ok {
		t.Fatal("expired session still listed")
	}
}

func TestSessionAuthToken(t *testing.T) {
	ts := startServer(t, func(s *Server) { s.AuthToken = "s3cret" })
	if _, o := ts.openSession(t, protocol.Open{Auth: "wrong"}); o.Status != protocol.AnswerFail {
		t.Fatalf("wrong auth = %+v", o)
	}
	if _, o := ts.openSession(t, protocol.Open{}); o.Status != protocol.AnswerFail {
		t.Fatalf("no auth = %+v", o)
	}
	p, o := ts.openSession(t, protocol.Open{Auth: "s3cret"})
	if o.Status != protocol.AnswerOK {
		t.Fatalf("right auth = %+v", o)
	}
	if ans := p.ask(protocol.Lock, 0, "k"); ans.Status != protocol.AnswerOK {
		t.Fatalf("Lock = %+v", ans)
	}
	// v1 frames are read whole and refused.
	if got := ts.ask(t, protocol.Lock, "v1", "svc"); got != protocol.AnswerFail {
		t.Fatalf("v1 Lock with AUTH_TOKEN set = %q", got)
	}
	if got := ts.ask(t, protocol.Unlock, "k", ""); got != protocol.AnswerFail {
		t.Fatalf("v1 Unlock with AUTH_TOKEN set = %q", got)
	}
	if _, ok := ts.Table.Key("k"); !ok {
		t.Fatal("a v1 Unlock released a key with AUTH_TOKEN set")
	}
}

func TestSessionPendingLimit(t *testing.T) {
	ts := startServer(t, nil)
	ts.Table.TryLock("k", locker.Holder{Source: "h"})
	p, _ := ts.openSession(t, protocol.Open{})
	var buf []byte
	for i := range MaxPending + 1 {
		buf, _ = protocol.Request{Action: protocol.Lock, ID: uint32(i + 1), Key: "k"}.Append(buf)
	}
	p.c.Write(buf)
	if !p.closed() {
		t.Fatal("the connection survived more than MaxPending pending requests")
	}
	waitUntil(t, "the waiters withdrawn", func() bool { return ts.queued("k") == 0 })
}

func TestSessionConnectionLimitRefusal(t *testing.T) {
	ts := startServer(t, func(s *Server) { s.MaxConnections = 1 })
	p, _ := ts.openSession(t, protocol.Open{})
	_ = p
	c := ts.send(t, append(mustOpen(t, protocol.Open{Version: 1}), 0))
	var b [protocol.OpenAnswerSize]byte
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != protocol.AnswerFail {
		t.Fatalf("a session over the limit got %x, %v; want the 13-byte refusal", b, err)
	}
}

func mustOpen(t *testing.T, o protocol.Open) []byte {
	b, err := o.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestOriginalServerFrames(t *testing.T) {
	ts := startServer(t, nil)
	if got := ts.ask(t, protocol.Lock, "k", "svc"); got != protocol.AnswerOK {
		t.Fatalf("Lock = %q", got)
	}
	// The original Go client's Unlock: no source field, and it waits for
	// the answer before closing.
	c := ts.send(t, []byte{byte(protocol.Unlock), 1, 'k'})
	if got := answer(t, c); got != protocol.AnswerOK {
		t.Fatalf("original Unlock = %q", got)
	}
	ts.ask(t, protocol.Lock, "k", "svc")
	c = ts.send(t, []byte{byte(protocol.ResetByKey), 1, 'k'})
	if got := answer(t, c); got != protocol.AnswerOK {
		t.Fatalf("original ResetByKey = %q", got)
	}
	ts.ask(t, protocol.Lock, "a", "orig-src")
	ts.ask(t, protocol.Lock, "b", "orig-src")
	c = ts.send(t, append([]byte{byte(protocol.ResetBySource), 8}, "orig-src"...))
	if got := answer(t, c); got != protocol.AnswerOK {
		t.Fatalf("original ResetBySource = %q", got)
	}
	waitUntil(t, "orig-src's keys released", func() bool { return ts.Table.Stats().Held == 0 })
}

// failingWrites makes every accepted connection's writes fail once armed:
// the server then cannot deliver what it decided.
type failingWrites struct {
	net.Listener
	armed *atomic.Bool
}

func (l failingWrites) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return failingConn{Conn: c, armed: l.armed}, nil
}

type failingConn struct {
	net.Conn
	armed *atomic.Bool
}

func (c failingConn) Write(b []byte) (int, error) {
	if c.armed.Load() {
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(b)
}

// TestUndeliveredSessionGrantIsHandedOn: a grant made to a session whose
// '+' cannot be written is released, that grant only, and passes to the
// next waiter instead of staying held by a session that never heard of it.
func TestUndeliveredSessionGrantIsHandedOn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	ts := startServerOn(t, failingWrites{Listener: ln, armed: &armed}, nil)
	holderTok, _ := ts.Table.TryLock("k", locker.Holder{Source: "h"})
	p, _ := ts.openSession(t, protocol.Open{})
	p.send(protocol.Lock, 1, 0, "k")
	waitUntil(t, "queued", func() bool { return ts.queued("k") == 1 })
	next := make(chan error, 1)
	go func() {
		_, err := ts.Table.Lock(t.Context(), "k", locker.Holder{Source: "next"})
		next <- err
	}()
	waitUntil(t, "next queued", func() bool { return ts.queued("k") == 2 })
	armed.Store(true)
	ts.Table.Release("k", holderTok) // the session is granted; its '+' fails
	if err := <-next; err != nil {
		t.Fatalf("the next waiter: %v", err)
	}
	if ki, _ := ts.Table.Key("k"); ki.Holder.Source != "next" {
		t.Fatalf("holder %+v", ki)
	}
}

// TestManyLocksOneSession shares one session among many concurrent
// lockers, as a program's goroutines would.
func TestManyLocksOneSession(t *testing.T) {
	ts := startServer(t, nil)
	p, _ := ts.openSession(t, protocol.Open{})
	const n = 200
	var buf []byte
	for i := range n {
		buf, _ = protocol.Request{Action: protocol.Lock, ID: uint32(i + 1), Key: fmt.Sprint("k", i%10)}.Append(buf)
	}
	p.c.Write(buf)
	lastID := map[string]uint32{}    // the last Lock of each key granted
	lastToken := map[string]uint64{} // and its token
	unlocked := map[uint32]uint64{}  // Unlock id → the token it names
	grants, unlocks := 0, 0
	for grants < n || unlocks < n {
		ans, ok := p.next()
		if !ok {
			t.Fatal("connection ended")
		}
		if ans.ID > n { // an Unlock's answer: it released the grant it named
			if ans.Status != protocol.AnswerOK || ans.Token != unlocked[ans.ID] {
				t.Fatalf("Unlock %d answered %+v, want + with token %d", ans.ID, ans, unlocked[ans.ID])
			}
			unlocks++
			continue
		}
		if ans.Status != protocol.AnswerOK || ans.Token == 0 {
			t.Fatalf("Lock answered %+v", ans)
		}
		key := fmt.Sprint("k", (ans.ID-1)%10)
		// One session's Locks of a key are granted in the order sent, each
		// under a larger token than the one before.
		if ans.ID <= lastID[key] || ans.Token <= lastToken[key] {
			t.Fatalf("%s: Lock %d granted (token %d) after Lock %d (token %d)", key, ans.ID, ans.Token, lastID[key], lastToken[key])
		}
		lastID[key], lastToken[key] = ans.ID, ans.Token
		grants++
		unlocked[n+ans.ID] = ans.Token
		b, _ := protocol.Request{Action: protocol.Unlock, ID: n + ans.ID, Token: ans.Token, Key: key}.Append(nil)
		p.c.Write(b)
	}
}

// stallingListener's connections cut short every write given less than a
// second (a releaser's handoff), as a peer that does not read would:
// half is written, then the deadline passes.
type stallingListener struct {
	net.Listener
	stalls *atomic.Int32
}

func (l stallingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallingConn{Conn: c, stalls: l.stalls}, nil
}

type stallingConn struct {
	net.Conn
	deadline atomic.Int64
	stalls   *atomic.Int32
}

func (c *stallingConn) SetWriteDeadline(t time.Time) error {
	c.deadline.Store(t.UnixNano())
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallingConn) Write(b []byte) (int, error) {
	if time.Until(time.Unix(0, c.deadline.Load())) < time.Second && len(b) > 1 {
		c.stalls.Add(1)
		n, _ := c.Conn.Write(b[:len(b)/2])
		return n, os.ErrDeadlineExceeded
	}
	return c.Conn.Write(b)
}

// TestHandoverToASlowReader: a grant handed over by another connection's
// release is written with little patience; what does not fit is left to
// the waiter's own writer, byte-exact, and the releaser is answered at
// once.
func TestHandoverToASlowReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var stalls atomic.Int32
	ts := startServerOn(t, stallingListener{ln, &stalls}, nil)
	a, _ := ts.openSession(t, protocol.Open{})
	b, _ := ts.openSession(t, protocol.Open{})
	tok := a.ask(protocol.Lock, 0, "k").Token
	b.send(protocol.Lock, 9, 0, "k")
	waitUntil(t, "b queued", func() bool { return ts.queued("k") == 1 })
	start := time.Now()
	if ans := a.ask(protocol.Unlock, tok, "k"); ans.Status != protocol.AnswerOK {
		t.Fatalf("Unlock = %+v", ans)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("the releaser waited %v on the slow reader", took)
	}
	got, ok := b.next()
	if !ok || got.ID != 9 || got.Status != protocol.AnswerOK || got.Token <= tok {
		t.Fatalf("b's grant = %+v, %v", got, ok)
	}
	if ans := b.ask(protocol.Ping, 0, ""); ans.Status != protocol.AnswerOK {
		t.Fatalf("b after the requeued grant: %+v", ans)
	}
	if stalls.Load() == 0 {
		t.Fatal("no handoff write was cut short: the test did not test the requeue")
	}
}

// TestUnlockWithSourceClosesAtOnce: an Unlock that carries its whole
// source field is answered and the connection closed at once, so a
// client that waits for the server's close is not kept waiting; one that
// sends the key alone (the original clients) is answered too, and the
// server reads on until it closes.
func TestUnlockWithSourceClosesAtOnce(t *testing.T) {
	ts := startServer(t, func(s *Server) { s.RequestTimeout = 5 * time.Second })
	for _, split := range []bool{false, true} {
		ts.ask(t, protocol.Lock, "k", "svc")
		full := frame(protocol.Unlock, "k", "svc")
		c := ts.send(t, full[:3])
		if split {
			// The source field comes in a second segment, after the answer.
			if got := answer(t, c); got != protocol.AnswerOK {
				t.Fatalf("split Unlock answered %q", got)
			}
			c.Write(full[3:])
		} else {
			c.Write(full[3:])
			if got := answer(t, c); got != protocol.AnswerOK {
				t.Fatalf("Unlock answered %q", got)
			}
		}
		start := time.Now()
		var b [1]byte
		_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
		if n, err := c.Read(b[:]); n != 0 || err == nil || isTimeout(err) {
			t.Fatalf("split=%v: after the answer: %d bytes, %v; want the server's close", split, n, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("split=%v: the server closed %v after the answer", split, took)
		}
	}
}

// smallBufferListener gives its connections a small send buffer, so that
// answers to a peer that does not read fill it soon. It returns the
// *net.TCPConn itself: the server writes to its socket directly.
type smallBufferListener struct{ net.Listener }

func (l smallBufferListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if err := c.(*net.TCPConn).SetWriteBuffer(4096); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// TestAnswersToAPeerThatReadsLate: answers the socket cannot take at once
// wait for the peer, and reach it whole and in order once it reads; a
// grant among them too.
func TestAnswersToAPeerThatReadsLate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerOn(t, smallBufferListener{ln}, nil)
	p, _ := ts.openSession(t, protocol.Open{})
	if err := p.c.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	const pings = 6000
	var reqs []byte
	for id := uint32(1); id <= pings; id++ {
		reqs, _ = protocol.Request{Action: protocol.Ping, ID: id}.Append(reqs)
	}
	reqs, _ = protocol.Request{Action: protocol.Lock, ID: pings + 1, Key: "k"}.Append(reqs)
	before := slowWrites.Load()
	sent := make(chan error, 1)
	go func() { // blocks while the server waits for us to read
		_, err := p.c.Write(reqs)
		sent <- err
	}()
	waitUntil(t, "an answer written only once the peer reads", func() bool { return slowWrites.Load() > before })
	answers := make([]byte, pings*protocol.AnswerSize)
	_ = p.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(p.c, answers); err != nil {
		t.Fatal(err)
	}
	for id := uint32(1); id <= pings; id++ {
		got, err := protocol.DecodeAnswer(answers[(id-1)*protocol.AnswerSize:])
		if err != nil || got.ID != id || got.Status != protocol.AnswerOK {
			t.Fatalf("answer %d: %+v, %v", id, got, err)
		}
	}
	grant, ok := p.next()
	if !ok || grant.ID != pings+1 || grant.Status != protocol.AnswerOK || grant.Token == 0 {
		t.Fatalf("Lock's answer: %+v, %v", grant, ok)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if ans := p.ask(protocol.Unlock, grant.Token, "k"); ans.Status != protocol.AnswerOK {
		t.Fatalf("Unlock: %+v", ans)
	}
}

// TestWriteCountsWhatLeft: a write cut short by its patience reports
// exactly the bytes the peer gets, part written at once and part after
// waiting.
func TestWriteCountsWhatLeft(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetWriteBuffer(4096); err != nil {
		t.Fatal(err)
	}
	sc := &sessionConn{c: c, raw: rawConn(c)}
	if sc.raw == nil {
		t.Fatal("a TCP connection without its socket: the test would not test writeNow")
	}
	buf := make([]byte, 8<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	n, err := sc.write(buf, 10*time.Millisecond)
	if !isTimeout(err) || n == 0 || n == len(buf) {
		t.Fatalf("write to a peer that does not read = %d of %d bytes, %v; want part, then a timeout", n, len(buf), err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf[:n]) {
		t.Fatalf("the peer got %d bytes, the write reported %d (or other bytes)", len(got), n)
	}
}

func TestAuthOK(t *testing.T) {
	s := &Server{AuthToken: "secret-token"}
	for _, tc := range []struct {
		given string
		ok    bool
	}{{"secret-token", true}, {"secret-tokeN", false}, {"secret", false}, {"", false}, {"secret-token-longer", false}} {
		if got := s.authOK(tc.given); got != tc.ok {
			t.Errorf("authOK(%q) = %v, want %v", tc.given, got, tc.ok)
		}
	}
}
