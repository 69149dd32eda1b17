package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
)

// MaxPending bounds the requests pending (arrived, not yet answered) on one
// session connection; one more drops the connection.
const MaxPending = protocol.MaxPending

// TTL bounds of a session, in milliseconds (docs/protocol.md).
const (
	MinTTLMillis = 1000
	MaxTTLMillis = 600000
)

// sessionKeepAlive notices a vanished peer of a session connection.
var sessionKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 4}

var (
	errTooManyPending = fmt.Errorf("more than %d requests pending", MaxPending)
	errBadVersion     = errors.New("unknown session protocol version")
	errBadAuth        = errors.New("wrong or missing auth token")
)

// sessionConn is one session connection: a reader (the connection's own
// goroutine, running serve) and a writer goroutine that flushes answers
// produced elsewhere (grants handed over by other connections, durable
// requests finishing). Answers are appended to out and written in batches:
// whoever finds no write in progress writes everything queued.
type sessionConn struct {
	s      *Server
	c      net.Conn
	rd     *bufio.Reader
	link   *locker.Link
	remote string
	raw    *rawWriter // c's socket, to write without a deadline; nil if c has none

	// mu guards every field below. Table callbacks take it under a key's
	// mutex, so nothing here calls the Table while holding it.
	mu      sync.Mutex
	out     []byte     // answers not yet handed to a write
	spare   []byte     // the other buffer of the pair
	grants  []grantRef // '+' grants in out, by offset
	pending map[uint32]*pendingReq
	writing bool       // a goroutine is writing; it writes until out is empty
	closing bool       // close once out is written
	dead    bool       // the connection is gone: nothing more is written
	orphans []grantRef // grants whose answer can no longer be written
	inWrite int        // bytes handed to the write in progress
	// drained is signalled, when drainWaiter is set, after each write:
	// the reader waits on it for room under MaxUnwritten.
	drained     sync.Cond
	drainWaiter bool
	kick        chan struct{}
	finished    chan struct{} // closed when serve ends: the writer ends

	requests sync.WaitGroup // goroutines of durable requests
}

// grantRef is a grant whose '+' sits in the out buffer, ending at end.
type grantRef struct {
	key   string
	token uint64
	end   int
}

// pendingReq is one pending request: a Lock with its Pending, or a request
// being carried out in a goroutine of its own.
type pendingReq struct {
	action   protocol.Action
	key      string
	p        *locker.Pending
	canceled bool // a Cancel came before p was known
	inline   bool // its callback runs on the reader, which flushes
}

// serveSession serves a connection whose first bytes (in first) start a
// session open frame.
func (s *Server) serveSession(c net.Conn, first []byte) {
	sc := &sessionConn{s: s, c: c, remote: c.RemoteAddr().String(),
		pending: make(map[uint32]*pendingReq), kick: make(chan struct{}, 1), finished: make(chan struct{})}
	sc.drained.L = &sc.mu
	sc.rd = bufio.NewReaderSize(io.MultiReader(&prefixReader{b: first}, c), 4096)
	sc.raw = rawConn(c)
	if !sc.open() {
		return
	}
	var writer sync.WaitGroup
	writer.Go(sc.writeLoop)
	sc.serve()
	sc.teardown()
	close(sc.finished)
	writer.Wait()
}

// prefixReader yields bytes already read from the connection.
type prefixReader struct{ b []byte }

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.b)
	p.b = p.b[n:]
	return n, nil
}

