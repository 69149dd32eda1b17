package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The cluster port's handshake. Each side proves it knows CLUSTER_TOKEN
// without sending it, over the other side's fresh nonce, before either
// reads anything else:
//
//	dialer   → acceptor: helloMagic, nonce D (32 bytes)
//	acceptor → dialer:   helloMagic, nonce A (32 bytes), HMAC(token, "acceptor" D A)
//	dialer   → acceptor: HMAC(token, "dialer" A D)
//
// The labels keep a proof of one direction from being replayed as the
// other; the nonces keep one connection's proofs from serving another.
const (
	helloMagic = "LCRAFT01"
	nonceSize  = 32
	macSize    = sha256.Size
)

// After the handshake the dialer sends one purpose byte: what the
// connection is for. A forwarded client connection then sends a preamble,
// the client's own address ([size:2][address]), and the client's bytes
// follow both ways. A web connection carries HTTP/1.1 to the node's web
// handler: a follower's forwarded web requests, a node asking another for
// its status.
const (
	purposeRaft    = 'R'
	purposeForward = 'F'
	purposeCall    = 'C'
	purposeWeb     = 'W'
	maxPreamble    = 512
)

// ErrAuth is wrapped by a handshake that fails because the other side does
// not know the token (or speaks something else).
var ErrAuth = errors.New("cluster: peer failed the CLUSTER_TOKEN handshake")

// handshakeTimeout bounds a handshake: a peer that says nothing holds a
// goroutine no longer than this.
const handshakeTimeout = 5 * time.Second

// streamLayer is raft's transport on TCP, every connection authenticated
// both ways before it is handed to raft.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr
	token     []byte
	log       *slog.Logger
	refusals  *rateLog
	// forward receives every authenticated forwarded client connection
	// with the address it claims; nil refuses them. It must return
	// quickly: it is called in the handshake's goroutine.
	forward func(c net.Conn, remote string)
	// call answers a node-to-node call (calls.go); nil refuses them. It
	// runs in the connection's goroutine, which Close waits for.
	call func(callRequest) callReply
	// tls, when set, wraps every connection in mutual TLS before the
	// token handshake (RAFT_TLS_*).
	tls *PeerTLS
	// web receives every authenticated web connection (HTTP/1.1 to this
	// node's web handler); nil refuses them. It must return quickly, like
	// forward.
	web func(c net.Conn)

	conns chan net.Conn // authenticated connections for Accept
	done  chan struct{} // closed by Close: the accept loop and handshakes end
	once  sync.Once
	wg    sync.WaitGroup // the accept loop and every handshake in flight

	mu      sync.Mutex // guards pending, dialed, closed and dialsClosed
	pending map[net.Conn]bool
	// dialed are raft's connections to the others (Dial), by their TCP
	// connection. closeDials ends them: raft's shutdown waits for its
	// replication goroutines, and one blocked in an RPC to a peer whose
	// packets were lost would hold it for the transport's timeout.
	dialed      map[net.Conn]bool
	closed      bool
	dialsClosed bool
}

// ownedConn is a connection the stream layer handed to raft: it stays in
// pending until raft closes it, so that Close can end it. Raft's transport
// does not close the connections it accepted when it shuts down; their
// readers would wait on peers that may never hang up.
type ownedConn struct {
	net.Conn
	raw net.Conn // the TCP connection under Conn, as tracked
	s   *streamLayer
}

func (c ownedConn) Close() error {
	c.s.untrack(c.raw)
	return c.Conn.Close()
}

// track records c as open (false once Close has begun: c must be closed at
// once) and untrack forgets it, so that Close need not wait out a silent
// peer's handshake timeout, nor leave raft reading a connection.
func (s *streamLayer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.pending[c] = true
	return true
}

func (s *streamLayer) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, c)
	delete(s.dialed, c)
}

// closeDials closes raft's connections to the others and refuses new
// ones: the node is shutting down, and an RPC in flight on a connection
// whose peer went silent then fails at once instead of at its deadline.
func (s *streamLayer) closeDials() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialsClosed = true
	for c := range s.dialed {
		c.Close()
	}
}

