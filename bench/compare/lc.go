package main

import (
	"bufio"
	"context"
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
	actCancel = 6
	actClose  = 8
	actOpen   = 16

	answerOK = '+'
)

// errRefused is a lock or unlock answered with something other than '+'.
var errRefused = errors.New("refused")

// v1Client is a Locking-Center v1 client: each request connects, writes one
// frame, reads the one-byte answer and closes.
type v1Client struct {
	addr   string
	source string
	dialer net.Dialer
	frame  []byte // reused frame buffer; a v1Client serves one goroutine
}

func (c *v1Client) Lock(ctx context.Context, key string) error {
	return c.do(ctx, actLock, key, nil)
}

// LockSent is Lock, calling sent once connected, just before the frame is
// written: v1 begins to wait in the queue when its frame arrives, not when
// it starts to connect.
func (c *v1Client) LockSent(ctx context.Context, key string, sent func()) error {
	return c.do(ctx, actLock, key, sent)
}

func (c *v1Client) Unlock(ctx context.Context, key string) error {
	return c.do(ctx, actUnlock, key, nil)
}

func (c *v1Client) Close() error { return nil }

func (c *v1Client) do(ctx context.Context, action byte, key string, sent func()) error {
	conn, err := c.dialer.DialContext(ctx, "tcp", c.addr)
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

// awaitEOF waits for the peer to close conn (or for anything else to end
// the read: the caller closes conn next whatever happens).
func awaitEOF(conn net.Conn) {
	var b [1]byte
	_, _ = conn.Read(b[:]) // EOF expected; a byte or an error ends the wait as well
}

// sessionAnswer is one 13-byte answer, or the error that ended the session
// before the answer came.
type sessionAnswer struct {
	status byte
	token  uint64
	err    error
}

// session is one Locking-Center session (action 16): one connection shared
// by any number of goroutines. Requests are written by whichever caller finds
// no write in progress, together with every frame queued meanwhile (so that
// many callers share one write system call); one reader goroutine, owned by
// the session and ended by close, matches answers to pending calls by id.
type session struct {
	conn       net.Conn
	readerDone chan struct{} // closed when the reader goroutine has returned

	mu      sync.Mutex // guards every field below
	nextID  uint32
	pending map[uint32]chan sessionAnswer
	out     []byte // frames queued for the write in progress, or the next one
	spare   []byte // the buffer last written, reused for the next batch
	writing bool   // a caller is writing; new frames only join out
	err     error  // why the session ended; set once
}

// openSession connects to addr and opens a new session with the TTL asked
// for (0: the server's default).
func openSession(ctx context.Context, addr, source string, ttlMillis uint32) (*session, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("session connect: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	open := []byte{actOpen, 1}
	open = binary.BigEndian.AppendUint32(open, ttlMillis)
	open = binary.BigEndian.AppendUint64(open, 0) // resume: none, a new session
	open = append(open, byte(len(source)))
	open = append(open, source...)
	open = append(open, 0) // no auth
	if _, err := conn.Write(open); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("session open: write: %w", err)
	}
	var answer [13]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("session open: read answer: %w", err)
	}
	if answer[0] != answerOK {
		_ = conn.Close()
		return nil, fmt.Errorf("session open answered %q: %w", answer[0], errRefused)
	}
	s := &session{
		conn:       conn,
		readerDone: make(chan struct{}),
		pending:    make(map[uint32]chan sessionAnswer),
	}
	go s.read()
	return s, nil
}

// read is the session's one reader: it hands every answer to the call
// waiting for its id, until the connection ends, then fails every call
// still pending.
func (s *session) read() {
	defer close(s.readerDone)
	r := bufio.NewReaderSize(s.conn, 16<<10)
	var buf [13]byte
	for {
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			s.fail(fmt.Errorf("session read: %w", err))
			return
		}
		id := binary.BigEndian.Uint32(buf[0:4])
		a := sessionAnswer{status: buf[4], token: binary.BigEndian.Uint64(buf[5:13])}
		s.mu.Lock()
		ch, ok := s.pending[id]
		delete(s.pending, id)
		s.mu.Unlock()
		if !ok {
			s.fail(fmt.Errorf("session: answer to id %d, which is not pending", id))
			_ = s.conn.Close()
			return
		}
		ch <- a // buffered: never blocks
	}
}

// fail ends the session with err: every pending call gets err.
func (s *session) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	for id, ch := range s.pending {
		ch <- sessionAnswer{err: s.err}
		delete(s.pending, id)
	}
}

// send queues one request frame and, unless another caller is writing
// already, writes it together with whatever others queue meanwhile. It
// returns the channel that gets the answer (nil for Cancel, which has none).
func (s *session) send(action byte, id uint32, token uint64, key string, answer bool) (uint32, chan sessionAnswer, error) {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return 0, nil, err
	}
	var ch chan sessionAnswer
	if answer {
		s.nextID++
		id = s.nextID
		ch = make(chan sessionAnswer, 1)
		s.pending[id] = ch
	}
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
			s.mu.Unlock()
			_ = s.conn.Close() // the reader then fails every pending call
			return id, ch, fmt.Errorf("session write: %w", err)
		}
	}
	s.writing = false
	s.mu.Unlock()
	return id, ch, nil
}

// call sends one request and waits for its answer. A context that ends
// while a Lock waits sends Cancel; the Lock's own answer still comes, and
// a grant made meanwhile is released again.
func (s *session) call(ctx context.Context, action byte, token uint64, key string) (sessionAnswer, error) {
	id, ch, err := s.send(action, 0, token, key, true)
	if err != nil {
		return sessionAnswer{}, err
	}
	select {
	case a := <-ch:
		return a, a.err
	case <-ctx.Done():
	}
	if _, _, err := s.send(actCancel, id, 0, "", false); err != nil {
		return sessionAnswer{}, err
	}
	a := <-ch
	if a.err == nil && a.status == answerOK && action == actLock {
		if _, err := s.call(context.Background(), actUnlock, a.token, key); err != nil {
			return sessionAnswer{}, fmt.Errorf("give back a grant made as the wait ended: %w", err)
		}
	}
	return sessionAnswer{}, ctx.Err()
}

// close sends Close, waits for the server to end the connection, and waits
// for the reader to return.
func (s *session) close() error {
	_, ch, err := s.send(actClose, 0, 0, "", true)
	if err == nil {
		a := <-ch
		err = a.err
		if err == nil && a.status != answerOK {
			err = fmt.Errorf("session close answered %q: %w", a.status, errRefused)
		}
	}
	_ = s.conn.Close()
	<-s.readerDone
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

func (c *sessionClient) Lock(ctx context.Context, key string) error {
	a, err := c.s.call(ctx, actLock, 0, key)
	if err != nil {
		return err
	}
	if a.status != answerOK {
		return fmt.Errorf("session lock %q answered %q: %w", key, a.status, errRefused)
	}
	c.tokens[key] = a.token
	return nil
}

func (c *sessionClient) Unlock(ctx context.Context, key string) error {
	token, ok := c.tokens[key]
	if !ok {
		return fmt.Errorf("session unlock %q: not held here", key)
	}
	delete(c.tokens, key)
	a, err := c.s.call(ctx, actUnlock, token, key)
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

func (c *sessionClient) Close() error {
	if c.own {
		return c.s.close()
	}
	return nil
}