// open reads the open frame and opens or resumes the session; false when
// the connection is done (refused, or it left).
func (sc *sessionConn) open() bool {
	s := sc.s
	_ = sc.c.SetReadDeadline(time.Now().Add(s.RequestTimeout))
	hdr, err := sc.rd.Peek(2)
	if err != nil {
		sc.incomplete(protocol.SessionOpen, err)
		return false
	}
	if hdr[1] != protocol.SessionVersion {
		sc.refuseOpen(errBadVersion)
		return false
	}
	var o protocol.Open
	for need := protocol.OpenHeaderSize; ; {
		b, err := sc.rd.Peek(need)
		if err != nil {
			sc.incomplete(protocol.SessionOpen, err)
			return false
		}
		var n int
		o, n, err = protocol.DecodeOpen(b)
		if err == nil {
			_, _ = sc.rd.Discard(n)
			break
		}
		if !errors.Is(err, protocol.ErrShort) {
			sc.refuseOpen(err)
			return false
		}
		need = openNeed(b)
	}
	if s.AuthToken != "" && !s.authOK(o.Auth) {
		sc.refuseOpen(errBadAuth)
		return false
	}
	closer := sc.closeSoon
	if o.Resume != 0 {
		sc.link, err = s.Table.ResumeSession(locker.SessionID(o.Resume), sc.remote, closer)
	} else {
		source := o.Source
		if source == "" {
			source = peerIP(sc.c.RemoteAddr())
		}
		sc.link, err = s.Table.OpenSession(source, sc.remote, s.ttlFor(o.TTLMillis), closer)
	}
	if errors.Is(err, locker.ErrJournal) {
		// Not recorded, or not known to be: never the 13-byte refusal,
		// which a client reads as "unknown session" (SPEC §8.4, §8.5).
		s.Logger.Warn("session open not recorded: connection closed without an answer", "peer", sc.remote, "err", err)
		if errors.Is(err, locker.ErrOutcomeUnknown) {
			s.ambiguous(protocol.SessionOpen)
		}
		return false
	}
	if err != nil {
		sc.refuseOpen(err)
		return false
	}
	_ = sc.c.SetReadDeadline(time.Time{})
	if tc, ok := sc.c.(*net.TCPConn); ok {
		if err := tc.SetKeepAliveConfig(sessionKeepAlive); err != nil {
			s.Logger.Warn("keepalive not set on a session connection", "peer", sc.remote, "err", err)
		}
	}
	ans := protocol.OpenAnswer{Status: protocol.AnswerOK, TTLMillis: uint32(sc.link.TTL() / time.Millisecond), Session: uint64(sc.link.ID())}
	_ = sc.c.SetWriteDeadline(time.Now().Add(s.RequestTimeout))
	if _, err := sc.c.Write(ans.Append(nil)); err != nil {
		// Open and never told: a resume later finds it, or it expires.
		sc.link.Detach()
		return false
	}
	s.Observer.Request(protocol.SessionOpen, ResultOK)
	s.Logger.Debug("session opened", "session", sc.link.ID().String(), "peer", sc.remote, "resumed", o.Resume != 0)
	return true
}

// openNeed is how many bytes the open frame in b needs at least.
func openNeed(b []byte) int {
	at := protocol.OpenHeaderSize + int(int8(b[14]))
	if len(b) <= at {
		return at + 1
	}
	return at + 1 + int(int8(b[at]))
}

func (s *Server) ttlFor(ms uint32) time.Duration {
	if ms == 0 {
		return s.SessionTTL
	}
	return time.Duration(min(max(ms, MinTTLMillis), MaxTTLMillis)) * time.Millisecond
}

func (sc *sessionConn) refuseOpen(reason error) {
	sc.s.logRejected("session refused", "peer", sc.remote, "reason", reason.Error())
	sc.s.Observer.Request(protocol.SessionOpen, ResultInvalid)
	_ = sc.c.SetWriteDeadline(time.Now().Add(sc.s.RequestTimeout))
	_, _ = sc.c.Write(protocol.OpenAnswer{Status: protocol.AnswerFail}.Append(nil))
}

func (sc *sessionConn) incomplete(a protocol.Action, err error) {
	if !sc.s.closing.Load() && !errors.Is(err, io.EOF) {
		sc.s.Logger.Warn("session dropped: frame incomplete", "peer", sc.remote, "err", err)
		sc.s.Observer.Request(a, ResultInvalid)
	}
}