// newStreamLayer listens on address; advertise is the address other nodes
// dial (what raft names this node by).
func newStreamLayer(address, advertise string, token []byte, log *slog.Logger, forward func(net.Conn, string),
	call func(callRequest) callReply, pt *PeerTLS, web func(net.Conn)) (*streamLayer, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("RAFT_ADDRESS %q: %w", address, err)
	}
	s := &streamLayer{
		ln: ln, advertise: addr(advertise), token: token, log: log, forward: forward, call: call, tls: pt, web: web,
		refusals: &rateLog{log: log, every: time.Second},
		conns:    make(chan net.Conn), done: make(chan struct{}), pending: map[net.Conn]bool{},
		dialed: map[net.Conn]bool{},
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// acceptLoop accepts connections and authenticates each in a goroutine of
// its own, so that a silent peer delays nobody. It ends when the listener
// is closed.
func (s *streamLayer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Error("cluster: accept on the cluster port", "err", err)
			return
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			raw := c
			c, err := s.serverTLS(c)
			if err == nil {
				err = acceptHandshake(c, s.token)
			}
			var purpose byte
			var remote string
			if err == nil {
				purpose, remote, err = readPurpose(c)
			}
			if err == nil && purpose == purposeCall {
				s.serveCall(c)
				s.untrack(raw)
				c.Close()
				return
			}
			if err == nil && purpose == purposeWeb {
				s.untrack(raw)
				if s.web == nil {
					c.Close()
					return
				}
				s.web(c)
				return
			}
			if err == nil && purpose == purposeForward {
				s.untrack(raw)
				if s.forward == nil {
					c.Close()
					return
				}
				s.forward(c, remote)
				return
			}
			if err != nil {
				s.untrack(raw)
				select {
				case <-s.done: // closed by Close, not refused
				default:
					s.refusals.refuse(c.RemoteAddr().String(), err)
				}
				c.Close()
				return
			}
			select {
			case s.conns <- ownedConn{c, raw, s}:
			case <-s.done:
				s.untrack(raw)
				c.Close()
			}
		}()
	}
}

// Accept returns the next authenticated connection.
func (s *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and waits for the handshakes in flight to end.
func (s *streamLayer) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.ln.Close()
		s.mu.Lock()
		s.closed = true
		for c := range s.pending {
			c.Close()
		}
		for c := range s.dialed {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return err
}

// addr is an address kept as written: a DNS name is resolved at each dial,
// not once, and raft compares this node's address as a string.
type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

// Addr is the advertised address: raft takes it as this node's.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to address and authenticates both ways; the connection is
// kept in dialed from its connect, handshake included, until raft closes
// it (closeDials).
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	var raw net.Conn
	c, err := s.dialHeld(string(address), timeout, []byte{purposeRaft}, s.holdDial(&raw))
	if err != nil {
		if raw != nil {
			s.untrack(raw)
		}
		return nil, err
	}
	return ownedConn{Conn: c, raw: raw, s: s}, nil
}

// holdDial returns a hold for dialHeld that keeps the TCP connection in
// dialed, and in *raw for its untrack, unless closeDials has run.
func (s *streamLayer) holdDial(raw *net.Conn) func(net.Conn) error {
	return func(r net.Conn) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed || s.dialsClosed {
			return fmt.Errorf("shutting down: %w", net.ErrClosed)
		}
		s.dialed[r], *raw = true, r
		return nil
	}
}

// dial connects to address (TLS first when configured), authenticates
// both ways and sends hello: the purpose byte and what follows it.
func (s *streamLayer) dial(address string, timeout time.Duration, hello []byte) (net.Conn, error) {
	return s.dialHeld(address, timeout, hello, nil)
}

// dialHeld is dial that gives the TCP connection, once connected, to hold
// (when set) before anything is sent; an error from hold ends the dial.
func (s *streamLayer) dialHeld(address string, timeout time.Duration, hello []byte, hold func(net.Conn) error) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", address, timeout)
	if err != nil {
		return nil, err
	}
	if hold != nil {
		if err := hold(c); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster: dial %s: %w", address, err)
		}
	}
	if c, err = s.clientTLS(c, address, timeout); err != nil {
		return nil, fmt.Errorf("cluster: dial %s: %w", address, err)
	}
	if err := dialHandshake(c, s.token); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: dial %s: %w", address, err)
	}
	if _, err := c.Write(hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: dial %s: %w", address, err)
	}
	return c, nil
}

// dialForward connects to address, authenticates both ways and sends the
// preamble of a forwarded client connection from remote.
func (s *streamLayer) dialForward(address, remote string, timeout time.Duration) (net.Conn, error) {
	if len(remote) > maxPreamble {
		return nil, fmt.Errorf("cluster: forward: client address of %d bytes", len(remote))
	}
	return s.dial(address, timeout, append([]byte{purposeForward, byte(len(remote) >> 8), byte(len(remote))}, remote...))
}

