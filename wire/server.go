package wire

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("wire: server closed")

// Observer is told of every served request and every refused connection.
// Its methods must be fast and safe for concurrent use.
type Observer interface {
	Request(a protocol.Action, r Result)
	ConnectionRejected()
}

// AmbiguityObserver, when an Observer also implements it, is told of
// every request left without an answer because the outcome of its change
// is not known (a journal error wrapping locker.ErrOutcomeUnknown; the
// connection is closed instead, SPEC §8.5).
type AmbiguityObserver interface {
	Ambiguous(protocol.Action)
}

// ambiguous tells the Observer, if it listens, that a request of action a
// was left without an answer.
func (s *Server) ambiguous(a protocol.Action) {
	if ao, ok := s.Observer.(AmbiguityObserver); ok {
		ao.Ambiguous(a)
	}
}

type noObserver struct{}

func (noObserver) Request(protocol.Action, Result) {}
func (noObserver) ConnectionRejected()             {}

var (
	errHungUp   = errors.New("client hung up while waiting")
	errTrailing = errors.New("bytes after the lock frame")
	errStopped  = errors.New("server shutting down")
	errAuth     = errors.New("AUTH_TOKEN is set: v1 frames are refused, open a session")
)

// maxRejecting bounds the goroutines that answer '-' to connections over
// the limit, so a connection flood cannot turn into a goroutine flood.
const maxRejecting = 256

// Server serves the lock protocol over a locker.Table. Set its fields
// before calling Serve and do not change them afterwards.
type Server struct {
	Table *locker.Table
	// RequestTimeout bounds the time a client has to send its whole frame
	// (default 10s). Waiting for a lock is not bounded.
	RequestTimeout time.Duration
	// MaxConnections bounds concurrent connections, waiters included
	// (default 10000). Connections over it are answered '-' and closed.
	MaxConnections int
	// MaxConnectionsPerPeer bounds the concurrent connections from one IP
	// address (0: no bound of its own, only MaxConnections), so that one
	// peer holding stalled sockets cannot take every connection. Past it a
	// connection is refused as at MaxConnections. Every client behind one
	// NAT or proxy address shares it.
	MaxConnectionsPerPeer int
	// Logger receives one line per rejected request (default
	// slog.Default); refused connections are logged at most once a second,
	// each line with the count of the refusals it stands for.
	Logger *slog.Logger
	// Observer is told of every request (optional).
	Observer Observer
	// SessionTTL is the TTL of a session that asks for 0 (default 10s).
	SessionTTL time.Duration
	// AuthToken, when set, must be presented by every session open, and
	// every v1 frame is answered '-'.
	AuthToken string
	// TLSConfig, when set, makes every connection TLS: both protocols run
	// inside it unchanged (tls.go). Its certificate callbacks may swap the
	// certificate between handshakes.
	TLSConfig *tls.Config
	// Confirm, when set, is called before every answer that changes
	// nothing (TryLock '#', Unlock '-', a reset that found nothing): a
	// cluster's leader checks there that it still leads (SPEC §8.1). An
	// error closes the connection without the answer.
	Confirm func() error

	initOnce  sync.Once
	ctx       context.Context // cancelled by Shutdown: ends every wait
	stop      context.CancelFunc
	active    atomic.Int64
	rejecting atomic.Int64
	// closing is set by Shutdown under mu, so that track, which reads it
	// under mu, never adds a connection Shutdown will not close; every
	// request reads it without the lock before answering.
	closing atomic.Bool

	// peerMu guards byPeer: the connections being served per IP address
	// (kept only with MaxConnectionsPerPeer > 0).
	peerMu sync.Mutex
	byPeer map[netip.Addr]int
	// refusedLog paces the lines of refused connections, rejectedLog those
	// of rejected requests and session opens, handshakeLog the failed TLS
	// handshakes: a flood of any costs a few lines a second.
	refusedLog   logLimiter
	rejectedLog  logLimiter
	handshakeLog logLimiter

	mu        sync.Mutex // guards the fields below, which Shutdown walks
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	handlers  sync.WaitGroup // one per tracked connection
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		if s.RequestTimeout <= 0 {
			s.RequestTimeout = 10 * time.Second
		}
		if s.MaxConnections <= 0 {
			s.MaxConnections = 10000
		}
		if s.Logger == nil {
			s.Logger = slog.Default()
		}
		if s.Observer == nil {
			s.Observer = noObserver{}
		}
		if s.SessionTTL <= 0 {
			s.SessionTTL = 10 * time.Second
		}
		s.ctx, s.stop = context.WithCancel(context.Background())
		s.byPeer = make(map[netip.Addr]int)
		s.refusedLog.interval = time.Second
		s.rejectedLog.interval, s.rejectedLog.burst = time.Second, 10
		s.handshakeLog.interval = time.Second
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[net.Conn]struct{})
	})
}