// serve reads requests until the connection ends or the session does.
//
// Answers keep flowing whatever the peer sends: before every read that
// may wait for the peer (the buffer holds no whole frame) the answers
// queued so far are written, and while more than MaxUnwritten bytes of
// answers wait to be written the reader stops reading (TCP flow control
// then holds the sender) and the session's TTL stops running. A read
// deadline is set when a frame is found incomplete and cleared when the
// reader waits at a frame boundary, so it bounds each frame's arrival,
// not the connection's.
func (sc *sessionConn) serve() {
	deadline := false // a read deadline is set
	for {
		if !sc.haveFrame() {
			// About to wait for the peer: send what is queued first.
			sc.flush(sc.s.RequestTimeout)
			if !sc.awaitRoom() {
				return
			}
			if sc.rd.Buffered() == 0 {
				if deadline {
					_ = sc.c.SetReadDeadline(time.Time{}) // idle is bounded by the TTL
					deadline = false
				}
			} else {
				// A frame has begun: the rest of it must come within the
				// request timeout.
				_ = sc.c.SetReadDeadline(time.Now().Add(sc.s.RequestTimeout))
				deadline = true
			}
		}
		if _, err := sc.rd.Peek(1); err != nil {
			return // EOF, reset, or closed by an expiry, an end or a resume
		}
		if sc.rd.Buffered() < protocol.RequestHeaderSize && !deadline {
			_ = sc.c.SetReadDeadline(time.Now().Add(sc.s.RequestTimeout))
			deadline = true
		}
		hdr, err := sc.rd.Peek(protocol.RequestHeaderSize)
		if err != nil {
			sc.incomplete(protocol.Action(hdr[0]), err)
			return
		}
		n := protocol.RequestSize(hdr)
		if sc.rd.Buffered() < n && !deadline {
			_ = sc.c.SetReadDeadline(time.Now().Add(sc.s.RequestTimeout))
			deadline = true
		}
		b, err := sc.rd.Peek(n)
		if err != nil {
			sc.incomplete(protocol.Action(hdr[0]), err)
			return
		}
		req, _, _ := protocol.DecodeRequest(b)
		_, _ = sc.rd.Discard(n)
		sc.link.Touch()
		if !sc.dispatch(req) {
			return
		}
	}
}

// haveFrame reports whether the read buffer holds a whole request, so that
// reading it waits for nobody.
func (sc *sessionConn) haveFrame() bool {
	buffered := sc.rd.Buffered()
	if buffered < protocol.RequestHeaderSize {
		return false
	}
	hdr, _ := sc.rd.Peek(protocol.RequestHeaderSize)
	return buffered >= protocol.RequestSize(hdr)
}

// MaxUnwritten is how many bytes of one connection's answers may wait in
// the server to be written before it stops reading that connection.
const MaxUnwritten = 64 << 10

// awaitRoom waits, without reading, until fewer than MaxUnwritten bytes of
// answers wait to be written; false when the connection died meanwhile.
// The session's TTL does not run while it waits: the peer is being held
// back, not silent. The wait is bounded: every write gives up after the
// request timeout and kills the connection.
func (sc *sessionConn) awaitRoom() bool {
	sc.mu.Lock()
	full, dead := sc.unwritten() >= MaxUnwritten, sc.dead
	sc.mu.Unlock()
	if !full || dead {
		return !dead
	}
	stallsTotal.Add(1)
	// Stall takes the session's mutex: not under sc.mu.
	sc.link.Stall()
	defer sc.link.Unstall()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for sc.unwritten() >= MaxUnwritten && !sc.dead {
		if !sc.writing {
			// Nobody is writing (a hand-off gave up): write it here.
			sc.mu.Unlock()
			sc.flush(sc.s.RequestTimeout)
			sc.mu.Lock()
			continue
		}
		sc.drainWaiter = true
		sc.drained.Wait()
	}
	return !sc.dead
}

// unwritten is how many bytes of answers wait to be written, those of a
// write in progress included. sc.mu must be held.
func (sc *sessionConn) unwritten() int { return len(sc.out) + sc.inWrite }

// stallsTotal counts the times a reader stopped reading because its
// connection's answers were not being taken (for tests).
var stallsTotal atomic.Int64

