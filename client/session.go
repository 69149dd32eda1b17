package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// Errors of a Session, besides ErrLocked, ErrReset, ErrRefused and
// ErrUnreachable (whose meaning is the same as for a Client). Compare with
// errors.Is.
var (
	// ErrNotHeld is returned by Session.Unlock when the server answered
	// '-': this session does not hold that grant (it was reset, or already
	// released). Nothing was released. It also matches ErrRefused.
	ErrNotHeld = fmt.Errorf("%w: this session does not hold that grant", ErrRefused)
	// ErrOutcomeUnknown is returned by an Unlock or a reset whose frame
	// may have reached the server but whose answer never came (the
	// connection broke, or ctx ended after it was sent), and by a v1
	// Client's Lock or TryLock whose connection broke after it was sent:
	// it may or may not have taken effect. The request is never sent
	// again blindly. For a
	// session's Unlock, the grant is settled after the resume by an Unlock
	// naming its token, which cannot release anything but that grant; a
	// Client's Unlock names no grant, so nothing is sent again.
	ErrOutcomeUnknown = errors.New("locking-center: answer lost, outcome unknown")
	// ErrDisconnected is returned by a Session call whose request was sent
	// on a connection that broke before its answer came (a Ping, a Close),
	// and is matched by the ErrOutcomeUnknown of an Unlock or reset lost
	// that way. The session goes on resuming. A Lock or TryLock is not
	// failed by a drop: it is reissued with its id after the resume, and
	// finds the grant the server made for it, if it made one (Reissue).
	ErrDisconnected = errors.New("locking-center: session connection lost before the answer")
	// ErrSessionLost is what Session.Err wraps when the session ended
	// without Close: the server refused to resume it (it expired, or was
	// ended from the dashboard), or its TTL passed without a resume. Every
	// hold it had is gone, or will be within the server's expiry.
	ErrSessionLost = errors.New("locking-center: session lost")
	// ErrSessionClosed is what Session.Err returns after Close, and what
	// calls made after it return.
	ErrSessionClosed = errors.New("locking-center: session closed")
)

// Limits of one session connection.
const (
	// maxPending is the server's bound on requests awaiting an answer on
	// one connection (one more drops the connection). Cancel does not count.
	maxPending = protocol.MaxPending
	// maxBackoff bounds the wait between two resume attempts.
	maxBackoff = 500 * time.Millisecond
	// minBackoff is the wait after the first failed resume attempt.
	minBackoff = 20 * time.Millisecond
)

// sessionKeepAlive is TCP keepalive on a session connection, as the server
// sets it on its side.
var sessionKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 4}

// Session is one session (docs/protocol.md, "Sessions"): one TCP connection that carries the
// requests of many goroutines at once, answered out of order, and that
// owns the keys it takes. Its holds end with it: at Close, when the server
// ends it, or one TTL after it was last heard from (a crashed program's
// keys free themselves). Every grant comes with its fencing token.
//
// One goroutine writes (it gathers the frames queued by every caller into
// one write), one reads (it matches answers to calls by id), and one
// supervises the connection. When nothing was sent for a third of the TTL,
// the session sends Ping. When the connection drops, calls waiting on it
// fail with ErrDisconnected (an Unlock or a reset with ErrOutcomeUnknown:
// it is never sent again), and the session reconnects and resumes, on any
// address of its list (a cluster's node that stops leading closes its
// connections: any other node takes the session back), with a jittered,
// growing back-off between rounds, as long as the TTL allows; requests
// made meanwhile wait for the new connection. A Lock or TryLock that was
// waiting on the lost connection is reissued with its id after the
// resume: the server answers a grant it made for that request before the
// drop at once, with its token (Reissue, docs/protocol.md), and otherwise
// carries the request out anew, so the caller just goes on waiting. The id of a grant
// the program holds is never given to another request while it holds it.
// A Lock or TryLock that the caller gave up on may have been granted: the
// session unlocks such a grant, so that none is left held by nobody.
//
// The session is lost when the server refuses the resume, or when its
// TTL has passed since the send time of the last frame the server
// answered, connected or not: the server heard from it no later than that
// send, and a server (or a cluster's new leader) never releases a
// session's holds sooner than one TTL after its last frame, so the
// session always knows itself lost before its holds can go to another.
// Done is then closed, Err wraps ErrSessionLost, and every call fails.
// Close ends it on purpose. Either way the session's goroutines end.
//
// A Session is safe for use by many goroutines.
type Session struct {
	cfg    config
	dialer net.Dialer
	log    *slog.Logger
	id     uint64
	ttl    time.Duration

	// ctx is cancelled, with the reason as its cause, when the session
	// ends; every goroutine of the session ends with it.
	ctx context.Context
	end context.CancelCauseFunc
	wg  sync.WaitGroup // the supervisor
	// wake tells the writer there is something to send (capacity 1).
	wake chan struct{}

	mu sync.Mutex // guards every field below
	// conn is the connection being served, nil between connections.
	conn net.Conn
	// queue holds the calls not yet taken by the writer, in order.
	queue []*call
	// pending holds the calls written on the current connection whose
	// answer has not come, by id.
	pending map[uint32]*call
	nextID  uint32
	// reserved holds the ids no new request may take: those of the grants
	// the program holds (heldID, by key) and of the Locks and TryLocks
	// waiting to be reissued. Reissue finds a grant by its request's id, so
	// an id reused while its grant is held would find the wrong request's.
	reserved map[uint32]struct{}
	heldID   map[string]uint32
	// held is every grant this session holds that the program knows of:
	// key to token.
	held map[string]uint64
	// strays are grants the session may hold that no caller owns: a Lock
	// or TryLock lost with a connection, a grant that crossed a Cancel, an
	// Unlock whose answer was lost. They are unlocked after the resume.
	strays []stray
	// confirmed is when the latest request the server has answered was
	// sent: the server heard from the session no earlier, so its TTL runs
	// out no earlier than confirmed+ttl.
	confirmed time.Time
	lastSent  time.Time
	ping      *call // the Ping awaiting its answer, if any
	closing   bool  // Close was called
	closeOK   bool  // the server answered Close '+'
	err       error // why the session ended; nil while it lives
}

