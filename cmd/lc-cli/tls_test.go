package main

import (
	"strings"
	"testing"

	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

// TestTLS: with --tls-* (or LC_TLS_*) lc-cli locks over TLS, with a
// session around a command and a v1 hold, and lists keys over https;
// a server that needs a client certificate gets it from --tls-cert.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "lc-cli test CA")
	caPath := ca.WriteFile(t, dir, "ca.pem")
	certPath, keyPath := ca.Issue(t, tlstest.Options{}).WriteFiles(t, dir, "server")
	clientCert, clientKey := ca.Issue(t, tlstest.Options{Client: true}).WriteFiles(t, dir, "client")
	s := startServer(t, "TLS_CERT="+certPath, "TLS_KEY="+keyPath, "TLS_CLIENT_CA="+caPath)

	env := s.env("LC_TLS_CA="+caPath, "LC_TLS_CERT="+clientCert, "LC_TLS_KEY="+clientKey)
	if code, out, errOut := run(t, env, "lock", "tls/k", "--", "sh", "-c", `test -n "$LC_FENCING_TOKEN" && echo held`); code != 0 || out != "held\n" {
		t.Fatalf("lock -- CMD over TLS: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := run(t, env, "lock", "tls/v1"); code != 0 {
		t.Fatalf("lock (v1) over TLS: exit %d, %q", code, errOut)
	}
	code, out, errOut := run(t, env, "keys")
	if code != 0 || !strings.Contains(out, "tls/v1") {
		t.Fatalf("keys over https: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := run(t, env, "unlock", "tls/v1"); code != 0 {
		t.Fatalf("unlock over TLS: exit %d, %q", code, errOut)
	}
	// The same with flags instead of the environment.
	if code, _, errOut := run(t, s.env(), "--tls-ca", caPath, "--tls-cert", clientCert, "--tls-key", clientKey,
		"trylock", "tls/flags", "--", "true"); code != 0 {
		t.Fatalf("trylock -- true with --tls-* flags: exit %d, %q", code, errOut)
	}

	// No client certificate: refused by the server, exit 3.
	if code, _, errOut := run(t, s.env("LC_TLS_CA="+caPath), "lock", "tls/anon", "--", "true"); code != exitServer || !strings.Contains(errOut, "--tls-cert") {
		t.Fatalf("lock without a client certificate: exit %d, %q; want %d", code, errOut, exitServer)
	}
	// A name the certificate does not carry: refused by lc-cli, exit 3.
	code, _, errOut = run(t, append(env, "LC_TLS_SERVER_NAME=other.example"), "trylock", "tls/name", "--", "true")
	if code != exitServer || !strings.Contains(errOut, "does not trust") {
		t.Fatalf("wrong server name: exit %d, %q; want %d naming the certificate", code, errOut, exitServer)
	}
	// A key without its certificate is a usage error.
	if code, _, errOut := run(t, s.env("LC_TLS_KEY="+clientKey), "trylock", "tls/x"); code != exitUsage {
		t.Fatalf("--tls-key alone: exit %d, %q; want %d", code, errOut, exitUsage)
	}
}
