package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The TLS systems' certificates: a CA made at each start and a server
// certificate it signs for 127.0.0.1 and localhost, ECDSA P-256 as a
// production certificate usually is, made with crypto/x509 (this module
// cannot import the root module's tlsconf/tlstest, and that one wants a
// testing.TB).

// benchCerts are the files the server is started with and the pool its
// clients trust.
type benchCerts struct {
	certPath, keyPath string
	roots             *x509.CertPool
}

// makeCerts makes a CA and a server certificate valid for a day and writes
// the certificate and key (PEM) into dir.
func makeCerts(dir string) (benchCerts, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return benchCerts{}, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "bench-compare CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return benchCerts{}, fmt.Errorf("CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return benchCerts{}, fmt.Errorf("CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return benchCerts{}, fmt.Errorf("server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "bench-compare server"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return benchCerts{}, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return benchCerts{}, fmt.Errorf("server key: %w", err)
	}
	c := benchCerts{certPath: filepath.Join(dir, "server.crt"), keyPath: filepath.Join(dir, "server.key"), roots: x509.NewCertPool()}
	c.roots.AddCert(ca)
	if err := os.WriteFile(c.certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return benchCerts{}, fmt.Errorf("write server certificate: %w", err)
	}
	if err := os.WriteFile(c.keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return benchCerts{}, fmt.Errorf("write server key: %w", err)
	}
	return c, nil
}

// clientTLS is the TLS configuration every client of one TLS system shares,
// as the clients of one program would: it trusts roots alone, checks the
// certificate names 127.0.0.1, and keeps the server's session tickets in
// one cache, so that a new connection resumes (TLS 1.3: a PSK handshake,
// still with a fresh key exchange, but no certificate to send, sign or
// verify) instead of shaking hands in full.
func clientTLS(roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		RootCAs:            roots,
		ServerName:         "127.0.0.1",
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
	}
}