// stray is a grant the session may hold that no caller owns; token 0 when
// its token is not known.
type stray struct {
	key   string
	token uint64
}

// call is one request of a session.
type call struct {
	action protocol.Action
	id     uint32 // given when the writer takes it
	key    string
	token  uint64 // the request's token (Unlock), or the Lock a Cancel names

	sent   bool
	sentAt time.Time
	// reissue is set on a Lock or TryLock sent on a connection that was
	// lost before its answer: it is sent again with the same id.
	reissue bool
	dropped bool // given up before it was sent: the writer skips it
	gaveUp  bool // the caller stopped waiting after it was sent
	// finished is set once the caller has its outcome (done written).
	finished bool
	done     chan result // capacity 1; nil for the session's own calls
	// internal handles the outcome of the session's own calls (Ping,
	// Cancel, give-backs); it runs with mu held.
	internal func(result)
}

// result is the outcome of a call: an answer, or err.
type result struct {
	status byte
	token  uint64
	err    error
}

// NewSession opens a session on the server at address: HOST:PORT, or the
// nodes of a cluster as a comma-separated list ("a:22119,b:22119,c:22119"),
// a HOST being an IP or a DNS name with one or several records (all of
// them are tried). It tries every address once, in random order, each
// attempt bounded by WithDialTimeout, and opens on the first that
// answers; later resumes do the same, round after round, with any node.
// Use WithTTL, WithSource, WithAuthToken, WithDialTimeout, WithTLS,
// WithResolver and WithLogger to configure it. It returns ErrUnreachable
// when no address answered, ErrRefused when the server refused the
// session (a wrong auth token, the connection limit, a server without
// sessions), or ctx's error.
func NewSession(ctx context.Context, address string, opts ...Option) (*Session, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	cfg.setAddresses(address)
	if cfg.ttl < 0 {
		return nil, fmt.Errorf("%w: negative TTL %v", ErrRefused, cfg.ttl)
	}
	if len(cfg.source) > protocol.MaxField || len(cfg.auth) > protocol.MaxField {
		return nil, fmt.Errorf("%w: source or auth token %w", ErrRefused, protocol.ErrFieldTooLong)
	}
	s := &Session{
		cfg:      cfg,
		dialer:   net.Dialer{KeepAliveConfig: sessionKeepAlive},
		log:      cfg.logger,
		wake:     make(chan struct{}, 1),
		pending:  make(map[uint32]*call),
		held:     make(map[string]uint64),
		heldID:   make(map[string]uint32),
		reserved: make(map[uint32]struct{}),
	}
	s.ctx, s.end = context.WithCancelCause(context.Background())
	conn, op, sentAt, err := s.open(ctx, 0)
	if err != nil {
		s.end(err)
		return nil, err
	}
	s.id = op.Session
	s.ttl = time.Duration(op.TTLMillis) * time.Millisecond
	s.confirmed, s.lastSent = sentAt, sentAt
	s.wg.Add(1)
	go s.run(conn)
	return s, nil
}

// ID returns the session's id as the server gave it (the JSON API and the
// dashboard show it as 16 hex digits: fmt.Sprintf("%016x", id)).
func (s *Session) ID() uint64 { return s.id }