// dispatch carries out one request; false ends the connection.
func (sc *sessionConn) dispatch(req protocol.Request) bool {
	s := sc.s
	if req.Action == protocol.Cancel {
		sc.cancel(req.ID)
		s.Observer.Request(protocol.Cancel, ResultOK)
		return true
	}
	sc.mu.Lock()
	_, dup := sc.pending[req.ID]
	sc.mu.Unlock()
	if dup {
		sc.invalid(req, errors.New("id of a pending request"))
		return true
	}
	switch req.Action {
	case protocol.Ping:
		sc.answer(req.ID, protocol.AnswerOK, 0, nil)
		s.Observer.Request(protocol.Ping, ResultOK)
		return true
	case protocol.Close:
		sc.closeSession(req.ID)
		return false
	case protocol.Lock, protocol.TryLock, protocol.Unlock, protocol.ResetByKey, protocol.ResetBySource:
	default:
		sc.invalid(req, protocol.ErrUnknownAction)
		return true
	}
	if req.BadSize {
		sc.invalid(req, protocol.ErrNegativeSize)
		return true
	}
	if req.Key == "" && req.Action != protocol.ResetBySource {
		sc.invalid(req, protocol.ErrEmptyKey)
		return true
	}
	pr := &pendingReq{action: req.Action, key: req.Key, inline: !s.Table.Durable()}
	sc.mu.Lock()
	if len(sc.pending) >= MaxPending {
		sc.mu.Unlock()
		s.Logger.Warn("session dropped", "peer", sc.remote, "session", sc.link.ID().String(), "reason", errTooManyPending.Error())
		s.Observer.Request(req.Action, ResultInvalid)
		return false
	}
	sc.pending[req.ID] = pr
	sc.mu.Unlock()
	if pr.inline {
		sc.carryOut(req, pr)
		return true
	}
	// With a journal a request waits for an fsync: run it beside the
	// reader, so that one request never holds up the others' answers.
	sc.requests.Go(func() {
		sc.carryOut(req, pr)
		sc.flush(sc.s.RequestTimeout)
	})
	return true
}

// carryOut performs a request of the five table actions and answers it.
func (sc *sessionConn) carryOut(req protocol.Request, pr *pendingReq) {
	s := sc.s
	switch req.Action {
	case protocol.Lock:
		p, err := sc.link.Lock(req.Key, req.ID, func(token uint64, err error) { sc.lockDone(req.ID, pr, token, err) })
		if err != nil {
			o := s.refused(command{action: protocol.Lock, key: req.Key, link: sc.link, holder: locker.Holder{Remote: sc.remote}}, err)
			if o.drop {
				sc.drop()
				return
			}
			sc.finish(req, pr, o.answer, 0, false)
			return
		}
		sc.mu.Lock()
		pr.p = p
		pr.inline = false // from now on its callback runs elsewhere
		canceled := pr.canceled
		sc.mu.Unlock()
		if canceled {
			p.Cancel()
		}
	case protocol.TryLock, protocol.Unlock, protocol.ResetByKey, protocol.ResetBySource:
		cmd := command{action: req.Action, key: req.Key, link: sc.link, id: req.ID, token: req.Token,
			holder: locker.Holder{Remote: sc.remote}}
		if req.Action == protocol.ResetBySource && cmd.key == "" {
			cmd.key = peerIP(sc.c.RemoteAddr())
		}
		o := s.execute(cmd)
		if o.drop {
			sc.drop()
			return
		}
		sc.finish(req, pr, o.answer, o.token, o.granted)
	}
}

// drop closes the connection without answering (an outcome not known, an
// answer not confirmed): the client resumes and reissues. The reader then
// finds the connection closed and tears it down.
func (sc *sessionConn) drop() {
	sc.mu.Lock()
	if !sc.dead {
		sc.die()
	}
	sc.mu.Unlock()
}

