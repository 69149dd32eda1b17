package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// The Locking-Center drivers of this benchmark, written from the protocol
// document (docs/protocol.md): v1, one frame per TCP connection, and the
// session, one connection carrying many requests answered out of order. They
// are kept apart from the project's Go client on purpose, so that the
// benchmark measures the protocol and the server, not one client's choices.

// Protocol bytes shared by v1 and sessions.
const (
	actLock   = 1
	actUnlock = 2
	actClose  = 8
	actOpen   = 16

	answerOK = '+'
)

// errRefused is a lock or unlock answered with something other than '+'.
var errRefused = errors.New("refused")

// v1Client is a Locking-Center v1 client: each request connects, writes one
// frame, reads the one-byte answer and closes. With tls each connection
// shakes hands first, as a v1 client over TLS must.
type v1Client struct {
	addr   string
	source string
	tls    *tls.Config // nil: plain TCP
	dialer net.Dialer
	frame  []byte // reused frame buffer; a v1Client serves one goroutine
}

// Lock blocks until key is granted to this client.
func (c *v1Client) Lock(ctx context.Context, key string) error {
	return c.do(ctx, actLock, key, nil)
}

// LockSent is Lock, calling sent once connected, just before the frame is
// written: v1 begins to wait in the queue when its frame arrives, not when
// it starts to connect.
func (c *v1Client) LockSent(ctx context.Context, key string, sent func()) error {
	return c.do(ctx, actLock, key, sent)
}

// Unlock releases this client's grant of key.
func (c *v1Client) Unlock(ctx context.Context, key string) error {
	return c.do(ctx, actUnlock, key, nil)
}

// Close releases what the client holds open.
func (c *v1Client) Close() error { return nil }