// TTL returns the TTL the server granted.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done returns a channel closed when the session has ended: lost, or
// closed by Close. Every hold it had is then gone (or goes at the
// server's expiry).
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the session lives, ErrSessionClosed after Close,
// and an error wrapping ErrSessionLost (with the reason) when it was lost.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Lock waits for key in FIFO order with every other waiter, this
// session's own included (a goroutine that locks a key the session already
// holds waits for it, as with a non-reentrant mutex), and returns the
// grant's fencing token.
//
// A nil error always means the key is held, and a non-nil one that the
// caller holds nothing. When ctx ends first, the session sends Cancel and
// Lock returns ctx's error at once; if the grant crossed the Cancel, the
// session unlocks it (by its token) as soon as the answer comes. Lock
// returns ErrReset when the key or this source was reset while waiting,
// and an error wrapping ErrSessionLost or ErrSessionClosed once the
// session ended. A dropped connection does not fail it: the session
// resumes (through any node of a cluster) and reissues it with its id, so
// it goes on waiting, or returns the grant the server made before the
// drop.
func (s *Session) Lock(ctx context.Context, key string) (uint64, error) {
	if err := validKey(key); err != nil {
		return 0, fmt.Errorf("lock: %w", err)
	}
	res, err := s.roundTrip(ctx, s.newCall(protocol.Lock, key, 0))
	if err != nil {
		return 0, fmt.Errorf("lock %q: %w", key, err)
	}
	if res.status == '+' {
		return res.token, nil
	}
	return 0, fmt.Errorf("lock %q: %w", key, s.refusal(res.status, ErrReset))
}

// TryLock takes key only if nobody holds it now (this session included)
// and returns the grant's token. It returns ErrLocked when someone holds
// it. As for Lock, a non-nil error means nothing is held.
func (s *Session) TryLock(ctx context.Context, key string) (uint64, error) {
	if err := validKey(key); err != nil {
		return 0, fmt.Errorf("trylock: %w", err)
	}
	res, err := s.roundTrip(ctx, s.newCall(protocol.TryLock, key, 0))
	if err != nil {
		return 0, fmt.Errorf("trylock %q: %w", key, err)
	}
	switch res.status {
	case '+':
		return res.token, nil
	case '#':
		return 0, fmt.Errorf("trylock %q: %w", key, ErrLocked)
	}
	return 0, fmt.Errorf("trylock %q: %w", key, s.refusal(res.status, ErrRefused))
}

// Unlock releases the grant of key with that token (0: whichever grant
// this session holds on key). It returns ErrNotHeld when the session does
// not hold it: nothing is released, never another holder's grant.
//
// Unlock is never sent twice: when its answer is lost (the connection
// broke, or ctx ended after the frame was written), it returns
// ErrOutcomeUnknown. The session then settles that grant after the resume
// with an Unlock naming its token, which can release that grant only.
func (s *Session) Unlock(ctx context.Context, key string, token uint64) error {
	if err := validKey(key); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	res, err := s.roundTrip(ctx, s.newCall(protocol.Unlock, key, token))
	if err != nil {
		return fmt.Errorf("unlock %q: %w", key, err)
	}
	if res.status == '+' {
		return nil
	}
	return fmt.Errorf("unlock %q: %w", key, s.refusal(res.status, ErrNotHeld))
}

// ResetByKey drops key's holder, whoever it is, and refuses its waiters,
// as the TCP action and the dashboard do.
func (s *Session) ResetByKey(ctx context.Context, key string) error {
	if err := validKey(key); err != nil {
		return fmt.Errorf("reset key: %w", err)
	}
	return s.reset(ctx, protocol.ResetByKey, key)
}

// ResetBySource refuses every waiter of source and releases every key it
// holds; empty source means this connection's IP address. This session
// stays open, though it loses its holds if source is its own.
func (s *Session) ResetBySource(ctx context.Context, source string) error {
	if len(source) > protocol.MaxField {
		return fmt.Errorf("reset source: %w: source %w", ErrRefused, protocol.ErrFieldTooLong)
	}
	return s.reset(ctx, protocol.ResetBySource, source)
}

func (s *Session) reset(ctx context.Context, action protocol.Action, what string) error {
	res, err := s.roundTrip(ctx, s.newCall(action, what, 0))
	if err != nil {
		return fmt.Errorf("%s %q: %w", actionName(action), what, err)
	}
	if res.status == '+' {
		return nil
	}
	return fmt.Errorf("%s %q: %w", actionName(action), what, s.refusal(res.status, ErrRefused))
}