// dialWeb connects to address, authenticates both ways and asks for its
// web handler, within ctx's deadline (a handshake timeout without one).
func (s *streamLayer) dialWeb(ctx context.Context, address string) (net.Conn, error) {
	timeout := handshakeTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	return s.dial(address, timeout, []byte{purposeWeb})
}

// readPurpose reads the purpose byte and, for a forwarded connection, the
// client's address, within the handshake's time.
func readPurpose(c net.Conn) (byte, string, error) {
	c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	defer c.SetReadDeadline(time.Time{})
	var p [3]byte
	if _, err := io.ReadFull(c, p[:1]); err != nil {
		return 0, "", fmt.Errorf("read purpose: %w", err)
	}
	switch p[0] {
	case purposeRaft, purposeCall, purposeWeb:
		return p[0], "", nil
	case purposeForward:
	default:
		return 0, "", fmt.Errorf("unknown purpose %#x", p[0])
	}
	if _, err := io.ReadFull(c, p[1:3]); err != nil {
		return 0, "", fmt.Errorf("read preamble: %w", err)
	}
	n := int(p[1])<<8 | int(p[2])
	if n == 0 || n > maxPreamble {
		return 0, "", fmt.Errorf("preamble of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return 0, "", fmt.Errorf("read preamble: %w", err)
	}
	return p[0], string(b), nil
}

func mac(token []byte, label string, a, b []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, nonceSize)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

// acceptHandshake runs the acceptor's side; it reads exactly the hello and
// the dialer's proof, nothing more.
func acceptHandshake(c net.Conn, token []byte) error {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	hello := make([]byte, len(helloMagic)+nonceSize)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fmt.Errorf("%w: read hello: %w", ErrAuth, err)
	}
	if string(hello[:len(helloMagic)]) != helloMagic {
		return fmt.Errorf("%w: not a cluster hello", ErrAuth)
	}
	d := hello[len(helloMagic):]
	a := nonce()
	reply := append(append([]byte(helloMagic), a...), mac(token, "acceptor", d, a)...)
	if _, err := c.Write(reply); err != nil {
		return fmt.Errorf("%w: write hello: %w", ErrAuth, err)
	}
	proof := make([]byte, macSize)
	if _, err := io.ReadFull(c, proof); err != nil {
		return fmt.Errorf("%w: read proof: %w", ErrAuth, err)
	}
	if !hmac.Equal(proof, mac(token, "dialer", a, d)) {
		return fmt.Errorf("%w: wrong proof", ErrAuth)
	}
	return c.SetDeadline(time.Time{})
}

// dialHandshake runs the dialer's side: it sends its proof only once the
// acceptor has proved it knows the token too.
func dialHandshake(c net.Conn, token []byte) error {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	d := nonce()
	if _, err := c.Write(append([]byte(helloMagic), d...)); err != nil {
		return fmt.Errorf("%w: write hello: %w", ErrAuth, err)
	}
	reply := make([]byte, len(helloMagic)+nonceSize+macSize)
	if _, err := io.ReadFull(c, reply); err != nil {
		return fmt.Errorf("%w: read hello: %w", ErrAuth, err)
	}
	if string(reply[:len(helloMagic)]) != helloMagic {
		return fmt.Errorf("%w: not a cluster hello", ErrAuth)
	}
	a := reply[len(helloMagic) : len(helloMagic)+nonceSize]
	if !hmac.Equal(reply[len(helloMagic)+nonceSize:], mac(token, "acceptor", d, a)) {
		return fmt.Errorf("%w: the node does not know CLUSTER_TOKEN", ErrAuth)
	}
	if _, err := c.Write(mac(token, "dialer", a, d)); err != nil {
		return fmt.Errorf("%w: write proof: %w", ErrAuth, err)
	}
	return c.SetDeadline(time.Time{})
}

// rateLog logs refused connections at most once per every, counting the
// ones it kept quiet about: a peer with the wrong token retries for ever.
type rateLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex // guards last and quiet
	last  time.Time
	quiet int
}

func (r *rateLog) refuse(remote string, err error) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last) < r.every {
		r.quiet++
		r.mu.Unlock()
		return
	}
	quiet := r.quiet
	r.last, r.quiet = now, 0
	r.mu.Unlock()
	r.log.Warn("cluster: refused a cluster-port connection", "remote", remote, "err", err, "refusals_not_logged", quiet)
}