func (c *v1Client) do(ctx context.Context, action byte, key string, sent func()) error {
	conn, err := dialLC(ctx, &c.dialer, c.addr, c.tls)
	if err != nil {
		return fmt.Errorf("v1 connect: %w", err)
	}
	defer conn.Close()
	// A Lock may wait for a long time; the context's end hangs up, which
	// withdraws the waiter on the server.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	c.frame = append(c.frame[:0], action, byte(len(key)))
	c.frame = append(c.frame, key...)
	c.frame = append(c.frame, byte(len(c.source)))
	c.frame = append(c.frame, c.source...)
	if sent != nil {
		sent()
	}
	if _, err := conn.Write(c.frame); err != nil {
		return fmt.Errorf("v1 write: %w", err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("v1 read answer: %w", err)
	}
	// After a Lock's answer the server closes; waiting for that before
	// closing (as the protocol asks) leaves TIME_WAIT on the server's side
	// instead of filling this side's ephemeral ports at thousands of
	// requests a second, which slows every connect. After an Unlock the
	// server reads on until the client closes (an optional trailing field
	// of the original frames), so the client closes first.
	if action == actLock {
		awaitEOF(conn)
	}
	if answer[0] != answerOK {
		return fmt.Errorf("v1 action %d on %q answered %q: %w", action, key, answer[0], errRefused)
	}
	return nil
}

// dialLC connects to addr and, with conf, completes a TLS handshake before
// it returns, so that a v1 client's wait in the queue (LockSent) starts when
// its frame can be sent, after the handshake as after the TCP connect.
func dialLC(ctx context.Context, d *net.Dialer, addr string, conf *tls.Config) (net.Conn, error) {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || conf == nil {
		return conn, err
	}
	tc := tls.Client(conn, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// awaitEOF waits for the peer to close conn (or for anything else to end
// the read: the caller closes conn next whatever happens).
func awaitEOF(conn net.Conn) {
	var b [1]byte
	_, _ = conn.Read(b[:]) // EOF expected; a byte or an error ends the wait as well
}

// sessionAnswer is one 13-byte answer, or the error that ended the session
// before the answer came; lead instead hands the waiting caller the job of
// reading the connection.
type sessionAnswer struct {
	status byte
	token  uint64
	err    error
	lead   bool
}

// session is one Locking-Center session (action 16): one connection shared
// by any number of goroutines, answers matched to pending calls by id.
//
// Writes: a caller that finds no write in progress writes its frame together
// with every frame queued meanwhile, so that many callers share one write
// system call. Reads: the connection is read by one waiting caller at a
// time, the leader, which hands every answer that is not its own to its
// caller and, once its own has come, passes the reading on to another
// waiting caller. A lone caller so reads its own answer, as pgx and go-redis
// do, rather than being woken by a reader goroutine: measured here against a
// trivial session server, that wake-up costs ~20 µs a Lock+Unlock cycle, a
// third of the cycle, which the comparison would have charged to the server.
//
// The context given to openSession bounds the session's whole life: when it
// ends, the connection is closed and every call fails. (The benchmark never
// gives up one wait alone, so there is no Cancel.)
type session struct {
	conn net.Conn
	r    *bufio.Reader // read only by the leader
	stop func() bool   // stops the context's closing of conn

	mu      sync.Mutex // guards every field below
	nextID  uint32
	pending map[uint32]chan sessionAnswer
	reading bool   // a leader is reading, or has been handed the reading
	out     []byte // frames queued for the write in progress, or the next one
	spare   []byte // the buffer last written, reused for the next batch
	writing bool   // a caller is writing; new frames only join out
	err     error  // why the session ended; set once
}

// openSession connects to addr (over TLS with conf, nil for plain TCP) and
// opens a new session with the TTL asked for (0: the server's default). The
// session lasts until close or the end of ctx.
func openSession(ctx context.Context, addr string, conf *tls.Config, source string, ttlMillis uint32) (*session, error) {
	var d net.Dialer
	conn, err := dialLC(ctx, &d, addr, conf)
	if err != nil {
		return nil, fmt.Errorf("session connect: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	open := []byte{actOpen, 1}
	open = binary.BigEndian.AppendUint32(open, ttlMillis)
	open = binary.BigEndian.AppendUint64(open, 0) // resume: none, a new session
	open = append(open, byte(len(source)))
	open = append(open, source...)
	open = append(open, 0) // no auth
	fail := func(err error) (*session, error) {
		stop()
		_ = conn.Close()
		return nil, err
	}
	if _, err := conn.Write(open); err != nil {
		return fail(fmt.Errorf("session open: write: %w", err))
	}
	r := bufio.NewReaderSize(conn, 16<<10)
	var answer [13]byte
	if _, err := io.ReadFull(r, answer[:]); err != nil {
		return fail(fmt.Errorf("session open: read answer: %w", err))
	}
	if answer[0] != answerOK {
		return fail(fmt.Errorf("session open answered %q: %w", answer[0], errRefused))
	}
	return &session{conn: conn, r: r, stop: stop, pending: make(map[uint32]chan sessionAnswer)}, nil
}

// fail ends the session with err: every pending call gets err. The caller
// holds s.mu.
func (s *session) fail(err error) {
	if s.err == nil {
		s.err = err
		_ = s.conn.Close()
	}
	for id, ch := range s.pending {
		ch <- sessionAnswer{err: s.err} // room: see call
		delete(s.pending, id)
	}
	s.reading = false
}

// send queues one request frame and, unless another caller is writing
// already, writes it together with whatever others queue meanwhile. It
// returns the request's id and the channel that gets its answer.
func (s *session) send(action byte, token uint64, key string) (uint32, chan sessionAnswer, error) {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return 0, nil, err
	}
	s.nextID++
	id := s.nextID
	// Room for two: a lead and then the error of a session that ends before
	// the lead is taken up.
	ch := make(chan sessionAnswer, 2)
	s.pending[id] = ch
	s.out = append(s.out, action)
	s.out = binary.BigEndian.AppendUint32(s.out, id)
	s.out = binary.BigEndian.AppendUint64(s.out, token)
	s.out = append(s.out, byte(len(key)))
	s.out = append(s.out, key...)
	if s.writing {
		s.mu.Unlock()
		return id, ch, nil
	}
	s.writing = true
	for len(s.out) > 0 {
		batch := s.out
		s.out = s.spare[:0]
		s.mu.Unlock()
		_, err := s.conn.Write(batch)
		s.mu.Lock()
		s.spare = batch
		if err != nil {
			s.writing = false
			s.fail(fmt.Errorf("session write: %w", err))
			s.mu.Unlock()
			return id, ch, nil // ch has the error
		}
	}
	s.writing = false
	s.mu.Unlock()
	return id, ch, nil
}

// call sends one request and waits for its answer, reading the connection
// itself while no one else does.
func (s *session) call(action byte, token uint64, key string) (sessionAnswer, error) {
	id, ch, err := s.send(action, token, key)
	if err != nil {
		return sessionAnswer{}, err
	}
	s.mu.Lock()
	// Lead unless someone reads already, or the last leader has already
	// handed this call its answer (it is in ch).
	_, unanswered := s.pending[id]
	lead := !s.reading && s.err == nil && unanswered
	if lead {
		s.reading = true
	}
	s.mu.Unlock()
	for {
		if lead {
			if a, ok := s.lead(id); ok {
				return a, nil
			}
		}
		a := <-ch
		if !a.lead {
			return a, a.err
		}
		lead = true
	}
}

// lead reads answers and hands them to their callers until the answer to
// mine arrives, hands on whatever further answers are already buffered,
// then passes the reading to another waiting caller (or to whoever calls
// next). It returns false if the session ended first: mine then has the
// error in its channel.
func (s *session) lead(mine uint32) (sessionAnswer, bool) {
	var buf [13]byte
	var own sessionAnswer
	found := false
	for !found || s.r.Buffered() >= len(buf) {
		if _, err := io.ReadFull(s.r, buf[:]); err != nil {
			s.mu.Lock()
			s.fail(fmt.Errorf("session read: %w", err))
			s.mu.Unlock()
			return sessionAnswer{}, false
		}
		id := binary.BigEndian.Uint32(buf[0:4])
		a := sessionAnswer{status: buf[4], token: binary.BigEndian.Uint64(buf[5:13])}
		s.mu.Lock()
		ch, ok := s.pending[id]
		delete(s.pending, id)
		if !ok {
			s.fail(fmt.Errorf("session: answer to id %d, which is not pending", id))
			s.mu.Unlock()
			return sessionAnswer{}, false
		}
		s.mu.Unlock()
		if id == mine {
			own, found = a, true
		} else {
			ch <- a // room: only this caller's answer or a lead, never both
		}
	}
	// Only an unanswered call gets the lead, so its lead always comes before
	// its answer: it reads that answer itself.
	s.mu.Lock()
	s.reading = false
	for _, ch := range s.pending {
		s.reading = true
		ch <- sessionAnswer{lead: true}
		break
	}
	s.mu.Unlock()
	return own, true
}

// close sends Close, waits for its answer, and closes the connection.
func (s *session) close() error {
	a, err := s.call(actClose, 0, "")
	if err == nil && a.status != answerOK {
		err = fmt.Errorf("session close answered %q: %w", a.status, errRefused)
	}
	s.stop()
	_ = s.conn.Close()
	return err
}

// sessionClient is one locker's view of a session: it remembers the token of
// each key it holds, so that Unlock names its own grant. Several
// sessionClients may share one session (workload M); each serves one
// goroutine.
type sessionClient struct {
	s      *session
	own    bool // close the session on Close
	tokens map[string]uint64
}

// Lock blocks until key is granted to this client.
func (c *sessionClient) Lock(ctx context.Context, key string) error {
	a, err := c.s.call(actLock, 0, key)
	if err != nil {
		return err
	}
	if a.status != answerOK {
		return fmt.Errorf("session lock %q answered %q: %w", key, a.status, errRefused)
	}
	c.tokens[key] = a.token
	return nil
}

// Unlock releases this client's grant of key.
func (c *sessionClient) Unlock(ctx context.Context, key string) error {
	token, ok := c.tokens[key]
	if !ok {
		return fmt.Errorf("session unlock %q: not held here", key)
	}
	delete(c.tokens, key)
	a, err := c.s.call(actUnlock, token, key)
	if err != nil {
		return err
	}
	if a.status != answerOK {
		return fmt.Errorf("session unlock %q answered %q: %w", key, a.status, errRefused)
	}
	return nil
}

func (c *sessionClient) share() client {
	return &sessionClient{s: c.s, tokens: make(map[string]uint64)}
}

// Close releases what the client holds open.
func (c *sessionClient) Close() error {
	if c.own {
		return c.s.close()
	}
	return nil
}