// actionName names an action in errors.
func actionName(a protocol.Action) string {
	switch a {
	case protocol.ResetByKey:
		return "reset key"
	case protocol.ResetBySource:
		return "reset source"
	}
	return a.String()
}

// refusal is the error of a non-'+' answer.
func (s *Session) refusal(status byte, err error) error {
	switch status {
	case '-':
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing && errors.Is(err, ErrReset) {
			return fmt.Errorf("%w (refused by the Close of this session)", ErrSessionClosed)
		}
		return err
	}
	return fmt.Errorf("%w: unexpected answer %q", ErrUnreachable, status)
}

// Do runs fn while holding key: it locks, calls fn with the token, and
// unlocks when fn returns — or panics, or calls runtime.Goexit: the key is
// unlocked first, then the panic goes on. The unlock is not cancelled by
// ctx. fn's context is cancelled, with the session's error as its cause,
// when the session ends while fn runs: the hold is then gone, and Do
// returns an error wrapping Err() besides fn's.
func (s *Session) Do(ctx context.Context, key string, fn func(ctx context.Context, token uint64) error) error {
	token, err := s.Lock(ctx, key)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	returned := false
	defer func() {
		stop()
		cancel(nil)
		if !returned {
			_ = s.release(ctx, key, token)
		}
	}()
	ferr := fn(fctx, token)
	returned = true
	return errors.Join(ferr, s.release(ctx, key, token))
}

// release unlocks what Do took, unless the session ended meanwhile.
func (s *Session) release(ctx context.Context, key string, token uint64) error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%q was held until the session ended: %w", key, err)
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.ttl+s.cfg.dialTimeout)
	defer cancel()
	return s.Unlock(uctx, key, token)
}

// Close ends the session: the server refuses its pending Locks and
// releases every key it holds, then Close stops the session's goroutines.
// When the server cannot be told before ctx ends, Close still stops
// everything and returns an error: the server then releases the holds when
// the TTL passes. Close after the session ended returns nil after a Close,
// Err() after a loss.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		if errors.Is(err, ErrSessionClosed) {
			return nil
		}
		return err
	}
	s.closing = true
	s.mu.Unlock()

	var err error
	for {
		// A Close lost with its connection is sent again on the next one:
		// closing twice is harmless, and a Close that did apply makes that
		// resume fail, which ends the session as closed.
		_, err = s.roundTrip(ctx, s.newCall(protocol.Close, "", 0))
		if !errors.Is(err, ErrDisconnected) {
			break
		}
	}
	s.finish(ErrSessionClosed)
	s.wg.Wait()
	if err != nil && !errors.Is(err, ErrSessionClosed) {
		return fmt.Errorf("close session %016x: %w; the server releases its holds when its TTL (%v) passes", s.id, err, s.ttl)
	}
	return nil
}

// validKey checks a key before anything is sent.
func validKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrRefused)
	case len(key) > protocol.MaxField:
		return fmt.Errorf("%w: key of %d bytes %w", ErrRefused, len(key), protocol.ErrFieldTooLong)
	}
	return nil
}

func (s *Session) newCall(action protocol.Action, key string, token uint64) *call {
	return &call{action: action, key: key, token: token, done: make(chan result, 1)}
}

// roundTrip queues c and waits for its outcome or for ctx.
func (s *Session) roundTrip(ctx context.Context, c *call) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if err := s.enqueue(c); err != nil {
		return result{}, err
	}
	select {
	case r := <-c.done:
		return r, r.err
	case <-ctx.Done():
	}
	return s.giveUp(ctx, c)
}

// enqueue puts c at the end of the queue for the writer.
func (s *Session) enqueue(c *call) error {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	s.signal()
	return nil
}

