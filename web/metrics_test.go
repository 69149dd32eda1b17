package web

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/wire"
)

// specMetrics are the names the README lists (wal_* only with a log).
var specMetrics = []string{
	"held_keys", "waiters", "stuck_keys", "oldest_hold_age_seconds",
	"requests_total", "resets_total", "connections", "connections_rejected_total",
	"wait_duration_seconds", "hold_duration_seconds", "sessions", "session_expirations_total",
}

var walMetrics = []string{"wal_fsync_duration_seconds", "wal_size_bytes", "wal_compactions_total", "wal_errors_total"}

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	w := newRecorder()
	h.ServeHTTP(w, mustRequest(t, "GET", "/metrics"))
	if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("/metrics: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	return w.Body.String()
}

func lint(t *testing.T, exposition string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(exposition)).Lint()
	if err != nil {
		t.Fatalf("promlint could not parse the exposition: %v\n%s", err, exposition)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// families returns the families named in TYPE lines.
func typed(exposition string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllStringSubmatch(exposition, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestMetricsLintAndNames(t *testing.T) {
	for _, wal := range []bool{false, true} {
		t.Run("wal="+strconv.FormatBool(wal), func(t *testing.T) {
			f := newFixture(t, func(o *Options) {
				o.Metrics = metrics.New(metrics.Options{WAL: wal})
				o.Persistent = wal
				o.LogStats = func() LogStats { return LogStats{SizeBytes: 4096, Compactions: 3, Errors: 1} }
				o.Connections = func() int { return 7 }
			})
			f.hold("old", "s", time.Hour)
			f.hold("new", "s", time.Second)
			f.wait("new", "w")
			if wal {
				f.h.(*server).metrics.ObserveFsync(2 * time.Millisecond)
			}
			out := scrape(t, f.h)
			lint(t, out)
			types := typed(out)
			want := specMetrics
			if wal {
				want = append(append([]string(nil), specMetrics...), walMetrics...)
			}
			for _, name := range want {
				if _, ok := types["locking_center_"+name]; !ok {
					t.Errorf("metric locking_center_%s missing", name)
				}
			}
			if !wal {
				for _, name := range walMetrics {
					if strings.Contains(out, name) {
						t.Errorf("%s exposed without a log", name)
					}
				}
			}
			for _, line := range []string{
				"locking_center_held_keys 2",
				"locking_center_waiters 1",
				"locking_center_stuck_keys 1",
				"locking_center_oldest_hold_age_seconds 3600",
				"locking_center_connections 7",
			} {
				if !strings.Contains(out, line+"\n") {
					t.Errorf("want %q in\n%s", line, out)
				}
			}
			if wal {
				for _, line := range []string{
					"locking_center_wal_size_bytes 4096",
					"locking_center_wal_compactions_total 3",
					"locking_center_wal_errors_total 1",
					"locking_center_wal_fsync_duration_seconds_count 1",
				} {
					if !strings.Contains(out, line+"\n") {
						t.Errorf("want %q in\n%s", line, out)
					}
				}
			}
		})
	}
}

// value reads one sample from an exposition; -1 when absent.
func value(exposition, series string) float64 {
	for line := range strings.Lines(exposition) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestMetricsMoveWithLocks takes locks over real TCP and checks that the
// counters and histograms follow.
func TestMetricsMoveWithLocks(t *testing.T) {
	s := startStack(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := client.New(s.tcp, client.WithSource("t"))

	if err := c.Lock(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.TryLock(ctx, "a"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("trylock: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Lock(ctx, "a") }()
	s.awaitWaiters(t, "a", 1)
	if err := c.ResetByKey(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, client.ErrReset) {
		t.Fatalf("waiter: %v", err)
	}
	if err := c.Lock(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(ctx, "b"); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("second unlock: %v", err)
	}
	if err := c.ResetBySource(ctx, "nobody"); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	s.metrics.WritePrometheus(&buf)
	out := buf.String()
	lint(t, out)
	for series, want := range map[string]float64{
		`locking_center_requests_total{action="lock",result="ok"}`:         2,
		`locking_center_requests_total{action="lock",result="fail"}`:       1,
		`locking_center_requests_total{action="trylock",result="locked"}`:  1,
		`locking_center_requests_total{action="unlock",result="ok"}`:       1,
		`locking_center_requests_total{action="unlock",result="fail"}`:     1,
		`locking_center_requests_total{action="reset_key",result="ok"}`:    1,
		`locking_center_requests_total{action="reset_source",result="ok"}`: 1,
		`locking_center_resets_total{by="key"}`:                            1,
		`locking_center_resets_total{by="source"}`:                         1,
		`locking_center_wait_duration_seconds_count`:                       2,
		`locking_center_hold_duration_seconds_count`:                       2,
		`locking_center_held_keys`:                                         0,
	} {
		if got := value(out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// A web reset counts in resets_total as a TCP reset does.
	if err := c.Lock(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(s.web+"/api/v1/reset/key", "application/json", strings.NewReader(`{"key":"c"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	buf.Reset()
	s.metrics.WritePrometheus(&buf)
	if got := value(buf.String(), `locking_center_resets_total{by="key"}`); got != 2 {
		t.Errorf("resets_total{by=key} after a web reset = %v, want 2", got)
	}
}

// TestMetricsSessions: the session gauge and expiry counter come from the
// table, and every session action has its requests_total series from the
// start, counted under its own name.
func TestMetricsSessions(t *testing.T) {
	var mu sync.Mutex // guards clock
	clock := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	m := metrics.New(metrics.Options{})
	table := locker.New(locker.Options{Now: now})
	h := New(Options{Table: table, Metrics: m, Logger: slog.New(slog.DiscardHandler), now: now})
	out := scrape(t, h)
	for _, a := range []string{"lock", "unlock", "reset_key", "reset_source", "trylock", "cancel", "ping", "close", "open"} {
		for _, r := range []string{"ok", "fail", "locked", "invalid", "hangup"} {
			if series := `locking_center_requests_total{action="` + a + `",result="` + r + `"}`; value(out, series) != 0 {
				t.Errorf("%s not created at start", series)
			}
		}
	}
	if value(out, "locking_center_sessions") != 0 || value(out, "locking_center_session_expirations_total") != 0 {
		t.Fatalf("session metrics at start:\n%s", out)
	}
	m.Request(protocol.Ping, wire.ResultOK)
	m.Request(protocol.SessionOpen, wire.ResultFail)
	m.Request(protocol.Cancel, wire.ResultFail)
	if _, err := table.OpenSession("svc", "10.0.0.3:7000", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := table.OpenSession("svc", "10.0.0.3:7001", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Second)
	mu.Unlock()
	if n := table.ExpireSessions(); n != 1 {
		t.Fatalf("expired %d sessions, want the 1 s one", n)
	}
	out = scrape(t, h)
	lint(t, out)
	for series, want := range map[string]float64{
		`locking_center_requests_total{action="ping",result="ok"}`:     1,
		`locking_center_requests_total{action="open",result="fail"}`:   1,
		`locking_center_requests_total{action="cancel",result="fail"}`: 1,
		`locking_center_sessions`:                                      1,
		`locking_center_session_expirations_total`:                     1,
	} {
		if got := value(out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
}
