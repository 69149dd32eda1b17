package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// WithTLS makes every connection of a Client or a Session TLS, for a
// server started with TLS_CERT and TLS_KEY. cfg is cloned; when its
// ServerName is empty the host of the address is used, as tls.Dial does
// (in an address list, each entry's own host).
// The handshake is part of the connection attempt (WithDialTimeout bounds
// it); a certificate the client refuses makes the call fail with
// ErrUnreachable wrapping the crypto/tls error (errors.As finds a
// *tls.CertificateVerificationError). For a server with TLS_CLIENT_CA,
// cfg must carry a client certificate (TLSFiles does). nil: plain TCP.
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) {
		c.tls = nil
		if cfg != nil {
			c.tls = cfg.Clone() // per Client: setAddresses sets its ServerNames
		}
	}
}

// TLSFiles names PEM files that make a client TLS configuration.
type TLSFiles struct {
	// CA is a bundle of the certificates that sign the server's; "" uses
	// the system's roots.
	CA string
	// Cert and Key are the client's certificate and private key, for a
	// server that asks for one (TLS_CLIENT_CA); both or neither.
	Cert, Key string
	// ServerName is the name the server's certificate must carry; ""
	// takes the host of the address dialled.
	ServerName string
}

// Config reads the files and returns the configuration, for WithTLS.
// Errors name the file.
func (f TLSFiles) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("TLS CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("TLS CA bundle %s: no PEM certificate in it", f.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.Cert != "" && f.Key != "":
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate %s and key %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.Cert != "" || f.Key != "":
		return nil, errors.New("TLS client certificate and key: give both or neither")
	}
	return cfg, nil
}

// handshake makes conn a TLS connection with cfg, the handshake bounded
// by ctx; conn is closed if it fails. cfg nil: plain TCP, conn as it is.
func handshake(ctx context.Context, conn net.Conn, cfg *tls.Config) (net.Conn, error) {
	if cfg == nil {
		return conn, nil
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	return tc, nil
}

// closeWrite half-closes conn: the end of the stream for a TCP connection,
// close_notify for a TLS one (which the server reads as the end too). It
// reports false when conn cannot.
func closeWrite(conn net.Conn) bool {
	cw, ok := conn.(interface{ CloseWrite() error })
	return ok && cw.CloseWrite() == nil
}