// signal wakes the writer.
func (s *Session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// giveUp ends the caller's wait for c once ctx has ended.
func (s *Session) giveUp(ctx context.Context, c *call) (result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.finished { // the outcome came first: it stands
		r := <-c.done
		return r, r.err
	}
	c.finished = true
	err := ctx.Err()
	switch {
	case !c.sent && !c.reissue:
		c.dropped = true // nothing reached the server
		return result{}, err
	case c.action == protocol.Lock:
		c.gaveUp = true
		if c.sent {
			s.queue = append(s.queue, &call{action: protocol.Cancel, token: uint64(c.id), internal: func(result) {}})
			s.signal()
		} // else its reissue goes out first, and its Cancel right after it (take)
		return result{}, err
	case c.action == protocol.TryLock:
		c.gaveUp = true // a '+' to come is given back
		return result{}, err
	case c.action == protocol.Close:
		return result{}, err
	}
	c.gaveUp = true
	return result{}, fmt.Errorf("%w (%w)", ErrOutcomeUnknown, err)
}

// complete hands c its outcome, once; mu is held.
func (s *Session) complete(c *call, r result) {
	if c.internal != nil {
		c.internal(r)
		return
	}
	if c.finished {
		return
	}
	c.finished = true
	c.done <- r
}

// open opens a session (resume 0) or resumes one on the first address of
// one round that takes it: every address of the list once, in random
// order. It returns the connection of a '+' and when the frame was sent.
// A resume refused '-' ends the round (every node asks the same leader);
// a new session refused by one node is tried on the others (a node's
// connection limit is its own), and the refusal returned if none opens.
func (s *Session) open(ctx context.Context, resume uint64) (net.Conn, protocol.OpenAnswer, time.Time, error) {
	targets, err := s.cfg.targets(ctx)
	if err != nil {
		return nil, protocol.OpenAnswer{}, time.Time{}, err
	}
	var errs []error
	var refused error
	for _, t := range targets {
		conn, op, sentAt, err := s.openAt(ctx, t, resume)
		switch {
		case err == nil:
			return conn, op, sentAt, nil
		case ctx.Err() != nil:
			return nil, protocol.OpenAnswer{}, time.Time{}, context.Cause(ctx)
		case errors.Is(err, ErrSessionLost):
			return nil, op, sentAt, err
		case errors.Is(err, ErrRefused):
			refused = err
		default:
			errs = append(errs, err)
		}
	}
	if refused != nil {
		return nil, protocol.OpenAnswer{}, time.Time{}, refused
	}
	return nil, protocol.OpenAnswer{}, time.Time{}, joinUnreachable(errs)
}

// openAt dials t and sends an open frame, the whole attempt bounded by
// the dial timeout.
func (s *Session) openAt(ctx context.Context, t target, resume uint64) (net.Conn, protocol.OpenAnswer, time.Time, error) {
	open := protocol.Open{Version: protocol.SessionVersion, TTLMillis: s.ttlMS(), Resume: resume, Source: s.cfg.source, Auth: s.cfg.auth}
	frame, err := open.Append(make([]byte, 0, 32))
	if err != nil {
		return nil, protocol.OpenAnswer{}, time.Time{}, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	actx, cancel := s.cfg.attempt(ctx)
	defer cancel()
	conn, err := s.cfg.connect(ctx, actx, &s.dialer, t)
	if err != nil {
		return nil, protocol.OpenAnswer{}, time.Time{}, err
	}
	// actx bounds the exchange too: its end makes the read or write fail.
	stop := context.AfterFunc(actx, func() { _ = conn.SetDeadline(time.Now()) })
	sentAt := time.Now()
	var b [protocol.OpenAnswerSize]byte
	var n int
	if _, err = conn.Write(frame); err == nil {
		n, err = io.ReadFull(conn, b[:])
	}
	if !stop() || err != nil {
		conn.Close()
		switch {
		case n >= 1 && b[0] == '-':
			// A server that does not speak sessions answers one '-' and
			// closes: the frame's first byte is not a v1 action.
			return nil, protocol.OpenAnswer{}, time.Time{}, fmt.Errorf("%w: the server at %s refused the session (it answered '-' and closed: no session support?)", ErrRefused, t.addr)
		case ctx.Err() != nil:
			return nil, protocol.OpenAnswer{}, time.Time{}, context.Cause(ctx)
		case errors.Is(context.Cause(actx), errAttemptTimeout):
			err = fmt.Errorf("%w (%v)", errAttemptTimeout, s.cfg.dialTimeout)
		case err == nil: // stop lost the race with the attempt's end
			err = context.Cause(actx)
		}
		return nil, protocol.OpenAnswer{}, time.Time{}, fmt.Errorf("%w: %s: opening a session: %w", ErrUnreachable, t.addr, err)
	}
	op, _ := protocol.DecodeOpenAnswer(b[:]) // b is whole
	if op.Status != protocol.AnswerOK {
		conn.Close()
		if resume != 0 {
			return nil, op, sentAt, fmt.Errorf("%w: the server at %s refused to resume session %016x (expired or ended)", ErrSessionLost, t.addr, resume)
		}
		return nil, op, sentAt, fmt.Errorf("%w: the server at %s refused the session (wrong auth token, connection limit, or unknown version)", ErrRefused, t.addr)
	}
	if op.TTLMillis == 0 || op.Session == 0 {
		conn.Close()
		return nil, op, sentAt, fmt.Errorf("%w: the server opened a session with ttl %d ms, id %d", ErrUnreachable, op.TTLMillis, op.Session)
	}
	return conn, op, sentAt, nil
}

func (s *Session) ttlMS() uint32 {
	ms := s.cfg.ttl.Milliseconds()
	switch {
	case s.cfg.ttl > 0 && ms == 0:
		return 1
	case ms > 1<<32-1:
		return 1<<32 - 1
	}
	return uint32(ms)
}

// run is the supervisor: it serves a connection until it breaks, then
// resumes on a new one, until the session ends.
func (s *Session) run(conn net.Conn) {
	defer s.wg.Done()
	for {
		err := s.serve(conn)
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return
		}
		if s.closing && s.closeOK {
			s.mu.Unlock()
			s.finish(ErrSessionClosed)
			return
		}
		s.disconnected(err)
		s.mu.Unlock()
		s.log.Info("session connection lost; resuming", "session", fmt.Sprintf("%016x", s.id), "err", err)
		conn, err = s.resume()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				err = ErrSessionClosed
			}
			s.finish(err)
			return
		}
	}
}

