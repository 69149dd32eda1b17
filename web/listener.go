package web

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// DefaultMaxConnections bounds the web port's concurrent connections when
// Options.MaxConnections is 0: a dashboard tab keeps one or two, a
// scraper one.
const DefaultMaxConnections = 256

// The http.Server timeouts of the web port (NewHTTPServer). Requests are
// small (a reset's body is at most 4 KiB) and answers at most a 10,000-key
// page, so a connection that takes longer is stalled or hostile. Idle
// keep-alive connections close after IdleTimeout; the dashboard's live
// refresh, every 2 s, keeps its own in use.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = time.Minute
	IdleTimeout       = 30 * time.Second
	MaxHeaderBytes    = 64 << 10
)

// NewHTTPServer returns the http.Server of the web port: handler h (New's)
// with the timeouts above. Serve it on Options.Listener's listener.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// Listener returns ln bounded to o.MaxConnections concurrent connections
// (DefaultMaxConnections when 0), at most o.MaxConnectionsPerPeer of them
// from one IP address (a quarter of the bound when 0; -1 for no per-peer
// bound). A connection past a bound is accepted, answered "503 Service
// Unavailable" with Retry-After, and closed, so that a client sees why; the
// refusals are logged at most once a second. Closing the returned listener
// closes ln and waits for the refusals being written (at most a second
// each). With o.TLSConfig every connection it returns is a *tls.Conn over
// a counted one, so that http.Server bounds the handshake by its timeouts
// and sets Request.TLS, and a refusal is written inside TLS.
func (o Options) Listener(ln net.Listener) net.Listener {
	l := &limitListener{Listener: ln, max: o.MaxConnections, perPeer: o.MaxConnectionsPerPeer, tls: o.TLSConfig,
		byPeer: make(map[netip.Addr]int), log: o.Logger, refusing: make(chan struct{}, maxRefusing),
		refusedLog: logLimiter{interval: time.Second}}
	if l.max <= 0 {
		l.max = DefaultMaxConnections
	}
	switch {
	case l.perPeer == 0:
		l.perPeer = max(1, l.max/4)
	case l.perPeer < 0 || l.perPeer > l.max:
		l.perPeer = l.max
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	return l
}

// maxRefusing bounds the refusals written at once; past it a connection
// is closed without an answer, so that a flood costs no more goroutines.
const maxRefusing = 64

type limitListener struct {
	net.Listener
	max, perPeer int
	log          *slog.Logger
	refusedLog   logLimiter
	tls          *tls.Config // nil: plain HTTP

	// mu guards open and byPeer.
	mu     sync.Mutex
	open   int
	byPeer map[netip.Addr]int

	refusing chan struct{}  // a slot per refusal being written
	refusals sync.WaitGroup // the goroutines writing them
}

// Accept returns the next connection within the bounds, refusing the
// others, and passes ln's errors on.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := peerAddr(c.RemoteAddr())
		l.mu.Lock()
		reason := ""
		switch {
		case l.open >= l.max:
			reason = fmt.Sprintf("the web port serves at most %d connections at once", l.max)
		case l.byPeer[peer] >= l.perPeer:
			reason = fmt.Sprintf("the web port serves at most %d connections at once from one address", l.perPeer)
		default:
			l.open++
			l.byPeer[peer]++
		}
		open := l.open
		l.mu.Unlock()
		if reason == "" {
			lc := &limitConn{Conn: c, l: l, peer: peer}
			if l.tls != nil {
				return tls.Server(lc, l.tls), nil
			}
			return lc, nil
		}
		if ok, held := l.refusedLog.allow(time.Now()); ok {
			l.log.Warn("web connection refused", "peer", c.RemoteAddr().String(), "reason", reason,
				"open", open, "held_back", held)
		}
		l.refuse(c, reason)
	}
}

// refuse answers c with 503 in a goroutine of its own (bounded by
// maxRefusing): the client's request is read and dropped first, so that
// closing does not reset the connection before the answer is read.
func (l *limitListener) refuse(c net.Conn, reason string) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	if l.tls != nil {
		c = tls.Server(c, l.tls) // the handshake runs under the deadline below
	}
	l.refusals.Go(func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		body := "503 service unavailable: " + reason + "; try again shortly\n"
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
			"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if err != nil {
			return // the client left
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		var buf [4096]byte
		for {
			if _, err := c.Read(buf[:]); err != nil {
				return // EOF, or the deadline: done either way
			}
		}
	})
}

// Close closes the listener and waits for the refusals being written.
func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.refusals.Wait()
	return err
}

func (l *limitListener) release(peer netip.Addr) {
	l.mu.Lock()
	l.open--
	if l.byPeer[peer]--; l.byPeer[peer] <= 0 {
		delete(l.byPeer, peer)
	}
	l.mu.Unlock()
}

// peerAddr is the IP address of a connection's peer; connections that have
// none (a unix socket) share the zero address.
func peerAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// limitConn gives its slot back when closed, once.
type limitConn struct {
	net.Conn
	l    *limitListener
	peer netip.Addr
	once sync.Once
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one it refused.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.peer) })
	return err
}