// lockDone is a session Lock's callback, run without the table's locks by
// whichever goroutine decided it: the reader (the key was free), another
// connection's reader (a release handed the key over), the reaper or the
// web (an end). The answer is written at once rather than handed to the
// writer goroutine: one wake-up less on every handover.
func (sc *sessionConn) lockDone(id uint32, pr *pendingReq, token uint64, err error) {
	s := sc.s
	switch {
	case err == nil:
		s.Observer.Request(protocol.Lock, ResultOK)
	case errors.Is(err, locker.ErrDetached):
		// Withdrawn with its connection: answered nowhere.
		s.Observer.Request(protocol.Lock, ResultHangUp)
		sc.mu.Lock()
		sc.unpend(id, pr)
		sc.mu.Unlock()
		return
	case errors.Is(err, locker.ErrOutcomeUnknown):
		// A grant to it may have been recorded (a handover whose commit
		// was cut short): never '-'. The connection closes unanswered;
		// the client resumes and reissues, and finds the grant if it
		// exists (SPEC §8.5).
		s.Logger.Warn("outcome of a session's Lock not known: connection closed without an answer",
			"session", sc.link.ID().String(), "peer", sc.remote, "key", pr.key, "reason", err.Error())
		sc.mu.Lock()
		sc.unpend(id, pr)
		sc.mu.Unlock()
		sc.drop()
		return
	default:
		s.Observer.Request(protocol.Lock, ResultFail)
	}
	status := protocol.AnswerOK
	var g *grantRef
	if err != nil {
		status = protocol.AnswerFail
		token = 0
	} else {
		g = &grantRef{key: pr.key, token: token}
	}
	sc.mu.Lock()
	sc.unpend(id, pr)
	inline := pr.inline
	sc.queue(id, status, token, g)
	sc.mu.Unlock()
	if !inline {
		sc.flush(handoffPatience)
	}
}

// finish answers a request carried out by the reader or its goroutine.
func (sc *sessionConn) finish(req protocol.Request, pr *pendingReq, status byte, token uint64, granted bool) {
	sc.s.Observer.Request(req.Action, resultOf(status))
	var g *grantRef
	if granted {
		g = &grantRef{key: req.Key, token: token}
	}
	sc.mu.Lock()
	sc.unpend(req.ID, pr)
	sc.queue(req.ID, status, token, g)
	sc.mu.Unlock()
}

// invalid answers '-' to a malformed request; the session goes on.
func (sc *sessionConn) invalid(req protocol.Request, reason error) {
	sc.s.logRejected("session request rejected", "peer", sc.remote, "action", req.Action.String(), "reason", reason.Error())
	sc.s.Observer.Request(req.Action, ResultInvalid)
	sc.answer(req.ID, protocol.AnswerFail, 0, nil)
}

// cancel withdraws the pending Lock id, if there is one; its callback
// answers it.
func (sc *sessionConn) cancel(id uint32) {
	sc.mu.Lock()
	pr := sc.pending[id]
	if pr == nil || pr.action != protocol.Lock {
		sc.mu.Unlock()
		return // names no pending Lock: ignored
	}
	p := pr.p
	if p == nil {
		pr.canceled = true // its Lock is being queued: it cancels itself
	}
	sc.mu.Unlock()
	if p != nil {
		p.Cancel()
	}
}

// closeSession serves Close: pending Locks are refused, holds released,
// '+' answered, and the connection closed once written.
func (sc *sessionConn) closeSession(id uint32) {
	sc.requests.Wait() // durable requests already started answer first
	res, err := sc.link.Close()
	if errors.Is(err, locker.ErrOutcomeUnknown) {
		sc.s.Logger.Warn("session close not known to be recorded: connection closed without an answer",
			"session", sc.link.ID().String(), "peer", sc.remote, "err", err)
		sc.s.ambiguous(protocol.Close)
		sc.drop()
		return
	}
	status := protocol.AnswerOK
	if err != nil && !errors.Is(err, locker.ErrJournal) {
		status = protocol.AnswerFail
	}
	if err != nil {
		sc.s.Logger.Warn("session close", "session", sc.link.ID().String(), "peer", sc.remote, "err", err)
	}
	sc.s.Observer.Request(protocol.Close, resultOf(status))
	sc.s.Logger.Debug("session closed", "session", sc.link.ID().String(), "released", res.Released, "refused", res.Refused)
	sc.answer(id, status, 0, nil)
	sc.mu.Lock()
	sc.closing = true
	sc.mu.Unlock()
	sc.flush(sc.s.RequestTimeout)
}

