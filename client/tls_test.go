package client_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
)

// testCA is a certificate authority made by the test (the client module
// imports nothing of the server's, its test helpers included).
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// write writes the CA's certificate, and a certificate it signs (a server
// one for localhost and 127.0.0.1, or a client one) with its key, into
// dir; it returns the three paths.
func (ca *testCA) write(t *testing.T, dir, name string, clientCert bool) (caPath, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	if clientCert {
		tmpl.ExtKeyUsage, tmpl.DNSNames, tmpl.IPAddresses = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caPath, certPath, keyPath = filepath.Join(dir, "ca.pem"), filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	for p, b := range map[string][]byte{
		caPath:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
		certPath: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPath:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caPath, certPath, keyPath
}

func TestTLSAgainstTheServer(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caPath, certPath, keyPath := ca.write(t, dir, "server", false)
	srv := startReal(t, "TLS_CERT="+certPath, "TLS_KEY="+keyPath)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	cfg, err := client.TLSFiles{CA: caPath}.Config()
	if err != nil {
		t.Fatal(err)
	}
	srv.webTLS = cfg // the web port speaks TLS too, with the same certificate
	c := client.New(srv.addr, client.WithTLS(cfg), client.WithSource("tls-test"))
	if err := c.Lock(ctx, "k"); err != nil {
		t.Fatalf("v1 Lock over TLS: %v", err)
	}
	if err := c.TryLock(ctx, "k"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("v1 TryLock of a held key: %v, want ErrLocked", err)
	}
	// A Lock given up hangs up (close_notify): the waiter is withdrawn.
	gctx, gcancel := context.WithCancel(ctx)
	lockErr := make(chan error, 1)
	go func() { lockErr <- c.Lock(gctx, "k") }()
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return srv.waiters("k") == 1 })
	gcancel()
	if err := <-lockErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock given up: %v", err)
	}
	eventually(t, 10*time.Second, "the waiter withdrawn", func() bool { return srv.waiters("k") == 0 })
	if err := c.Unlock(ctx, "k"); err != nil {
		t.Fatalf("v1 Unlock over TLS: %v", err)
	}

	s, err := client.NewSession(ctx, srv.addr, client.WithTLS(cfg))
	if err != nil {
		t.Fatalf("session over TLS: %v", err)
	}
	tok, err := s.Lock(ctx, "s")
	if err != nil || tok == 0 {
		t.Fatalf("session Lock over TLS: %d, %v", tok, err)
	}
	if err := s.Unlock(ctx, "s", tok); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The server's certificate does not name other.example: refused by
	// the client, v1 and session alike, with the reason findable.
	wrong, err := client.TLSFiles{CA: caPath, ServerName: "other.example"}.Config()
	if err != nil {
		t.Fatal(err)
	}
	var verr *tls.CertificateVerificationError
	err = client.New(srv.addr, client.WithTLS(wrong)).TryLock(ctx, "k")
	if !errors.Is(err, client.ErrUnreachable) || !errors.As(err, &verr) {
		t.Fatalf("v1 with the wrong server name: %v, want ErrUnreachable with a verification error", err)
	}
	if _, err := client.NewSession(ctx, srv.addr, client.WithTLS(wrong)); !errors.As(err, &verr) {
		t.Fatalf("session with the wrong server name: %v, want a verification error", err)
	}
	// A CA that did not sign it: refused too.
	stranger, _, _ := newTestCA(t).write(t, t.TempDir(), "x", false)
	scfg, err := client.TLSFiles{CA: stranger}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.New(srv.addr, client.WithTLS(scfg)).TryLock(ctx, "k"); !errors.As(err, &verr) {
		t.Fatalf("v1 trusting another CA: %v, want a verification error", err)
	}
	// Plain TCP on a TLS port is no answer. (A frame shorter than a TLS
	// record header would wait for the rest until REQUEST_TIMEOUT.)
	if err := client.New(srv.addr).TryLock(ctx, "plain-key"); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("plain v1 on a TLS port: %v, want ErrUnreachable", err)
	}
}

func TestMutualTLSAgainstTheServer(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caPath, certPath, keyPath := ca.write(t, dir, "server", false)
	_, clientCert, clientKey := ca.write(t, dir, "client", true)
	srv := startReal(t, "TLS_CERT="+certPath, "TLS_KEY="+keyPath, "TLS_CLIENT_CA="+caPath)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	anon, err := client.TLSFiles{CA: caPath}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.New(srv.addr, client.WithTLS(anon)).TryLock(ctx, "k"); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("v1 without a client certificate: %v, want ErrUnreachable", err)
	}
	if _, err := client.NewSession(ctx, srv.addr, client.WithTLS(anon)); err == nil {
		t.Fatal("a session without a client certificate was opened")
	}
	other := newTestCA(t)
	_, oc, ok := other.write(t, t.TempDir(), "client", true)
	foreign, err := client.TLSFiles{CA: caPath, Cert: oc, Key: ok}.Config()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.New(srv.addr, client.WithTLS(foreign)).TryLock(ctx, "k"); !errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("v1 with a certificate of another CA: %v, want ErrUnreachable", err)
	}

	mine, err := client.TLSFiles{CA: caPath, Cert: clientCert, Key: clientKey}.Config()
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(srv.addr, client.WithTLS(mine))
	if err := c.TryLock(ctx, "k"); err != nil {
		t.Fatalf("v1 with a client certificate: %v", err)
	}
	if err := c.Unlock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	s, err := client.NewSession(ctx, srv.addr, client.WithTLS(mine))
	if err != nil {
		t.Fatalf("session with a client certificate: %v", err)
	}
	if _, err := s.Lock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTLSFilesErrors(t *testing.T) {
	if _, err := (client.TLSFiles{Cert: "x.crt"}).Config(); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	if _, err := (client.TLSFiles{CA: filepath.Join(t.TempDir(), "missing.pem")}).Config(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing CA file: %v", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (client.TLSFiles{CA: empty}).Config(); err == nil {
		t.Error("a CA file without a certificate was accepted")
	}
}
