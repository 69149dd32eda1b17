// Package tlsconf loads the server's TLS certificate, private key and
// client CA bundle from PEM files, and keeps them current while the
// server runs.
//
// What it guarantees:
//
//   - Load refuses, saying which file (an *Error with its Role), a
//     certificate that does not parse, a key that does not parse or does
//     not match the certificate, a certificate already expired, and a
//     client CA bundle that holds no certificate.
//   - The certificate, key and client CA in use are swapped together and
//     atomically: a handshake sees the old set or the new one, never a mix.
//     Connections already established are never touched by a reload.
//   - A reload that fails (a file half-written mid-rotation, a key that
//     does not match yet) keeps what is in use; Reload returns why, Watch
//     logs it, and the next change of a file is tried again.
//   - Watch notices within one poll interval that a file was rewritten in
//     place, replaced by a rename, or reached through a symbolic link that
//     now points elsewhere (the "..data" swap of a Kubernetes Secret
//     volume): it compares each path's target by identity (device and
//     inode), size and modification time.
//   - Every configuration it hands out asks for TLS 1.2 or later.
package tlsconf

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Role says which of the files an Error is about.
type Role int

// The files of a Files, in the order they are read.
const (
	Cert Role = iota
	Key
	ClientCA
)

func (r Role) String() string {
	switch r {
	case Cert:
		return "certificate"
	case Key:
		return "private key"
	case ClientCA:
		return "client CA bundle"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Files names the PEM files. Cert and Key are required; ClientCA, when
// set, makes LockConfig ask every client for a certificate it signed.
type Files struct {
	Cert     string // the server's certificate, then any intermediates
	Key      string // the certificate's private key (PKCS #1, PKCS #8 or EC)
	ClientCA string // CA certificates that sign the lock port's clients
}

// Error is a file that could not be used, and why.
type Error struct {
	Role Role
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("%s %s: %v", e.Role, e.Path, e.Err) }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// ErrExpired is wrapped by the Error of a certificate whose NotAfter has
// passed.
var ErrExpired = errors.New("certificate expired")

// Store holds the certificate set in use and reloads it. Its methods are
// safe for concurrent use.
type Store struct {
	files  Files
	logger *slog.Logger
	now    func() time.Time

	cur atomic.Pointer[loaded] // the set every new handshake uses

	// reloadMu serialises reloads (a SIGHUP and the poll at once), so that
	// an older read never replaces a newer one; tried is the files'
	// stamps as of the last attempt, for the poll to see a change.
	reloadMu sync.Mutex
	tried    [3]stamp
}

// loaded is one certificate set with the configurations built from it.
type loaded struct {
	cert *tls.Certificate // Leaf set
	lock *tls.Config      // the lock port's, client CA included
	ca   *x509.CertPool   // Files.ClientCA's certificates; nil without
}

// Load reads the files and returns a Store serving them; logger receives
// Watch's lines (slog.Default when nil).
func Load(files Files, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Store{files: files, logger: logger, now: time.Now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Leaf returns the certificate in use.
func (s *Store) Leaf() *x509.Certificate { return s.cur.Load().cert.Leaf }

// LockConfig returns the lock port's configuration: each handshake takes
// the set in use at that moment (GetConfigForClient), with a client
// certificate signed by Files.ClientCA required when it is set.
func (s *Store) LockConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().lock, nil
		},
	}
}

// WebConfig returns the web port's configuration: the certificate in use
// at each handshake, no client certificate asked for (browsers log in with
// WEB_PASSWORD instead), HTTP/1.1.
func (s *Store) WebConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
	}
}

// PeerClientConfig returns the configuration for dialling a peer by host
// when every peer is both client and server (the cluster port's mutual
// TLS): it shows the certificate in use now and trusts only Files.ClientCA
// (which must be set), whose certificates must name host. A reload applies
// to the next call.
func (s *Store) PeerClientConfig(host string) *tls.Config {
	l := s.cur.Load()
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		ServerName:   host,
		RootCAs:      l.ca,
		Certificates: []tls.Certificate{*l.cert},
	}
}

// Reload reads the files again and, when they make a valid set, puts it in
// use. On error the set in use stays.
func (s *Store) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.reloadLocked()
}

