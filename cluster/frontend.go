package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/wire"
)

// DefaultLeaderWait is LEADER_WAIT's default: how long a connection is
// held while no leader is known.
const DefaultLeaderWait = 5 * time.Second

// Frontend serves a node's client port (SPEC §8.3, §8.4). On the leader it
// runs the engine: a locker.Table restored from the FSM after the takeover
// barrier, its journal the raft Journal of that term, served by a
// wire.Server of its own; every connection, direct or forwarded, is
// handed to it. A follower forwards each connection to the leader over
// the cluster port. When leadership ends the engine's server closes every
// connection it serves and the table is dropped; a follower closes its
// forwarded connections when the leader changes.
type Frontend struct {
	// NewWire returns a wire.Server with every field set but Table and
	// Confirm, which the Frontend sets; one is made per engine.
	NewWire func() *wire.Server
	// TableOptions are every engine table's options; Journal and
	// TokenFloor are the Frontend's.
	TableOptions locker.Options
	// LeaderWait bounds the time a connection is held while no leader is
	// known (DefaultLeaderWait when 0).
	LeaderWait time.Duration
	// TLS says the client port speaks TLS: a connection refused for want
	// of a leader is then closed without the '-' that cannot be sent
	// outside TLS.
	TLS bool
	// Logger (default slog.Default).
	Logger *slog.Logger
	// OnEngine, if set, is told of each engine's table when it starts
	// serving, and of nil when it stops; calls are in order.
	OnEngine func(*locker.Table)

	node    *Node
	nodeSet chan struct{} // closed once node is set

	// life serializes building and stopping engines: leadership reports
	// and rebuilds.
	life sync.Mutex
	// mu guards the fields below.
	mu       sync.Mutex
	eng      *engine
	gen      uint64        // counts engine changes: a rebuild of an older one is dropped
	changed  chan struct{} // closed and replaced at every change
	proxies  map[*proxy]struct{}
	closed   bool
	done     chan struct{} // closed by Close
	routes   sync.WaitGroup
	stopping sync.WaitGroup // shutdowns of engines' servers

	// Counters for the metrics. lastLeader is the leader last seen by
	// leaderChanged, which alone reads and writes it (raft's observer
	// calls it from one goroutine).
	leaderChanges atomic.Uint64
	ttlRestarts   atomic.Uint64
	lastLeader    string
}

// engine is the lock engine of one leadership.
type engine struct {
	term       uint64
	table      *locker.Table
	srv        *wire.Server
	ln         *connListener
	journal    *engineJournal
	stopExpiry context.CancelFunc
	serving    sync.WaitGroup // Serve and RunExpiry
}

// Start starts the node with c, its leadership reports and forwarded
// connections going to f, which then serves through it.
func (f *Frontend) Start(c Config) (*Node, error) {
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	if f.LeaderWait <= 0 {
		f.LeaderWait = DefaultLeaderWait
	}
	f.nodeSet = make(chan struct{})
	f.changed = make(chan struct{})
	f.done = make(chan struct{})
	f.proxies = map[*proxy]struct{}{}
	c.OnLeadership = f.leadership
	c.OnForward = f.forwarded
	n, err := Start(c)
	if err != nil {
		close(f.nodeSet)
		return nil, err
	}
	f.node = n
	close(f.nodeSet)
	n.OnLeaderChange(f.leaderChanged)
	f.routes.Go(f.watchContact)
	return n, nil
}

// Node returns the node Start started (nil before).
func (f *Frontend) Node() *Node { return f.node }

// Ready reports readiness (/readyz): on the leader, its engine serves
// (the takeover barrier passed); elsewhere a leader is known and was heard
// from within a heartbeat timeout.
func (f *Frontend) Ready() bool {
	if f.node == nil {
		return false
	}
	if f.node.IsLeader() {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.eng != nil
	}
	return f.node.HeardFromLeader()
}

