package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// runHealthcheck runs `locking-center healthcheck` with only WEB_ADDRESS set
// and returns its exit status and stderr.
func runHealthcheck(t *testing.T, bin, webAddress string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, "healthcheck")
	cmd.Env = []string{"WEB_ADDRESS=" + webAddress}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	default:
		t.Fatalf("run healthcheck: %v", err)
		return -1, ""
	}
}

// awaitHealthy runs the healthcheck until it exits 0 or 10 seconds pass:
// readiness may follow the log replay, so it is awaited, not expected at
// once. It returns the last exit status and stderr.
func awaitHealthy(t *testing.T, bin, webAddress string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, stderr := runHealthcheck(t, bin, webAddress)
		if code == 0 || time.Now().After(deadline) {
			return code, stderr
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runInProcess runs the server in-process on free loopback ports and returns
// its web address and a function that stops it and waits for run to return.
func runInProcess(t *testing.T, env map[string]string) (web net.Addr, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	env["BIND_ADDRESS"], env["WEB_ADDRESS"] = "127.0.0.1:0", "127.0.0.1:0"
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, func(k string) string { return env[k] }, slog.New(slog.NewTextHandler(io.Discard, nil)),
			func(_, w net.Addr) { addrs <- w })
	}()
	select {
	case web = <-addrs:
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	}
	return web, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
}

func TestHealthcheckSubcommand(t *testing.T) {
	defer goleak.VerifyNone(t)
	bin := serverBinary(t) // the binary a container HEALTHCHECK runs
	web, stop := runInProcess(t, map[string]string{})
	_, port, err := net.SplitHostPort(web.String())
	if err != nil {
		stop()
		t.Fatal(err)
	}

	if code, stderr := awaitHealthy(t, bin, web.String()); code != 0 {
		stop()
		t.Fatalf("healthcheck against a running server: exit %d, stderr %q", code, stderr)
	}

	// The image's default WEB_ADDRESS has no host: the probe must use loopback.
	if code, stderr := runHealthcheck(t, bin, ":"+port); code != 0 {
		t.Errorf("WEB_ADDRESS=:%s: exit %d, stderr %q", port, code, stderr)
	}
	if code, stderr := runHealthcheck(t, bin, "0.0.0.0:"+port); code != 0 {
		t.Errorf("WEB_ADDRESS=0.0.0.0:%s: exit %d, stderr %q", port, code, stderr)
	}

	stop()
	if code, _ := runHealthcheck(t, bin, web.String()); code != 1 {
		t.Errorf("healthcheck against a stopped server: exit %d, want 1", code)
	}

	// Probes are exempt from WEB_PASSWORD: the container stays healthy when
	// the dashboard asks for a password.
	t.Run("web password", func(t *testing.T) {
		web, stop := runInProcess(t, map[string]string{"WEB_PASSWORD": "secret"})
		defer stop()
		if code, stderr := awaitHealthy(t, bin, web.String()); code != 0 {
			t.Errorf("with WEB_PASSWORD set: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("not ready", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/readyz" {
				t.Errorf("healthcheck asked for %s, want /readyz", r.URL.Path)
			}
			http.Error(w, "replaying", http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		code, stderr := runHealthcheck(t, bin, srv.Listener.Addr().String())
		if code != 1 || !strings.Contains(stderr, "503") {
			t.Errorf("healthcheck against a 503 /readyz: exit %d, stderr %q; want 1 and the status", code, stderr)
		}
	})

	t.Run("web off", func(t *testing.T) {
		code, stderr := runHealthcheck(t, bin, "off")
		if code != 1 || !strings.Contains(stderr, "WEB_ADDRESS") {
			t.Errorf("WEB_ADDRESS=off: exit %d, stderr %q; want 1 and a message naming WEB_ADDRESS", code, stderr)
		}
	})

	t.Run("bad address", func(t *testing.T) {
		code, stderr := runHealthcheck(t, bin, "nonsense")
		if code != 1 || !strings.Contains(stderr, "WEB_ADDRESS") {
			t.Errorf("WEB_ADDRESS=nonsense: exit %d, stderr %q; want 1 and a message naming WEB_ADDRESS", code, stderr)
		}
	})
}

// TestReachLine: the start-up line warns when a port is open beyond this
// host with nothing protecting it, and says what protects it otherwise.
func TestReachLine(t *testing.T) {
	wild := fakeListener{&net.TCPAddr{IP: net.IPv4zero, Port: 22119}}
	wildWeb := fakeListener{&net.TCPAddr{IP: net.IPv4zero, Port: 22120}}
	local := fakeListener{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 22119}}
	cases := []struct {
		name     string
		cfg      config
		tcp, web net.Listener
		want     []string
	}{
		{"open, unprotected", config{}, wild, wildWeb, []string{"level=WARN", "every interface (:22119)", "no AUTH_TOKEN", "no WEB_PASSWORD"}},
		{"open, protected", config{AuthToken: "t", WebPassword: "p"}, wild, wildWeb, []string{"level=INFO", "sessions must present AUTH_TOKEN", "basic auth"}},
		{"this host only", config{}, local, nil, []string{"level=INFO", "this host only", `web=off`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf strings.Builder
			logReach(slog.New(slog.NewTextHandler(&buf, nil)), c.cfg, c.tcp, c.web)
			for _, w := range c.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("line %q lacks %q", buf.String(), w)
				}
			}
		})
	}
}

type fakeListener struct{ addr net.Addr }

func (fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (fakeListener) Close() error              { return nil }
func (l fakeListener) Addr() net.Addr          { return l.addr }