// serve runs the reader and the writer of conn until one of them stops,
// and returns why.
func (s *Session) serve(conn net.Conn) error {
	stop := make(chan struct{})
	var once sync.Once
	var why error // written once, read after wg.Wait
	broken := func(err error) {
		once.Do(func() {
			why = err
			close(stop)
			conn.Close()
		})
	}
	s.mu.Lock()
	if s.err != nil { // ended while the connection was being made
		s.mu.Unlock()
		conn.Close()
		return s.err
	}
	s.conn = conn
	s.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { broken(s.read(conn)) })
	wg.Go(func() { broken(s.write(conn, stop)) })
	wg.Wait()
	s.mu.Lock()
	s.conn = nil
	s.mu.Unlock()
	return why
}

// disconnected fails the calls that were waiting on the lost connection;
// mu is held. Lock and TryLock requests among them may have been granted:
// they become strays, unlocked after the resume.
func (s *Session) disconnected(cause error) {
	var reissue []*call
	for id, c := range s.pending {
		delete(s.pending, id)
		switch c.action {
		case protocol.Lock, protocol.TryLock:
			if c.internal == nil && !c.gaveUp {
				// Sent again with its id after the resume: the server
				// answers the grant it made for it, if it made one.
				c.sent, c.reissue = false, true
				s.reserved[c.id] = struct{}{}
				reissue = append(reissue, c)
				continue
			}
			s.strays = append(s.strays, stray{key: c.key})
			s.complete(c, result{err: fmt.Errorf("%w: %w", ErrDisconnected, cause)})
		case protocol.Unlock:
			if c.internal == nil {
				s.strays = append(s.strays, stray{key: c.key, token: c.token})
			}
			s.complete(c, result{err: fmt.Errorf("%w: %w: %w", ErrOutcomeUnknown, ErrDisconnected, cause)})
		case protocol.ResetByKey, protocol.ResetBySource:
			s.complete(c, result{err: fmt.Errorf("%w: %w: %w", ErrOutcomeUnknown, ErrDisconnected, cause)})
		default:
			s.complete(c, result{err: fmt.Errorf("%w: %w", ErrDisconnected, cause)})
		}
	}
	s.ping = nil
	// Queued Cancels name Locks of the lost connection, now failed; a
	// queued Ping is of no use to the next one.
	q := s.queue[:0]
	for _, c := range s.queue {
		if c.action != protocol.Cancel && c.action != protocol.Ping {
			q = append(q, c)
		}
	}
	clear(s.queue[len(q):])
	// The reissues go first, in the order they were first sent, so that
	// they keep their place before what was asked after them.
	slices.SortFunc(reissue, func(a, b *call) int { return a.sentAt.Compare(b.sentAt) })
	s.queue = append(reissue, q...)
}

// resume reconnects and resumes, round after round (every address of the
// list, in random order) with a jittered, growing back-off between
// rounds, until a node takes the session back, the server refuses it, or
// the TTL has passed since the send time of the last answered frame: the
// server heard nothing later, and may release the holds from then on.
func (s *Session) resume() (net.Conn, error) {
	for round := 0; ; round++ {
		s.mu.Lock()
		deadline := s.confirmed.Add(s.ttl)
		s.mu.Unlock()
		if !time.Now().Before(deadline) {
			return nil, s.expired()
		}
		actx, cancel := context.WithDeadline(s.ctx, deadline)
		conn, _, sentAt, err := s.open(actx, s.id)
		cancel()
		if err == nil {
			s.resumed(sentAt)
			s.log.Info("session resumed", "session", fmt.Sprintf("%016x", s.id), "address", conn.RemoteAddr().String())
			return conn, nil
		}
		if errors.Is(err, ErrSessionLost) || s.ctx.Err() != nil {
			if s.ctx.Err() != nil {
				return nil, context.Cause(s.ctx)
			}
			return nil, err
		}
		wait := backoff(round)
		s.log.Debug("session resume failed", "session", fmt.Sprintf("%016x", s.id), "err", err, "retry_in", wait)
		t := time.NewTimer(min(wait, time.Until(deadline)))
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return nil, context.Cause(s.ctx)
		}
	}
}