// Forwarded returns how many client connections this node forwards now.
func (f *Frontend) Forwarded() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.proxies)
}

// broadcast wakes every connection waiting for a change. f.mu must be held.
func (f *Frontend) broadcast() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// leadership is the node's OnLeadership: every report ends the engine,
// and one that says this node leads builds the next.
func (f *Frontend) leadership(l Leadership) {
	<-f.nodeSet
	f.life.Lock()
	defer f.life.Unlock()
	f.mu.Lock()
	f.gen++
	gen := f.gen
	old := f.eng
	f.eng = nil
	f.broadcast()
	f.mu.Unlock()
	if old != nil {
		f.stop(old, false)
	}
	if l.Leading && f.node != nil {
		f.build(l.Term, l.Journal, gen)
	}
}

// build restores an engine from the FSM and installs it unless another
// change (gen) came meanwhile. f.life must be held.
func (f *Frontend) build(term uint64, j *Journal, gen uint64) {
	start := time.Now()
	grace := f.node.HeartbeatTimeout()
	ej := &engineJournal{j: j, f: f, gen: gen}
	opts := f.TableOptions
	opts.Journal = ej
	var t *locker.Table
	var restoreErr error
	f.node.fsm.View(func(s *locker.State, _ uint64) {
		opts.TokenFloor = s.HighToken() // the first token: FirstToken(high, now)
		t = locker.New(opts)
		s.Each(func(key string, g locker.Grant) bool {
			_, restoreErr = t.Restore(key, g.Holder, g.Token, g.Since, g.TTL)
			return restoreErr == nil
		})
		// Every session's TTL restarts at the takeover, with a heartbeat
		// timeout's margin (SPEC §8.3); sessions without holds come back too.
		s.EachSession(func(id locker.SessionID, r locker.SessionRecord) bool {
			t.RestoreSession(id, r.Source, r.Remote, r.TTL, grace)
			f.ttlRestarts.Add(1)
			return true
		})
	})
	if restoreErr != nil {
		// The FSM refused every contradiction: this is a bug. Serve
		// nothing rather than a table that differs from it.
		f.Logger.Error("cluster: the engine could not be restored from the FSM; not serving", "term", term, "err", restoreErr)
		return
	}
	srv := f.NewWire()
	srv.Table = t
	srv.Confirm = f.node.VerifyLeader
	e := &engine{term: term, table: t, srv: srv, ln: newConnListener(), journal: ej}
	ctx, cancel := context.WithCancel(context.Background())
	e.stopExpiry = cancel
	e.serving.Go(func() {
		if err := srv.Serve(e.ln); err != nil && !errors.Is(err, wire.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			f.Logger.Error("cluster: engine server", "err", err)
		}
	})
	e.serving.Go(func() { t.RunExpiry(ctx) })
	f.mu.Lock()
	if f.gen != gen || f.closed {
		f.mu.Unlock()
		f.stop(e, false)
		return
	}
	f.eng = e
	f.broadcast()
	f.mu.Unlock()
	st := t.Stats()
	f.Logger.Info("cluster: engine serving", "term", term, "held_keys", st.Held, "sessions", st.Sessions,
		"first_token", t.LastToken()+1, "took", time.Since(start).Round(time.Microsecond))
	if f.OnEngine != nil {
		f.OnEngine(t)
	}
}

// stop ends an engine: its journal refuses from now on, its server closes
// every connection it serves, and the table is dropped. With wait it
// returns once every request of the engine has ended (before a rebuild in
// the same term, whose journal would otherwise meet the old engine's
// late proposals).
func (f *Frontend) stop(e *engine, wait bool) {
	e.journal.dead.Store(true)
	if f.OnEngine != nil {
		f.OnEngine(nil)
	}
	e.stopExpiry()
	done := make(chan struct{})
	f.stopping.Go(func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			f.Logger.Warn("cluster: engine shutdown", "term", e.term, "err", err)
		}
		e.serving.Wait()
	})
	f.Logger.Info("cluster: engine stopped; its client connections are closed", "term", e.term)
	if wait {
		<-done
	}
}