func (s *Store) reloadLocked() error {
	// Stamps are taken before the files are read: a file replaced while
	// it is read then differs from its stamp at the next poll.
	s.tried = s.stamps()
	l, err := s.read()
	if err != nil {
		return err
	}
	s.cur.Store(l)
	return nil
}

// read loads and checks the three files.
func (s *Store) read() (*loaded, error) {
	certPEM, err := os.ReadFile(s.files.Cert)
	if err != nil {
		return nil, &Error{Cert, s.files.Cert, err}
	}
	leaf, err := parseChain(certPEM)
	if err != nil {
		return nil, &Error{Cert, s.files.Cert, err}
	}
	if now := s.now(); now.After(leaf.NotAfter) {
		return nil, &Error{Cert, s.files.Cert, fmt.Errorf("%w at %s (serial %s)", ErrExpired,
			leaf.NotAfter.UTC().Format(time.RFC3339), leaf.SerialNumber.Text(16))}
	}
	keyPEM, err := os.ReadFile(s.files.Key)
	if err != nil {
		return nil, &Error{Key, s.files.Key, err}
	}
	// The certificate parsed above, so what X509KeyPair refuses now is
	// the key: unparsable, or not the certificate's.
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &Error{Key, s.files.Key, err}
	}
	lock := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
	}
	var ca *x509.CertPool
	if s.files.ClientCA != "" {
		pool, err := readPool(s.files.ClientCA)
		if err != nil {
			return nil, &Error{ClientCA, s.files.ClientCA, err}
		}
		lock.ClientCAs = pool
		lock.ClientAuth = tls.RequireAndVerifyClientCert
		ca = pool
	}
	// Fresh ticket keys with every set: a session ticket issued before a
	// reload cannot resume after it, so a client whose CA was just removed
	// has to show its certificate to the new set.
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return nil, fmt.Errorf("session ticket key: %w", err)
	}
	lock.SetSessionTicketKeys([][32]byte{k})
	return &loaded{cert: &pair, lock: lock, ca: ca}, nil
}

// parseChain parses every CERTIFICATE block of a PEM file and returns the
// first, the leaf.
func parseChain(b []byte) (*x509.Certificate, error) {
	certs, err := parseCerts(b)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for len(bytes.TrimSpace(b)) > 0 {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break // trailing text that is not PEM
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE block in it")
	}
	return certs, nil
}

func readPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(b)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// stamp is what the poll compares of a file: the target of its path.
type stamp struct {
	fi  os.FileInfo // nil when the path could not be read
	err string
}

func (a stamp) same(b stamp) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil && a.err == b.err
	}
	return os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime())
}

func (s *Store) stamps() [3]stamp {
	var st [3]stamp
	for i, p := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p) // follows links: the "..data" swap changes the target
		if err != nil {
			st[i] = stamp{err: err.Error()}
			continue
		}
		st[i] = stamp{fi: fi}
	}
	return st
}

// changed reports whether a file differs from the last attempt's stamps.
func (s *Store) changed() bool {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	now := s.stamps()
	for i := range now {
		if !now[i].same(s.tried[i]) {
			return true
		}
	}
	return false
}

// Watch reloads the files when one of them changes (checked every
// interval) and whenever a value arrives on kick (main sends SIGHUP
// there), logging each reload and each failure, until ctx ends.
func (s *Store) Watch(ctx context.Context, interval time.Duration, kick <-chan os.Signal) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		var why string
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !s.changed() {
				continue
			}
			why = "files changed"
		case <-kick:
			why = "signal"
		}
		s.reloadLogged(why)
	}
}

func (s *Store) reloadLogged(why string) {
	old := s.Leaf()
	if err := s.Reload(); err != nil {
		s.logger.Error("tls reload failed; the certificate in use stays", "reason", why, "err", err,
			"serial", old.SerialNumber.Text(16), "not_after", old.NotAfter.UTC())
		return
	}
	leaf := s.Leaf()
	s.logger.Info("tls certificate loaded", "reason", why, "serial", leaf.SerialNumber.Text(16),
		"subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC(), "previous_serial", old.SerialNumber.Text(16))
}