// Connections returns the number of connections being served.
func (s *Server) Connections() int { return int(s.active.Load()) }

// Serve accepts connections on l and serves each in its own goroutine. It
// always returns a non-nil error: ErrServerClosed after Shutdown, otherwise
// the listener's error. Temporary accept errors (such as running out of
// file descriptors) are retried with a back-off from 5 ms to 1 s.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()

	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.Logger.Warn("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return ErrServerClosed
			}
			continue
		}
		backoff = 0
		if s.TLSConfig != nil {
			// Before the limits, so that a refusal is sent inside TLS.
			c = s.wrapTLS(c)
		}
		if s.active.Add(1) > int64(s.MaxConnections) {
			s.active.Add(-1)
			s.reject(c, "at the connection limit", s.MaxConnections)
			continue
		}
		peer, ok := s.admitPeer(c)
		if !ok {
			s.active.Add(-1)
			s.reject(c, "at the per-address connection limit", s.MaxConnectionsPerPeer)
			continue
		}
		if !s.track(c) {
			s.active.Add(-1)
			s.releasePeer(peer)
			c.Close()
			return ErrServerClosed
		}
		go s.handle(c, peer)
	}
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	s.handlers.Add(1)
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.handlers.Done()
}

// admitPeer counts c against its address's bound and reports whether it
// is within it; the address returned is given back by releasePeer. With
// no per-peer bound nothing is counted (the zero address).
func (s *Server) admitPeer(c net.Conn) (netip.Addr, bool) {
	if s.MaxConnectionsPerPeer <= 0 {
		return netip.Addr{}, true
	}
	peer := peerAddr(c.RemoteAddr())
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	if s.byPeer[peer] >= s.MaxConnectionsPerPeer {
		return peer, false
	}
	s.byPeer[peer]++
	return peer, true
}

// releasePeer gives back a connection counted by admitPeer.
func (s *Server) releasePeer(peer netip.Addr) {
	if s.MaxConnectionsPerPeer <= 0 {
		return
	}
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	if s.byPeer[peer]--; s.byPeer[peer] <= 0 {
		delete(s.byPeer, peer) // the map holds only the addresses connected now
	}
}

// peerAddr is a connection's IP address, an IPv4 address in IPv6 form
// unmapped so that both forms count as one peer.
func peerAddr(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			return ip.Unmap()
		}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{} // not an IP peer: all such share one count
	}
	return ap.Addr().Unmap()
}

// logLimiter lets burst lines (at least one) through per interval and
// counts the ones it held back, so that a flood of refusals costs a few
// lines a second, not a line each.
type logLimiter struct {
	interval time.Duration
	burst    int
	mu       sync.Mutex // guards start, used and held
	start    time.Time  // the current interval began
	used     int        // lines let through in it
	held     int
}

// allow reports whether a line may be written now and, if so, how many
// were held back since the last one.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() || now.Sub(l.start) >= l.interval {
		l.start, l.used = now, 0
	}
	if l.used >= max(l.burst, 1) {
		l.held++
		return false, 0
	}
	l.used++
	held := l.held
	l.held = 0
	return true, held
}

// reject answers '-' to a connection over a limit. It reads the frame
// first (briefly) so that closing does not reset the connection under the
// client's feet before it reads the answer.
func (s *Server) reject(c net.Conn, reason string, limit int) {
	s.Observer.ConnectionRejected()
	if ok, held := s.refusedLog.allow(time.Now()); ok {
		s.Logger.Warn("connection refused: "+reason, "peer", c.RemoteAddr().String(), "limit", limit,
			"held_back", held)
	}
	if s.rejecting.Add(1) > maxRejecting {
		s.rejecting.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer s.rejecting.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		// The first byte says which refusal the client reads: a session's
		// 13 bytes or v1's one.
		var buf [protocol.MaxFrame]byte
		n, _ := c.Read(buf[:])
		if n > 0 && protocol.Action(buf[0]) == protocol.SessionOpen {
			_, _ = c.Write(protocol.OpenAnswer{Status: protocol.AnswerFail}.Append(nil))
		} else {
			_, _ = c.Write([]byte{protocol.AnswerFail})
		}
		_, _ = c.Read(buf[:]) // best effort: the rest of the frame, if it is already here
	}()
}