// rebuildSoon asks for the engine of generation gen to be rebuilt: one of
// its proposals failed while this node may still lead (SPEC §8.1).
func (f *Frontend) rebuildSoon(gen uint64, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.gen != gen {
		return
	}
	f.routes.Go(func() { f.rebuild(gen, cause) })
}

func (f *Frontend) rebuild(gen uint64, cause error) {
	f.life.Lock()
	defer f.life.Unlock()
	f.mu.Lock()
	if f.closed || f.gen != gen {
		f.mu.Unlock()
		return
	}
	f.gen++
	gen = f.gen
	old := f.eng
	f.eng = nil
	f.broadcast()
	f.mu.Unlock()
	f.Logger.Warn("cluster: a proposal failed; rebuilding the engine from the FSM", "err", cause)
	if old != nil {
		f.stop(old, true)
	}
	r := f.node.raft
	hb := f.node.HeartbeatTimeout()
	for f.node.IsLeader() {
		t := r.CurrentTerm()
		if err := r.Barrier(hb).Error(); err != nil {
			select {
			case <-f.done:
				return
			case <-time.After(hb / 10):
			}
			continue
		}
		if f.node.IsLeader() && r.CurrentTerm() == t {
			f.build(t, f.node.journal(t), gen)
		}
		return
	}
}

// engineJournal is an engine's journal: the raft Journal of its term,
// refusing once the engine is stopped, and asking for a rebuild when a
// proposal fails.
type engineJournal struct {
	j    *Journal
	f    *Frontend
	gen  uint64
	dead atomic.Bool
}

func (e *engineJournal) do(fn func() error) error {
	if e.dead.Load() {
		return fmt.Errorf("%w: the engine of term %d has stopped", ErrNotLeader, e.j.Term())
	}
	err := fn()
	if err != nil {
		e.f.rebuildSoon(e.gen, err)
	}
	return err
}

func (e *engineJournal) Commit(batch []locker.Change) error {
	return e.do(func() error {
		err := e.j.Commit(batch)
		if err == nil && failpointsOn {
			afterCommit(batch)
		}
		return err
	})
}

func (e *engineJournal) OpenSession(id locker.SessionID, source, remote string, ttl time.Duration) error {
	return e.do(func() error { return e.j.OpenSession(id, source, remote, ttl) })
}

func (e *engineJournal) ResumeSession(id locker.SessionID, remote string) error {
	return e.do(func() error { return e.j.ResumeSession(id, remote) })
}

func (e *engineJournal) EndSession(id locker.SessionID, batch []locker.Change) error {
	return e.do(func() error { return e.j.EndSession(id, batch) })
}