// answer queues an answer and writes it when the reader is about to wait.
func (sc *sessionConn) answer(id uint32, status byte, token uint64, g *grantRef) {
	sc.mu.Lock()
	sc.queue(id, status, token, g)
	sc.mu.Unlock()
}

// queue appends an answer to out; g, if set, is the grant it announces.
// sc.mu must be held.
func (sc *sessionConn) queue(id uint32, status byte, token uint64, g *grantRef) {
	if sc.dead {
		if g != nil {
			sc.orphans = append(sc.orphans, *g)
		}
		return
	}
	sc.out = protocol.Answer{ID: id, Status: status, Token: token}.Append(sc.out)
	if g != nil {
		g.end = len(sc.out)
		sc.grants = append(sc.grants, *g)
	}
}

// unpend forgets the pending request id if it is still pr. sc.mu must be
// held.
func (sc *sessionConn) unpend(id uint32, pr *pendingReq) {
	if sc.pending[id] == pr {
		delete(sc.pending, id)
	}
}

// wake asks the writer goroutine to flush.
func (sc *sessionConn) wake() {
	select {
	case sc.kick <- struct{}{}:
	default:
	}
}

// closeSoon is the session's closer: the connection is closed once what is
// queued (the refusals of its pending Locks) is written. It is called by
// the table without its locks.
func (sc *sessionConn) closeSoon() {
	sc.mu.Lock()
	sc.closing = true
	sc.mu.Unlock()
	sc.wake()
}

// writeLoop is the writer goroutine, owned by serveSession: it flushes
// answers queued by other goroutines until serve has ended.
func (sc *sessionConn) writeLoop() {
	for {
		select {
		case <-sc.kick:
			sc.flush(sc.s.RequestTimeout)
		case <-sc.finished:
			return
		}
	}
}

// handoffPatience is how long a goroutine writes answers to a connection
// that is not its own (a grant handed over by a release on another
// connection) before it leaves the rest to that connection's writer: a
// peer that does not read must not stall the releaser.
const handoffPatience = time.Millisecond

// flush writes everything queued, unless another goroutine is writing (it
// then writes what was queued meanwhile too). patience bounds each write:
// the connection's own goroutines wait up to RequestTimeout (a peer too
// slow for that is dropped); others pass handoffPatience, and what is left
// goes back to the front of the queue for the writer goroutine. A failed
// write kills the connection; the grants whose answers did not leave are
// handed on.
func (sc *sessionConn) flush(patience time.Duration) {
	sc.mu.Lock()
	if sc.writing || sc.dead {
		sc.mu.Unlock()
		return
	}
	sc.writing = true
	var lost []grantRef
	handOff := false
	for len(sc.out) > 0 && !sc.dead {
		buf, grants := sc.out, sc.grants
		sc.out, sc.grants = sc.spare[:0], nil
		sc.inWrite = len(buf)
		sc.mu.Unlock()
		n, err := sc.write(buf, patience)
		sc.mu.Lock()
		sc.inWrite = 0
		if sc.drainWaiter {
			sc.drainWaiter = false
			sc.drained.Broadcast()
		}
		if err != nil && patience < sc.s.RequestTimeout && isTimeout(err) {
			sc.requeue(buf, grants, n)
			handOff = true
			break
		}
		sc.spare = buf
		if cap(buf) > 2*MaxUnwritten {
			sc.spare = nil // a buffer grown past it by a burst is not kept
		}
		if err != nil {
			// Bytes up to n reached the kernel and may reach the peer: those
			// grants stand. The rest never left.
			for _, g := range grants {
				if g.end > n {
					lost = append(lost, g)
				}
			}
			sc.s.Logger.Info("session answers not delivered", "peer", sc.remote, "err", err)
			sc.die()
		}
	}
	sc.writing = false
	if sc.closing && !sc.dead && !handOff {
		sc.die()
	}
	if sc.drainWaiter {
		sc.drainWaiter = false
		sc.drained.Broadcast()
	}
	sc.mu.Unlock()
	sc.handBack(lost)
	if handOff {
		sc.wake()
	}
}

