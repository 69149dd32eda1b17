package wire

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("wire: server closed")

// Results reported to an Observer, beside the answer bytes' meanings.
const (
	ResultOK      = "ok"      // answered '+'
	ResultFail    = "fail"    // answered '-': not held, reset, not durable
	ResultLocked  = "locked"  // answered '#'
	ResultInvalid = "invalid" // answered '-' to a malformed frame
	ResultHangUp  = "hangup"  // the client left while waiting; no answer
)

// Observer is told of every served request and every refused connection.
// Its methods must be fast and safe for concurrent use.
type Observer interface {
	Request(a Action, result string)
	ConnectionRejected()
}

type noObserver struct{}

func (noObserver) Request(Action, string) {}
func (noObserver) ConnectionRejected()    {}

var (
	errHungUp   = errors.New("client hung up while waiting")
	errTrailing = errors.New("bytes after the lock frame")
	errStopped  = errors.New("server shutting down")
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
	// Logger receives one line per rejected request (default slog.Default).
	Logger *slog.Logger
	// Observer is told of every request (optional).
	Observer Observer

	initOnce  sync.Once
	ctx       context.Context // cancelled by Shutdown: ends every wait
	stop      context.CancelFunc
	active    atomic.Int64
	rejecting atomic.Int64
	// closing is set by Shutdown under mu, so that track, which reads it
	// under mu, never adds a connection Shutdown will not close; every
	// request reads it without the lock before answering.
	closing atomic.Bool

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
		s.ctx, s.stop = context.WithCancel(context.Background())
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
		if s.active.Add(1) > int64(s.MaxConnections) {
			s.active.Add(-1)
			s.reject(c)
			continue
		}
		if !s.track(c) {
			s.active.Add(-1)
			c.Close()
			return ErrServerClosed
		}
		go s.handle(c)
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

// reject answers '-' to a connection over the limit. It reads the frame
// first (briefly) so that closing does not reset the connection under the
// client's feet before it reads the answer.
func (s *Server) reject(c net.Conn) {
	s.Observer.ConnectionRejected()
	s.Logger.Warn("connection refused: at the connection limit", "peer", c.RemoteAddr().String(), "limit", s.MaxConnections)
	if s.rejecting.Add(1) > maxRejecting {
		s.rejecting.Add(-1)
		c.Close()
		return
	}
	go func() {
		defer s.rejecting.Add(-1)
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte{AnswerFail})
		var buf [MaxFrame]byte
		_, _ = c.Read(buf[:]) // best effort: the frame, if it is already here
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

func (s *Server) handle(c net.Conn) {
	defer s.active.Add(-1)
	defer s.untrack(c)
	defer c.Close()

	var buf [MaxFrame + 1]byte
	_ = c.SetReadDeadline(time.Now().Add(s.RequestTimeout))
	n := 0
	var f Frame
	var used int
	for {
		m, rerr := c.Read(buf[n:])
		n += m
		var derr error
		f, used, derr = Decode(buf[:n])
		if derr == nil {
			break
		}
		if !errors.Is(derr, ErrShort) {
			s.invalid(c, Action(buf[0]), derr)
			return
		}
		if rerr != nil {
			if n > 0 && !s.closing.Load() {
				s.Logger.Warn("request rejected: frame incomplete", "peer", c.RemoteAddr().String(), "bytes", n, "err", rerr)
				s.Observer.Request(Action(buf[0]), ResultInvalid)
			}
			return
		}
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

	var answer byte
	switch f.Action {
	case Lock:
		if trailing {
			s.invalid(c, f.Action, errTrailing)
			return
		}
		var ok bool
		if answer, ok = s.lock(c, f.Key, h); !ok {
			return
		}
	case TryLock:
		switch err := s.Table.TryLock(f.Key, h); {
		case err == nil:
			answer = AnswerOK
		case errors.Is(err, locker.ErrLocked):
			answer = AnswerLocked
		default:
			answer = s.failed(c, f, err)
		}
	case Unlock:
		answer = s.outcome(c, f, s.Table.Unlock(f.Key))
	case ResetByKey:
		res, err := s.Table.ResetByKey(f.Key)
		if err == nil {
			s.Logger.Info("reset by key", "key", f.Key, "peer", remote, "released", res.Released, "refused", res.Refused)
		}
		answer = s.outcome(c, f, err)
	case ResetBySource:
		res, err := s.Table.ResetBySource(h.Source)
		if err == nil {
			s.Logger.Info("reset by source", "source", h.Source, "peer", remote, "released", res.Released, "refused", res.Refused)
		}
		answer = s.outcome(c, f, err)
	}
	if s.closing.Load() {
		return // answer nothing more
	}
	s.Observer.Request(f.Action, resultOf(answer))
	_ = c.SetWriteDeadline(time.Now().Add(s.RequestTimeout))
	if _, err := c.Write([]byte{answer}); err != nil {
		s.Logger.Info("answer not delivered", "peer", remote, "action", f.Action.String(), "key", f.Key, "err", err)
		// A grant whose '+' never left is held by nobody: hand it on.
		if answer == AnswerOK && (f.Action == Lock || f.Action == TryLock) {
			if uerr := s.Table.Unlock(f.Key); uerr != nil {
				s.Logger.Warn("could not hand on an undelivered grant", "key", f.Key, "err", uerr)
			}
		}
	}
}

// lock serves a Lock: at once when the key is free, otherwise in the queue
// while a watcher reads the connection, so that a client hanging up (or
// sending more bytes) withdraws its waiter. ok is false when nothing must
// be answered.
func (s *Server) lock(c net.Conn, key string, h locker.Holder) (answer byte, ok bool) {
	err := s.Table.TryLock(key, h)
	if errors.Is(err, locker.ErrLocked) {
		err = s.wait(c, key, h)
	}
	switch {
	case err == nil:
		return AnswerOK, true
	case errors.Is(err, errHungUp), errors.Is(err, errStopped):
		s.Observer.Request(Lock, ResultHangUp)
		return 0, false
	case errors.Is(err, errTrailing):
		s.invalid(c, Lock, err)
		return 0, false
	}
	return s.failed(c, Frame{Action: Lock, Key: key, Source: h.Source}, err), true
}

// waiterKeepAlive finds a waiter's vanished client in about 2.5 minutes:
// Go's defaults for accepted connections, set only on those that wait.
var waiterKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

func (s *Server) wait(c net.Conn, key string, h locker.Holder) error {
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(errStopped) })
	defer stop()

	_ = c.SetReadDeadline(time.Time{}) // a waiter may wait for ever
	if tc, ok := c.(*net.TCPConn); ok {
		// A client whose host vanishes sends no FIN; probes find it, so
		// its place in the queue is withdrawn instead of kept for ever.
		if err := tc.SetKeepAliveConfig(waiterKeepAlive); err != nil {
			s.Logger.Warn("keepalive not set on a waiting connection", "peer", c.RemoteAddr().String(), "key", key, "err", err)
		}
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var b [1]byte
		n, err := c.Read(b[:])
		switch {
		case n > 0:
			cancel(errTrailing)
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			// stopped by the deadline below: the wait is over
		default:
			cancel(errHungUp)
		}
	}()

	err := s.Table.Lock(ctx, key, h)
	_ = c.SetReadDeadline(time.Unix(1, 0)) // wake the watcher
	<-watched
	if err == nil {
		// The watcher may have seen the hang-up after the grant: then
		// nobody will ever unlock this key, so give it back.
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			if uerr := s.Table.Unlock(key); uerr != nil {
				s.Logger.Warn("could not hand on a grant to a departed client", "key", key, "err", uerr)
			}
			return cause
		}
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *Server) outcome(c net.Conn, f Frame, err error) byte {
	if err == nil {
		return AnswerOK
	}
	return s.failed(c, f, err)
}

func (s *Server) failed(c net.Conn, f Frame, err error) byte {
	lvl := slog.LevelInfo
	if errors.Is(err, locker.ErrJournal) {
		lvl = slog.LevelError
	}
	s.Logger.Log(context.Background(), lvl, "request answered '-'", "peer", c.RemoteAddr().String(),
		"action", f.Action.String(), "key", f.Key, "reason", err.Error())
	return AnswerFail
}

// invalid answers '-' to a malformed request and logs one line.
func (s *Server) invalid(c net.Conn, a Action, reason error) {
	s.Logger.Warn("request rejected", "peer", c.RemoteAddr().String(), "reason", reason.Error())
	s.Observer.Request(a, ResultInvalid)
	_ = c.SetWriteDeadline(time.Now().Add(s.RequestTimeout))
	_, _ = c.Write([]byte{AnswerFail})
}

func resultOf(answer byte) string {
	switch answer {
	case AnswerOK:
		return ResultOK
	case AnswerLocked:
		return ResultLocked
	}
	return ResultFail
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