// Serve routes the connections of the client port's listener until Close
// (ErrServerClosed-like: net.ErrClosed) or the listener fails.
func (f *Frontend) Serve(ln net.Listener) error {
	go func() { <-f.done; ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			select {
			case <-f.done:
				return wire.ErrServerClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		if !f.spawn(func() { f.route(c, false) }) {
			c.Close()
		}
	}
}

// spawn runs fn in a goroutine that Close waits for; false once closed.
func (f *Frontend) spawn(fn func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.routes.Go(fn)
	return true
}

// forwarded is the node's OnForward: a connection a follower forwarded,
// served as if from the client's own address.
func (f *Frontend) forwarded(c net.Conn, remote string) {
	<-f.nodeSet
	ap, err := netip.ParseAddrPort(remote)
	if err != nil || f.node == nil {
		f.Logger.Warn("cluster: forwarded connection with a bad client address", "remote", remote)
		c.Close()
		return
	}
	cc := &claimedConn{Conn: c, remote: net.TCPAddrFromAddrPort(ap)}
	if !f.spawn(func() { f.route(cc, true) }) {
		c.Close()
	}
}

// route hands c to the engine, forwards it to the leader, or holds it up to
// LeaderWait for one.
func (f *Frontend) route(c net.Conn, forwarded bool) {
	deadline := time.Now().Add(f.LeaderWait)
	// held watches c once it has to wait: a client that hangs up while
	// held is dropped, never handed on (holdWatch).
	var held *holdWatch
	// unhold ends the watch: false when the client left meanwhile (c is
	// then closed). eofLeaves: a client that closed its side counts as
	// gone (held for a leader), or as one that waits for its answer (its
	// connection about to be forwarded).
	unhold := func(eofLeaves bool) bool {
		if held != nil {
			c, held = held.release(eofLeaves), nil
			if c == nil {
				f.Logger.Debug("cluster: a client hung up while its connection waited for the leader; nothing forwarded")
				return false
			}
		}
		return true
	}
	for {
		f.mu.Lock()
		e, changed, closed := f.eng, f.changed, f.closed
		f.mu.Unlock()
		if closed {
			if unhold(true) {
				c.Close()
			}
			return
		}
		if e != nil {
			if !unhold(true) {
				return
			}
			if e.ln.deliver(c) {
				return
			}
			continue // stopped meanwhile
		}
		leads := f.node.IsLeader()
		if forwarded && !leads {
			// A stale hint sent it here: no second hop. The client is
			// told nothing and retries.
			if unhold(true) {
				c.Close()
			}
			return
		}
		if !leads {
			if id, addr := f.node.Leader(); id != "" && id != f.node.ID() {
				// The dial takes seconds on a bad link: the client is
				// watched meanwhile, so that one that gives up and
				// resets its connection is not forwarded after it left
				// (and maybe settled its request with a reset).
				if held == nil {
					held = watchHeld(c)
				}
				up, err := f.node.DialForward(addr, c.RemoteAddr().String())
				if err == nil {
					if !unhold(false) {
						discardUnsent(up)
						up.Close()
						return
					}
					f.proxy(c, up)
					return
				}
				f.Logger.Debug("cluster: could not reach the leader to forward a connection", "leader", id, "err", err)
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			if unhold(true) {
				f.noLeader(c)
			}
			return
		}
		if held == nil {
			held = watchHeld(c)
		}
		t := time.NewTimer(min(left, 50*time.Millisecond))
		select {
		case <-changed:
		case <-t.C:
		case <-f.done:
		case <-held.gone:
			t.Stop()
			unhold(true) // the client hung up: c is closed
			return
		}
		t.Stop()
	}
}

// noLeader refuses a connection for want of a leader: '-' to a v1 frame, a
// session open closed without an answer (never the 13-byte refusal, which
// means an unknown session) — SPEC §8.4.
func (f *Frontend) noLeader(c net.Conn) {
	defer c.Close()
	f.Logger.Warn("cluster: no leader within LEADER_WAIT; connection refused", "peer", c.RemoteAddr().String(), "waited", f.LeaderWait)
	if f.TLS {
		return
	}
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var buf [protocol.MaxFrame]byte
	n, _ := c.Read(buf[:])
	if n == 0 || protocol.Action(buf[0]) == protocol.SessionOpen {
		return
	}
	_, _ = c.Write([]byte{protocol.AnswerFail})
}

// proxy is one forwarded connection: the client's and the leader's.
type proxy struct {
	client, up net.Conn
	once       sync.Once
}

func (p *proxy) close() {
	p.once.Do(func() {
		p.client.Close()
		p.up.Close()
	})
}

// abort closes a forwarded connection whose leader is gone or silent, and
// throws away what its client sent that the leader has not acknowledged:
// a plain close would leave those bytes to TCP's retransmission, which
// delivers them once the network heals, seconds after the client was told
// nothing and settled its request (a v1 Unlock so delivered released
// another client's grant). The leader gets a reset instead.
func (p *proxy) abort() {
	p.once.Do(func() {
		p.client.Close()
		discardUnsent(p.up)
		p.up.Close()
	})
}

// discardUnsent makes the next Close of c a reset that drops its unsent
// and unacknowledged bytes (SO_LINGER 0), through a TLS layer too.
func discardUnsent(c net.Conn) {
	for c != nil {
		switch v := c.(type) {
		case *net.TCPConn:
			_ = v.SetLinger(0)
			return
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return
		}
	}
}

// proxy forwards c to the leader over up, a connection dialled to it, and
// returns once the forwarded connection has ended.
func (f *Frontend) proxy(c, up net.Conn) {
	p := &proxy{client: c, up: up}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		p.close()
		return
	}
	f.proxies[p] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.proxies, p)
		f.mu.Unlock()
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		// The client's bytes to the leader; its half-close is passed on,
		// so that a client that shuts its side down still gets its answer.
		_, err := io.Copy(up, c)
		if tc, ok := up.(interface{ CloseWrite() error }); ok && err == nil {
			_ = tc.CloseWrite()
			return
		}
		if err != nil {
			// The client is gone (reset, or its connection failed): what
			// it sent that the leader has not received is dropped, as its
			// own kernel drops it on a direct connection, rather than
			// delivered late by TCP (abort).
			p.abort()
			return
		}
		p.close()
	})
	_, _ = io.Copy(c, up)
	p.close()
	wg.Wait()
}