// expired is the loss of a session whose TTL passed, counted from the
// send time of the last frame the server answered, without a resume.
func (s *Session) expired() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Errorf("%w: its TTL (%v) passed since the last answered frame was sent (%s), without a resume",
		ErrSessionLost, s.ttl, s.confirmed.Format(time.RFC3339Nano))
}

// resumed restarts the TTL and puts the unlocks of the strays first in
// the queue, so that they reach the server before any new request (a new
// Lock of the same key must not be released by them).
func (s *Session) resumed(sentAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.confirmed, s.lastSent = sentAt, sentAt
	var head []*call
	unknown := make(map[string]bool)
	for _, st := range s.strays {
		tok, held := s.held[st.key]
		if held && (st.token == 0 || st.token == tok) {
			continue // the program holds this key through the session: no stray can hold it
		}
		if st.token == 0 {
			if unknown[st.key] {
				continue
			}
			unknown[st.key] = true
		}
		head = append(head, s.strayUnlock(st))
	}
	s.strays = nil
	s.queue = append(head, s.queue...)
}

// strayUnlock is the session's own Unlock of a stray grant. If its
// answer is lost too, the stray stays for the next resume.
func (s *Session) strayUnlock(st stray) *call {
	return &call{action: protocol.Unlock, key: st.key, token: st.token, internal: func(r result) {
		switch {
		case r.err != nil && errors.Is(r.err, ErrDisconnected):
			s.strays = append(s.strays, st)
		case r.err == nil && r.status == '+':
			s.log.Info("session released a stray grant", "session", fmt.Sprintf("%016x", s.id), "key", st.key, "token", r.token)
		}
	}}
}

// finish ends the session with err (once): every call fails, and ctx is
// cancelled, which stops the goroutines.
func (s *Session) finish(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	s.end(err)
	if s.conn != nil {
		s.conn.Close() // a write blocked on a silent peer ends now
	}
	for id, c := range s.pending {
		delete(s.pending, id)
		s.complete(c, result{err: err})
	}
	for _, c := range s.queue {
		if !c.dropped {
			s.complete(c, result{err: err})
		}
	}
	s.queue = nil
	s.strays = nil
	clear(s.held)
	clear(s.heldID)
	clear(s.reserved)
	if !errors.Is(err, ErrSessionClosed) {
		s.log.Warn("session lost", "session", fmt.Sprintf("%016x", s.id), "err", err)
	}
}

// read reads answers and hands each to its call until the connection
// fails.
func (s *Session) read(conn net.Conn) error {
	br := bufio.NewReaderSize(conn, 64*protocol.AnswerSize)
	var b [protocol.AnswerSize]byte
	for {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		s.mu.Lock()
		s.deliver(answerOf(b))
		// Deliver what else is already read under the same lock.
		for br.Buffered() >= protocol.AnswerSize {
			if _, err := io.ReadFull(br, b[:]); err != nil {
				s.mu.Unlock()
				return fmt.Errorf("read: %w", err)
			}
			s.deliver(answerOf(b))
		}
		s.mu.Unlock()
	}
}

// answerOf decodes a whole answer.
func answerOf(b [protocol.AnswerSize]byte) protocol.Answer {
	a, _ := protocol.DecodeAnswer(b[:]) // b is whole
	return a
}

// deliver settles the call an answer is for; mu is held.
func (s *Session) deliver(a protocol.Answer) {
	c := s.pending[a.ID]
	if c == nil {
		s.log.Debug("session answer for no pending request", "id", a.ID, "status", string(a.Status))
		return
	}
	if len(s.pending) >= maxPending-1 && len(s.queue) > 0 {
		s.signal() // the writer may be holding requests back
	}
	delete(s.pending, a.ID)
	if c.sentAt.After(s.confirmed) {
		s.confirmed = c.sentAt
	}
	if c == s.ping {
		s.ping = nil
	}
	if (c.action == protocol.Lock || c.action == protocol.TryLock) && a.Status == protocol.AnswerOK {
		if c.gaveUp {
			// The grant crossed the Cancel (or the caller's end): nobody
			// owns it, so it goes back at once, by its token.
			s.queue = append(s.queue, s.strayUnlock(stray{key: c.key, token: a.Token}))
			s.signal()
		} else {
			s.held[c.key] = a.Token
			s.heldID[c.key] = c.id
			s.reserved[c.id] = struct{}{}
		}
	}
	s.complete(c, result{status: a.Status, token: a.Token})
	if c.action == protocol.Close && a.Status == protocol.AnswerOK {
		s.closeOK = true
	}
}

