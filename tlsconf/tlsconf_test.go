package tlsconf_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/tlsconf"
	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

func TestLoadRefusesNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	good := ca.Issue(t, tlstest.Options{})
	other := ca.Issue(t, tlstest.Options{})
	expired := ca.Issue(t, tlstest.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	certP, keyP := good.WriteFiles(t, dir, "good")
	_, otherKey := other.WriteFiles(t, dir, "other")
	expCert, expKey := expired.WriteFiles(t, dir, "expired")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("no PEM here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caP := ca.WriteFile(t, dir, "ca.pem")

	for _, tc := range []struct {
		name  string
		files tlsconf.Files
		role  tlsconf.Role
		is    error
	}{
		{"certificate does not parse", tlsconf.Files{Cert: garbage, Key: keyP}, tlsconf.Cert, nil},
		{"no certificate", tlsconf.Files{Cert: empty, Key: keyP}, tlsconf.Cert, nil},
		{"certificate missing", tlsconf.Files{Cert: filepath.Join(dir, "nope"), Key: keyP}, tlsconf.Cert, os.ErrNotExist},
		{"expired", tlsconf.Files{Cert: expCert, Key: expKey}, tlsconf.Cert, tlsconf.ErrExpired},
		{"key of another certificate", tlsconf.Files{Cert: certP, Key: otherKey}, tlsconf.Key, nil},
		{"key does not parse", tlsconf.Files{Cert: certP, Key: empty}, tlsconf.Key, nil},
		{"client CA without a certificate", tlsconf.Files{Cert: certP, Key: keyP, ClientCA: empty}, tlsconf.ClientCA, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsconf.Load(tc.files, nil)
			var fe *tlsconf.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Load: %v, want a *tlsconf.Error", err)
			}
			if fe.Role != tc.role {
				t.Errorf("Load: %v names the %s, want the %s", err, fe.Role, tc.role)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Load: %v, want it to wrap %v", err, tc.is)
			}
		})
	}
	s, err := tlsconf.Load(tlsconf.Files{Cert: certP, Key: keyP, ClientCA: caP}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Leaf().SerialNumber.Cmp(good.Cert.SerialNumber) != 0 {
		t.Errorf("Leaf serial %s, want %s", s.Leaf().SerialNumber, good.Cert.SerialNumber)
	}
	cfg, err := s.LockConfig().GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("lock config: %+v, %v; want client certificates required, TLS 1.2 at least", cfg, err)
	}
	if w := s.WebConfig(); w.ClientAuth != tls.NoClientCert || w.MinVersion != tls.VersionTLS12 {
		t.Errorf("web config asks for client certificates or allows TLS < 1.2: %+v", w)
	}
}

func TestReloadKeepsTheOldSetOnBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Issue(t, tlstest.Options{})
	certP, keyP := first.WriteFiles(t, dir, "tls")
	s, err := tlsconf.Load(tlsconf.Files{Cert: certP, Key: keyP}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Mid-rotation: the new certificate is written, its key not yet.
	second := ca.Issue(t, tlstest.Options{})
	if err := os.WriteFile(certP, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	var fe *tlsconf.Error
	if err := s.Reload(); !errors.As(err, &fe) || fe.Role != tlsconf.Key {
		t.Fatalf("Reload with a mismatched key: %v, want an error naming the key", err)
	}
	if got := s.Leaf().SerialNumber; got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("after a failed reload the serial is %s, want the old %s", got, first.Cert.SerialNumber)
	}
	if err := os.WriteFile(keyP, second.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := s.Leaf().SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after the reload the serial is %s, want %s", got, second.Cert.SerialNumber)
	}
	c, err := s.WebConfig().GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || c.Leaf.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Errorf("web GetCertificate: %v, %v; want the new certificate", c, err)
	}
}

// syncBuf is a log sink read while Watch writes it.
type syncBuf struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (w *syncBuf) Write(p []byte) (int, error) { w.mu.Lock(); defer w.mu.Unlock(); return w.b.Write(p) }
func (w *syncBuf) String() string              { w.mu.Lock(); defer w.mu.Unlock(); return w.b.String() }

// waitSerial waits until the store serves want's serial.
func waitSerial(t *testing.T, s *tlsconf.Store, want *tlstest.Leaf, logs *syncBuf) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.Leaf().SerialNumber.Cmp(want.Cert.SerialNumber) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("serial still %s, want %s\n%s", s.Leaf().SerialNumber, want.Cert.SerialNumber, logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchFollowsInPlaceWritesAndTheSecretVolumeSwap(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	// A Kubernetes Secret volume: tls.crt -> ..data/tls.crt, ..data ->
	// ..<timestamp>, and an update makes a new timestamp folder and
	// renames a new ..data link over the old one.
	version := func(name string, l *tlstest.Leaf) {
		vdir := filepath.Join(dir, name)
		if err := os.Mkdir(vdir, 0o700); err != nil {
			t.Fatal(err)
		}
		l.WriteFiles(t, vdir, "tls")
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	first := ca.Issue(t, tlstest.Options{})
	version("..v1", first)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncBuf{}
	s, err := tlsconf.Load(tlsconf.Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")},
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	kick := make(chan os.Signal, 1)
	wg.Go(func() { s.Watch(ctx, 10*time.Millisecond, kick) })
	defer wg.Wait()
	defer cancel()

	second := ca.Issue(t, tlstest.Options{})
	version("..v2", second)
	waitSerial(t, s, second, logs)

	// A rewrite in place, through the links, is seen too; a bad one is
	// logged and leaves the set in use.
	if err := os.WriteFile(filepath.Join(dir, "..v2", "tls.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !bytes.Contains([]byte(logs.String()), []byte("tls reload failed")) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed reload logged:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s.Leaf().SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatal("a failed reload replaced the certificate in use")
	}
	third := ca.Issue(t, tlstest.Options{})
	third.WriteFiles(t, filepath.Join(dir, "..v2"), "tls")
	waitSerial(t, s, third, logs)

	// A kick reloads whether or not a file changed.
	before := len(logs.String())
	kick <- os.Interrupt
	deadline = time.Now().Add(10 * time.Second)
	for !bytes.Contains([]byte(logs.String()[before:]), []byte("reason=signal")) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged after a kick:\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
