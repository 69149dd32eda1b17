package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

func TestBinaryTLSRefusedAtStart(t *testing.T) {
	bin := serverBinary(t)
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	goodCert, goodKey := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "good")
	_, otherKey := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "other")
	expCert, expKey := ca.Issue(t, tlstest.Options{NotBefore: time.Now().Add(-72 * time.Hour),
		NotAfter: time.Now().Add(-24 * time.Hour)}).WriteFiles(t, dir, "expired")
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want, also string
		env              []string
	}{
		{"expired certificate", "TLS_CERT", "expired", []string{"TLS_CERT=" + expCert, "TLS_KEY=" + expKey}},
		{"key of another certificate", "TLS_KEY", "does not match", []string{"TLS_CERT=" + goodCert, "TLS_KEY=" + otherKey}},
		{"certificate does not parse", "TLS_CERT", "does not parse", []string{"TLS_CERT=" + junk, "TLS_KEY=" + goodKey}},
		{"certificate without key", "TLS_KEY", "unset", []string{"TLS_CERT=" + goodCert}},
		{"key without certificate", "TLS_CERT", "unset", []string{"TLS_KEY=" + goodKey}},
		{"client CA without a certificate", "TLS_CLIENT_CA", "no PEM", []string{"TLS_CERT=" + goodCert, "TLS_KEY=" + goodKey, "TLS_CLIENT_CA=" + goodKey}},
		{"client CA without TLS", "TLS_CLIENT_CA", "without", []string{"TLS_CLIENT_CA=" + ca.WriteFile(t, dir, "ca.pem")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin)
			cmd.Env = append([]string{"BIND_ADDRESS=127.0.0.1:0", "WEB_ADDRESS=127.0.0.1:0"}, tc.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("exit %v, want non-zero\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want+":") || !strings.Contains(string(out), tc.also) {
				t.Fatalf("message does not name %s (with %q): %s", tc.want, tc.also, out)
			}
		})
	}
}

// serialOf dials addr over TLS, trusting ca, and returns the serial of the
// certificate the server shows.
func serialOf(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial %s over TLS: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// replaceAtomically writes b beside path and renames it over path, as
// cert-manager and most deployment tools do.
func replaceAtomically(t *testing.T, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestBinaryTLSRotationUnderLoad: the certificate files are replaced
// while a session holds a key and v1 clients lock and unlock; nothing is
// dropped, and new connections of both ports see the new certificate.
func TestBinaryTLSRotationUnderLoad(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Issue(t, tlstest.Options{})
	certPath, keyPath := first.WriteFiles(t, dir, "tls")
	p := startBinary(t, "TLS_CERT="+certPath, "TLS_KEY="+keyPath)
	trust := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}
	if got := serialOf(t, p.Addr, trust); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("lock port serial %s, want %s", got, first.Cert.SerialNumber)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var slogs syncBuf
	s, err := client.NewSession(ctx, p.Addr, client.WithTLS(trust), client.WithTTL(2*time.Second),
		client.WithLogger(slog.New(slog.NewTextHandler(&slogs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	tok, err := s.Lock(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}

	// Load: the session locks and unlocks a key of its own (and pings, its
	// TTL being 2 s), v1 clients another, until the rotation is seen.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sessionOps, v1Ops atomic.Int64
	errs := make(chan error, 4)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			tk, err := s.Lock(ctx, "busy")
			if err == nil {
				err = s.Unlock(ctx, "busy", tk)
			}
			if err != nil {
				errs <- fmt.Errorf("session under rotation: %w", err)
				return
			}
			sessionOps.Add(1)
		}
	})
	v1 := client.New(p.Addr, client.WithTLS(trust))
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := v1.Lock(ctx, "v1")
			if err == nil {
				err = v1.Unlock(ctx, "v1")
			}
			if err != nil {
				errs <- fmt.Errorf("v1 under rotation: %w", err)
				return
			}
			v1Ops.Add(1)
		}
	})
	waitUntil(t, "load on both protocols", func() bool { return sessionOps.Load() > 10 && v1Ops.Load() > 10 })

	// The certificate first, then its key: between the two the files do
	// not match, and that reload keeps the old certificate.
	second := ca.Issue(t, tlstest.Options{})
	replaceAtomically(t, certPath, second.CertPEM)
	replaceAtomically(t, keyPath, second.KeyPEM)
	waitUntil(t, "the new certificate on the lock port", func() bool {
		return serialOf(t, p.Addr, trust).Cmp(second.Cert.SerialNumber) == 0
	})
	webTrust := &http.Transport{TLSClientConfig: trust}
	defer webTrust.CloseIdleConnections()
	resp, err := (&http.Client{Transport: webTrust, Timeout: 10 * time.Second}).Get("https://" + p.Web + "/readyz")
	if err != nil {
		t.Fatalf("web port over TLS: %v", err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("web port serial %s, want %s", got, second.Cert.SerialNumber)
	}

	// SIGHUP reloads too.
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reload on SIGHUP", func() bool {
		return strings.Contains(p.Logs(), `reason=signal serial=`+second.SerialHex())
	})
	before := sessionOps.Load()
	waitUntil(t, "more session requests after the rotation", func() bool { return sessionOps.Load() > before+10 })
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if strings.Contains(slogs.String(), "connection lost") || s.Err() != nil {
		t.Fatalf("the session's connection was dropped by the rotation: %v\n%s", s.Err(), slogs.String())
	}
	if err := s.Unlock(ctx, "held", tok); err != nil {
		t.Fatalf("the hold taken before the rotation: %v", err)
	}
	if !strings.Contains(p.Logs(), "tls certificate loaded") {
		t.Fatalf("no reload logged:\n%s", p.Logs())
	}
}

// syncBuf is a log sink written by a session's goroutines.
type syncBuf struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) { w.mu.Lock(); defer w.mu.Unlock(); return w.b.Write(p) }
func (w *syncBuf) String() string              { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

// TestBinaryHealthcheckOverTLS: the healthcheck command probes https when
// TLS is on, whatever name the certificate carries.
func TestBinaryHealthcheckOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	certPath, keyPath := ca.Issue(t, tlstest.Options{DNSNames: []string{"lc.example"}}).WriteFiles(t, dir, "tls")
	env := []string{"TLS_CERT=" + certPath, "TLS_KEY=" + keyPath}
	p := startBinary(t, env...)
	cmd := exec.Command(serverBinary(t), "healthcheck")
	cmd.Env = append([]string{"WEB_ADDRESS=" + p.Web}, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("healthcheck over TLS: %v\n%s", err, out)
	}
}

// waitUntil polls cond until it holds, failing the test after 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