// Shutdown stops accepting, ends every wait and closes every connection
// without answering, then waits for the connection goroutines to return or
// ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	s.mu.Lock()
	s.closing.Store(true)
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.stop()

	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) handle(c net.Conn, peer netip.Addr) {
	defer s.active.Add(-1)
	defer s.releasePeer(peer)
	defer s.untrack(c)
	defer c.Close()

	if !s.handshake(c) {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(s.RequestTimeout))
	var buf [protocol.MaxFrame + 1]byte
	n, err := c.Read(buf[:])
	if n == 0 {
		if err != nil && !errors.Is(err, io.EOF) && !s.closing.Load() {
			s.Logger.Debug("connection closed before its first byte", "peer", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	if protocol.Action(buf[0]) == protocol.SessionOpen {
		s.serveSession(c, buf[:n])
		return
	}
	s.serveV1(c, buf[:], n)
}

// serveV1 serves one v1 request whose first n bytes are in buf.
func (s *Server) serveV1(c net.Conn, buf []byte, n int) {
	f, used, n, err := s.readV1(c, buf, n)
	if err != nil {
		return // answered or logged by readV1
	}
	if s.AuthToken != "" {
		s.invalid(c, f.Action, errAuth)
		return
	}
	if err := f.Valid(); err != nil {
		s.invalid(c, f.Action, err)
		return
	}
	trailing := n > used
	remote := c.RemoteAddr().String()
	h := locker.Holder{Source: f.Source, Remote: remote}
	if h.Source == "" {
		h.Source = peerIP(c.RemoteAddr())
	}

	answer, token, ok := s.dispatchV1(c, f, h, trailing)
	if !ok || s.closing.Load() {
		return // answer nothing more
	}
	s.Observer.Request(f.Action, resultOf(answer))
	_ = c.SetWriteDeadline(time.Now().Add(s.RequestTimeout))
	if _, err := c.Write([]byte{answer}); err != nil {
		s.Logger.Info("answer not delivered", "peer", remote, "action", f.Action.String(), "key", f.Key, "err", err)
		// A grant whose '+' never left is held by nobody: hand it on,
		// that grant only.
		if token != 0 {
			if uerr := s.Table.Release(f.Key, token); uerr != nil {
				s.Logger.Warn("could not hand on an undelivered grant", "key", f.Key, "err", uerr)
			}
		}
		return
	}
	if f.Action == protocol.Unlock || f.Action == protocol.ResetByKey {
		discardSource(c, buf[used:n])
	}
}

// discardSource reads the rest of an Unlock or ResetByKey frame after its
// answer: the source field our clients send (rest holds what of it has
// arrived), or nothing, from the original server's clients, which send the
// key alone and close once answered. Reading it before closing means a
// close never resets a connection with unread bytes; stopping as soon as
// the declared field is whole means a client that waits for our close is
// not kept waiting.
func discardSource(c net.Conn, rest []byte) {
	want := -1 // bytes still to come; unknown until the size byte arrives
	if len(rest) > 0 {
		want = int(int8(rest[0])) + 1 - len(rest)
		if int8(rest[0]) < 0 || want <= 0 {
			return
		}
	}
	var b [protocol.MaxField + 1]byte
	for want != 0 {
		n, err := c.Read(b[:])
		if n > 0 && want < 0 {
			want = int(int8(b[0])) + 1
			if int8(b[0]) < 0 {
				return
			}
		}
		want = max(want-n, 0)
		if err != nil {
			return // closed by the client, or REQUEST_TIMEOUT passed
		}
	}
}

// readV1 reads until buf holds a whole v1 frame (the original server's
// forms included) and decodes it, returning the frame, its size and how
// many bytes buf holds. A malformed or incomplete frame is answered or
// logged here, and returns an error.
func (s *Server) readV1(c net.Conn, buf []byte, n int) (protocol.Frame, int, int, error) {
	for {
		f, used, derr := protocol.DecodeServer(buf[:n])
		if derr == nil {
			return f, used, n, nil
		}
		if !errors.Is(derr, protocol.ErrShort) {
			s.invalid(c, protocol.Action(buf[0]), derr)
			return f, 0, n, derr
		}
		m, rerr := c.Read(buf[n:])
		n += m
		if rerr != nil && m == 0 {
			if !s.closing.Load() {
				s.Logger.Warn("request rejected: frame incomplete", "peer", c.RemoteAddr().String(), "bytes", n, "err", rerr)
				s.Observer.Request(protocol.Action(buf[0]), ResultInvalid)
			}
			return f, 0, n, rerr
		}
	}
}

// dispatchV1 carries out a valid v1 request and returns its answer, the
// token of a grant it made (0 if none), and false when nothing must be
// answered.
func (s *Server) dispatchV1(c net.Conn, f protocol.Frame, h locker.Holder, trailing bool) (answer byte, token uint64, ok bool) {
	switch f.Action {
	case protocol.Lock:
		if trailing {
			s.invalid(c, f.Action, errTrailing)
			return 0, 0, false
		}
		return s.lock(c, f.Key, h)
	case protocol.TryLock, protocol.Unlock, protocol.ResetByKey, protocol.ResetBySource:
		cmd := command{action: f.Action, key: f.Key, holder: h}
		if f.Action == protocol.ResetBySource {
			cmd.key = h.Source
		}
		o := s.execute(cmd)
		return o.answer, o.token, !o.drop
	}
	return protocol.AnswerFail, 0, true // unreachable: Valid checked the action
}

// lock serves a v1 Lock: at once when the key is free, otherwise in the
// queue while a watcher reads the connection, so that a client hanging up
// (or sending more bytes) withdraws its waiter. ok is false when nothing
// must be answered.
func (s *Server) lock(c net.Conn, key string, h locker.Holder) (answer byte, token uint64, ok bool) {
	token, err := s.wait(c, key, h)
	switch {
	case err == nil:
		return protocol.AnswerOK, token, true
	case errors.Is(err, errHungUp), errors.Is(err, errStopped):
		s.Observer.Request(protocol.Lock, ResultHangUp)
		return 0, 0, false
	case errors.Is(err, errTrailing):
		s.invalid(c, protocol.Lock, err)
		return 0, 0, false
	}
	o := s.refused(command{action: protocol.Lock, key: key, holder: h}, err)
	return o.answer, 0, !o.drop
}

// waiterKeepAlive finds a waiter's vanished client in about 2.5 minutes:
// Go's defaults for accepted connections, set only on those that wait.
var waiterKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

func (s *Server) wait(c net.Conn, key string, h locker.Holder) (uint64, error) {
	ctx, cancel := context.WithCancelCause(s.ctx) // ended by Shutdown too
	defer cancel(nil)
	var watched chan struct{}
	token, err := s.Table.LockQueued(ctx, key, h, func() { watched = s.watch(c, key, cancel) })
	if watched != nil {
		_ = c.SetReadDeadline(time.Unix(1, 0)) // wake the watcher
		<-watched
	}
	if err == nil {
		// The watcher may have seen the hang-up just after the grant:
		// then nobody will ever unlock this key, so give it back.
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			if uerr := s.Table.Release(key, token); uerr != nil {
				s.Logger.Warn("could not hand on a grant to a departed client", "key", key, "err", uerr)
			}
			err = cause
		}
	}
	if errors.Is(err, context.Canceled) {
		err = errStopped // the server's own context: Shutdown
	}
	return token, err
}

// watch starts, for a v1 Lock that has to queue, the goroutine that reads
// its connection while it waits: a client that hangs up, or sends bytes
// after its frame, cancels the wait with the reason. The goroutine ends at
// the read deadline the caller sets once the wait is over; watched is
// closed then.
func (s *Server) watch(c net.Conn, key string, cancel context.CancelCauseFunc) (watched chan struct{}) {
	_ = c.SetReadDeadline(time.Time{}) // a waiter may wait for ever
	if tc, ok := c.(*net.TCPConn); ok {
		// A client whose host vanishes sends no FIN; probes find it, so
		// its place in the queue is withdrawn instead of kept for ever.
		if err := tc.SetKeepAliveConfig(waiterKeepAlive); err != nil {
			s.Logger.Warn("keepalive not set on a waiting connection", "peer", c.RemoteAddr().String(), "key", key, "err", err)
		}
	}
	watched = make(chan struct{})
	go func() {
		defer close(watched)
		var b [1]byte
		n, err := c.Read(b[:])
		switch {
		case n > 0:
			cancel(errTrailing)
		case errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err):
			// stopped by the caller's deadline: the wait is over
		default:
			cancel(errHungUp)
		}
	}()
	return watched
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// invalid answers '-' to a malformed request and logs one line (at most
// ten a second for all of them).
func (s *Server) invalid(c net.Conn, a protocol.Action, reason error) {
	s.logRejected("request rejected", "peer", c.RemoteAddr().String(), "reason", reason.Error())
	s.Observer.Request(a, ResultInvalid)
	_ = c.SetWriteDeadline(time.Now().Add(s.RequestTimeout))
	_, _ = c.Write([]byte{protocol.AnswerFail})
}

// logRejected logs a rejected request or session open, at most ten lines a
// second, with the count of the lines held back since the last one: a
// client that sends nothing but refusable frames must not fill the disk.
func (s *Server) logRejected(msg string, args ...any) {
	ok, held := s.rejectedLog.allow(time.Now())
	if !ok {
		return
	}
	s.Logger.Warn(msg, append(args, "held_back", held)...)
}

// authOK compares an auth token with AuthToken in constant time, whatever
// their lengths: both are hashed to one length first, so neither the
// token's bytes nor its length show in the time the answer takes.
func (s *Server) authOK(given string) bool {
	a, b := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(s.AuthToken))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// peerIP is the address of a peer without its port: the source of a
// request that names none.
func peerIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