// closeProxies closes every forwarded connection: the leader changed or
// has not been heard from.
func (f *Frontend) closeProxies(why string) {
	f.mu.Lock()
	ps := make([]*proxy, 0, len(f.proxies))
	for p := range f.proxies {
		ps = append(ps, p)
	}
	f.mu.Unlock()
	if len(ps) > 0 {
		f.Logger.Info("cluster: forwarded connections closed", "count", len(ps), "why", why)
	}
	for _, p := range ps {
		p.abort()
	}
}

// leaderChanged is told of every change of the known leader.
func (f *Frontend) leaderChanged() {
	if id, _ := f.node.Leader(); id != "" && id != f.lastLeader {
		f.lastLeader = id
		f.leaderChanges.Add(1)
	}
	f.closeProxies("the leader changed")
	f.mu.Lock()
	if !f.closed {
		f.broadcast()
	}
	f.mu.Unlock()
}

// watchContact closes the forwarded connections of a follower that has
// not heard from the leader for a heartbeat timeout (SPEC §8.4).
func (f *Frontend) watchContact() {
	hb := f.node.HeartbeatTimeout()
	tick := time.NewTicker(hb / 4)
	defer tick.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-tick.C:
		}
		if f.Forwarded() > 0 && !f.node.IsLeader() && time.Since(f.node.raft.LastContact()) > hb {
			f.closeProxies("the leader has not been heard from for a heartbeat timeout")
		}
	}
}

// Close stops routing: the engine stops (its connections close), every
// forwarded connection closes, and Close returns once every goroutine it
// owns has ended. The Node is the caller's to close, after.
func (f *Frontend) Close() {
	f.life.Lock()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.life.Unlock()
		return
	}
	f.closed = true
	f.gen++
	close(f.done)
	old := f.eng
	f.eng = nil
	f.broadcast()
	f.mu.Unlock()
	if old != nil {
		f.stop(old, false)
	}
	f.life.Unlock()
	f.closeProxies("shutting down")
	f.routes.Wait()
	f.stopping.Wait()
}

// connListener hands connections to an engine's wire.Server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// deliver hands c to the server; false once the listener is closed.
func (l *connListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return addr("engine") }

// claimedConn is a forwarded connection: its remote address is the one
// its authenticated preamble claims, the client's own. Only connections
// that came through the cluster port's handshake are ever wrapped.
type claimedConn struct {
	net.Conn
	remote net.Addr
}

func (c *claimedConn) RemoteAddr() net.Addr { return c.remote }