// write sends the queued requests, all that are queued in one write, and
// the Pings, until the connection fails or stop is closed.
func (s *Session) write(conn net.Conn, stop <-chan struct{}) error {
	pingEvery := s.ttl / 3
	deadAfter := s.ttl / 4 // a Ping unanswered this long: the connection is dead
	writeTimeout := max(s.ttl/3, time.Second)
	buf := make([]byte, 0, 4096)
	timer := time.NewTimer(pingEvery)
	defer timer.Stop()
	for {
		now := time.Now()
		s.mu.Lock()
		// The server may release the holds once the TTL has passed since
		// the send time of the last frame it answered: the session counts
		// itself lost then, connected or not (resume sees the TTL gone).
		lostAt := s.confirmed.Add(s.ttl)
		if !now.Before(lostAt) {
			s.mu.Unlock()
			return fmt.Errorf("no answer from the server for the TTL (%v)", s.ttl)
		}
		if s.ping != nil && s.ping.sent && now.Sub(s.ping.sentAt) >= deadAfter {
			s.mu.Unlock()
			return fmt.Errorf("no answer to Ping for %v", deadAfter)
		}
		if s.ping == nil && (now.Sub(s.lastSent) >= pingEvery || now.Sub(s.confirmed) >= pingEvery) {
			s.ping = &call{action: protocol.Ping, internal: func(result) {}}
			s.queue = append(s.queue, s.ping)
		}
		buf = s.take(buf[:0], now)
		var wait time.Duration
		switch {
		case s.ping != nil && s.ping.sent:
			wait = s.ping.sentAt.Add(deadAfter).Sub(now)
		case s.ping != nil: // held back: an answer wakes the writer
			wait = pingEvery
		default:
			wait = earlier(s.lastSent, s.confirmed).Add(pingEvery).Sub(now)
		}
		wait = min(wait, lostAt.Sub(now))
		s.mu.Unlock()
		if len(buf) > 0 {
			_ = conn.SetWriteDeadline(earlier(now.Add(writeTimeout), lostAt))
			if _, err := conn.Write(buf); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			continue // what was queued during the write goes next
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-s.wake:
		case <-timer.C:
		case <-stop:
			return nil
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		}
	}
}

// limitFor is how many requests may be pending when c is sent: the last
// place is kept for a Ping, so that a session whose every request waits
// can still keep itself alive.
func limitFor(c *call) int {
	if c.action == protocol.Ping {
		return maxPending
	}
	return maxPending - 1
}

// isReserved reports whether id may not be given to a new request; mu is
// held.
func (s *Session) isReserved(id uint32) bool {
	_, ok := s.reserved[id]
	return ok
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// take moves the queued calls the server may receive now into pending
// and appends their frames to buf; mu is held. A call is held back while
// maxPending requests await their answer (a Cancel never waits: it is not
// pending).
func (s *Session) take(buf []byte, now time.Time) []byte {
	rest := s.queue[:0]
	for _, c := range s.queue {
		switch {
		case c.dropped:
			continue
		case c.action != protocol.Cancel && len(s.pending) >= limitFor(c):
			rest = append(rest, c)
			continue
		}
		c.sent, c.sentAt = true, now
		if c.action == protocol.Cancel {
			buf, _ = protocol.Request{Action: protocol.Cancel, ID: uint32(c.token)}.Append(buf)
			continue
		}
		if c.reissue {
			delete(s.reserved, c.id)
		}
		if !c.reissue || s.pending[c.id] != nil {
			c.id = s.nextID
			for s.pending[c.id] != nil || s.isReserved(c.id) {
				c.id++
			}
			s.nextID = c.id + 1
		}
		s.pending[c.id] = c
		if c.action == protocol.Unlock && c.internal == nil {
			if tok, ok := s.held[c.key]; ok && (c.token == 0 || c.token == tok) {
				delete(s.held, c.key)
				delete(s.reserved, s.heldID[c.key])
				delete(s.heldID, c.key)
			}
		}
		buf, _ = protocol.Request{Action: c.action, ID: c.id, Token: c.token, Key: c.key}.Append(buf) // keys checked by validKey
		if c.action == protocol.Lock && c.gaveUp {
			// A reissue whose caller gave up before it went out: withdrawn
			// at once (a grant it finds is given back when its '+' comes).
			buf, _ = protocol.Request{Action: protocol.Cancel, ID: c.id}.Append(buf)
		}
	}
	if len(rest) < len(s.queue) {
		s.lastSent = now
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	return buf
}
