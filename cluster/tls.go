package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// PeerTLS is the cluster port's mutual TLS (RAFT_TLS_CERT, RAFT_TLS_KEY,
// RAFT_TLS_CA): every connection, raft's, forwarded clients' and calls',
// is TLS both ways before the CLUSTER_TOKEN handshake, which still runs
// inside it. A peer must show a certificate signed by RAFT_TLS_CA, and a
// node dialled must show one for the host it was dialled by.
type PeerTLS struct {
	// Server is the acceptor's configuration; it must require and verify
	// a client certificate (tlsconf.Store.LockConfig with the CA as
	// ClientCA does, reloading at each handshake).
	Server *tls.Config
	// Client returns the dialer's configuration for a peer dialled by
	// host (tlsconf.Store.PeerClientConfig).
	Client func(host string) *tls.Config
}

// ErrTLS is wrapped by a cluster-port connection whose TLS handshake
// failed: a certificate of another CA, none, or one for another name.
var ErrTLS = errors.New("cluster: TLS handshake on the cluster port failed")

// serverTLS wraps an accepted connection in TLS, when configured, and
// completes the handshake within handshakeTimeout.
func (s *streamLayer) serverTLS(c net.Conn) (net.Conn, error) {
	if s.tls == nil {
		return c, nil
	}
	tc := tls.Server(c, s.tls.Server)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return c, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return tc, nil
}

// clientTLS wraps a dialled connection in TLS, when configured; on error
// the connection is closed.
func (s *streamLayer) clientTLS(c net.Conn, address string, timeout time.Duration) (net.Conn, error) {
	if s.tls == nil {
		return c, nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		c.Close()
		return nil, err
	}
	tc := tls.Client(c, s.tls.Client(host))
	ctx, cancel := context.WithTimeout(context.Background(), min(timeout, handshakeTimeout))
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrTLS, err)
	}
	return tc, nil
}