// write writes buf to the connection, waiting at most patience for a
// peer that does not read. The bytes are first offered to the kernel
// without a deadline: a socket with room in its send buffer takes them at
// once, and a deadline set on every write arms a runtime timer each time,
// which can wake a thread asleep in the network poller just to re-arm its
// sleep, on the handover path at that. Measured in bench-compare's workload
// C (16 sessions on one key, 3 interleaved rounds against a build that set
// the deadline on every write): handover p50 37–53 µs instead of 56–61,
// 2–4 % more acquisitions, a fifth fewer futex and a third fewer nanosleep
// calls machine-wide; p99 moved within its run-to-run noise. Only what the
// kernel did not take waits, under a deadline that is cleared afterwards.
func (sc *sessionConn) write(buf []byte, patience time.Duration) (int, error) {
	n := 0
	if sc.raw != nil {
		var err error
		if n, err = sc.raw.writeNow(buf); err != nil || n == len(buf) {
			return n, err
		}
	}
	slowWrites.Add(1)
	if patience > handoffPatience && sc.link != nil {
		// The peer is not taking its answers: while this waits, it is held
		// back, not silent, and its TTL does not run.
		sc.link.Stall()
		defer sc.link.Unstall()
	}
	_ = sc.c.SetWriteDeadline(time.Now().Add(patience))
	m, err := sc.c.Write(buf[n:])
	_ = sc.c.SetWriteDeadline(time.Time{})
	return n + m, err
}

// rawConn returns a writer to c's socket, or nil if c has none (a
// wrapped connection).
func rawConn(c net.Conn) *rawWriter {
	if scc, ok := c.(syscall.Conn); ok {
		if rc, err := scc.SyscallConn(); err == nil {
			return newRawWriter(rc)
		}
	}
	return nil
}

// slowWrites counts writes that went the deadline-bound way: what the
// socket did not take at once, or a connection without a socket (for
// tests).
var slowWrites atomic.Int64

// requeue puts the unwritten part of buf (from n on) back in front of
// what was queued meanwhile, offsets of its grants included. sc.mu must be
// held.
func (sc *sessionConn) requeue(buf []byte, grants []grantRef, n int) {
	rest := len(buf) - n
	out := make([]byte, 0, rest+len(sc.out))
	out = append(append(out, buf[n:]...), sc.out...)
	var gs []grantRef
	for _, g := range grants {
		if g.end > n {
			g.end -= n
			gs = append(gs, g)
		}
	}
	for _, g := range sc.grants {
		g.end += rest
		gs = append(gs, g)
	}
	sc.out, sc.grants = out, gs
}

// die marks the connection dead and closes it; what is still queued will
// never be written. sc.mu must be held.
func (sc *sessionConn) die() {
	sc.dead = true
	sc.orphans = append(sc.orphans, sc.grants...)
	sc.out, sc.grants = nil, nil
	sc.c.Close()
}

// handBack releases grants whose '+' never left: exactly those grants.
func (sc *sessionConn) handBack(gs []grantRef) {
	for _, g := range gs {
		if err := sc.s.Table.Release(g.key, g.token); err != nil && !errors.Is(err, locker.ErrNotHeld) {
			sc.s.Logger.Warn("could not hand on an undelivered grant", "key", g.key, "err", err)
		}
	}
}

// teardown ends the connection: the session is detached (its pending
// Locks withdrawn, its holds kept), durable requests finish, and grants
// whose answers were never written are handed on.
func (sc *sessionConn) teardown() {
	sc.mu.Lock()
	if !sc.dead {
		sc.die()
	}
	sc.mu.Unlock()
	sc.link.Detach()
	sc.requests.Wait()
	// No grant can be queued for this connection any more: its waiters
	// are withdrawn and its requests done. A flush still writing hands
	// back the grants of its own buffer when its write fails.
	sc.mu.Lock()
	orphans := sc.orphans
	sc.orphans = nil
	sc.mu.Unlock()
	sc.handBack(orphans)
}
