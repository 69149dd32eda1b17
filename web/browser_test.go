package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/internal/lctest"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/web/keypath"
	"github.com/locking-center/locking-center/wire"
)

// stack is the server as main.go wires it: one table, the TCP protocol and
// the web handler sharing one Metrics, on free ports of 127.0.0.1.
type stack struct {
	table   *locker.Table
	tcp     string // host:port of the lock protocol
	web     string // http://host:port
	metrics *metrics.Metrics
}

func startStack(t *testing.T, o Options) *stack {
	t.Helper()
	m := metrics.New(metrics.Options{})
	table := locker.New(locker.Options{OnGrant: m.ObserveWait, OnRelease: m.ObserveHold})
	quiet := slog.New(slog.DiscardHandler)
	srv := &wire.Server{Table: table, Observer: m, Logger: quiet}
	o.Table, o.Metrics, o.Connections, o.Logger = table, m, srv.Connections, quiet
	httpSrv := &http.Server{Handler: New(o), ReadHeaderTimeout: 5 * time.Second}

	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	webLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(tcpLn) })     // returns ErrServerClosed at Shutdown
	wg.Go(func() { _ = httpSrv.Serve(webLn) }) // returns ErrServerClosed at Shutdown
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("lock protocol shutdown: %v", err)
		}
		if err := httpSrv.Shutdown(ctx); err != nil {
			t.Errorf("web shutdown: %v", err)
		}
		wg.Wait()
	})
	return &stack{table: table, tcp: tcpLn.Addr().String(), web: "http://" + webLn.Addr().String(), metrics: m}
}

// awaitWaiters waits until key has n waiters.
func (s *stack) awaitWaiters(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ki, ok := s.table.Key(key); ok && ki.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("key %q never had %d waiters", key, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// needChromium returns chromium's path for the real-browser test named by
// what, or skips it loudly (lctest.Chromium: under CI a missing chromium
// fails it).
func needChromium(t *testing.T, what string) string {
	t.Helper()
	return lctest.Chromium(t, what)
}

// TestDashboardInBrowser drives the dashboard in a real headless chromium:
// a key held over TCP with a waiter shows up, Reset and its confirmation
// free it, and the waiting client is answered '-'. It saves a screenshot of
// the dashboard (in the test's artifact folder, and as dashboard.png in
// $LC_SCREENSHOT_DIR when that is set).
func TestDashboardInBrowser(t *testing.T) {
	chrome := needChromium(t, "the real-browser test of the dashboard")

	s := startStack(t, Options{StuckAfter: 10 * time.Minute, Version: "v1.0.0"})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	// Keys restored as if from the log, so that the page looks like a day
	// at work: several services, one key stuck for most of an hour, one
	// key whose name is markup that must show as text.
	now := time.Now()
	restored := []struct {
		key, source, remote string
		age                 time.Duration
	}{
		{"deploy/production", "ci-runner-7", "10.0.4.17:53124", 47 * time.Minute},
		{"cron/nightly-report", "reports", "10.0.2.9:40022", 3*time.Minute + 12*time.Second},
		{"db/migrations", "api-2", "10.0.3.21:38110", 41 * time.Second},
		{"cache/warmup/eu-west", "cache-warmer", "10.0.5.4:51890", 9 * time.Second},
		{`<img src=x onerror="document.title='pwned'">`, "fuzzer", "10.0.9.9:40404", 2 * time.Minute},
	}
	for _, r := range restored {
		if _, err := s.table.Restore(r.key, locker.Holder{Source: r.source, Remote: r.remote}, 0, now.Add(-r.age), 0); err != nil {
			t.Fatal(err)
		}
	}

	// A key held through a session, as lc-cli lock KEY -- CMD holds it.
	sess, err := s.table.OpenSession("report-runner", "10.0.2.30:41870", 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	if _, err := sess.Lock("reports/daily", 1, func(_ uint64, err error) { granted <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("session lock: %v", err)
	}

	const key = "invoices/2026-11"
	holder := client.New(s.tcp, client.WithSource("billing"))
	if err := holder.Lock(ctx, key); err != nil {
		t.Fatalf("holder lock: %v", err)
	}
	waited := make(chan error, 1)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() { waited <- client.New(s.tcp, client.WithSource("billing-retry")).Lock(waitCtx, key) }()
	s.awaitWaiters(t, key, 1)

	alloc, stopAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(1360, 820),
	)
	defer stopAlloc()
	browser, stopBrowser := chromedp.NewContext(alloc)
	defer stopBrowser()

	row := chromedp.CSS(fmt.Sprintf(`tr[data-key=%q]`, key))
	if err := chromedp.Do(browser,
		chromedp.Navigate(s.web+"/"),
		chromedp.WaitVisible(row),
	); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	next, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(fmt.Sprintf(`tr[data-key=%q] [data-testid=next]`, key))))
	if err != nil || !strings.Contains(next, "billing-retry") {
		t.Fatalf("next-in-line cell: %q, %v; want the waiting billing-retry", next, err)
	}
	tag, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`tr[data-key="reports/daily"] [data-testid=session-tag]`)))
	if tag = strings.ToLower(tag); err != nil || !strings.Contains(tag, "session") || !strings.Contains(tag, "connected") || strings.Contains(tag, "disconnected") {
		t.Fatalf("session hold's tag: %q, %v", tag, err)
	}
	// A key link looks like a link: the accent colour and underlined, not
	// the table's text.
	look, err := chromedp.Run(browser, chromedp.Evaluate[string](`(() => {
		const a = document.querySelector('tr[data-key="db/migrations"] [data-testid=key-link]');
		const s = getComputedStyle(a), td = getComputedStyle(a.closest('tr'));
		return s.textDecorationLine + "|" + (s.color !== td.color);
	})()`))
	if err != nil || look != "underline|true" {
		t.Fatalf("key link style %q (%v), want underlined in its own colour", look, err)
	}
	stuckRow, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`tr.is-stuck`)))
	if err != nil || !strings.Contains(stuckRow, "deploy/production") {
		t.Fatalf("stuck row: %q, %v", stuckRow, err)
	}
	markup, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`tr[data-key^="<img"] [data-testid=key-link]`)))
	if err != nil || markup != restored[4].key {
		t.Fatalf("markup key shown as %q (%v), want the text %q", markup, err, restored[4].key)
	}
	// Let live.js refresh once so that the status shows it is live.
	if _, err := chromedp.Run(browser, chromedp.Poll[bool](`document.getElementById("live-status").textContent.startsWith("Live ·")`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("live refresh never ran: %v", err)
	}
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveScreenshot(t, "dashboard.png", shot)
	if title, _ := chromedp.Run(browser, chromedp.Title()); strings.Contains(title, "pwned") {
		t.Fatal("a key's markup ran as HTML")
	}

	// At 420 px wide (a phone) a key wraps at a readable width, not one
	// character a line: its link spans at most two lines.
	if err := chromedp.Do(browser, chromedp.EmulateViewport(420, 820)); err != nil {
		t.Fatalf("narrow viewport: %v", err)
	}
	lines, err := chromedp.Run(browser, chromedp.Evaluate[int](
		`document.querySelector('tr[data-key="cache/warmup/eu-west"] [data-testid=key-link]').getClientRects().length`))
	if err != nil || lines < 1 || lines > 2 {
		t.Fatalf("at 420 px the 20-character key spans %d lines (%v), want at most 2", lines, err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "dashboard-420px.png", shot)
	}
	// Every page stays reachable and usable at that width: each link of the
	// navigation and each button asked for lies inside the viewport, and the
	// page does not scroll sideways.
	for _, p := range []struct{ path, buttons string }{
		{"/", "tr[data-key] [data-testid=reset-key], tr[data-key] [data-testid=reset-source]"},
		{"/sessions", "[data-testid=end-session]"},
		{"/keys/" + keypath.Encode(key), "[data-testid=reset-key]"},
	} {
		if err := chromedp.Do(browser,
			chromedp.Navigate(s.web+p.path),
			chromedp.WaitVisible(chromedp.CSS(p.buttons)),
		); err != nil {
			t.Fatalf("at 420 px, open %s: %v", p.path, err)
		}
		off, err := chromedp.Run(browser, chromedp.Evaluate[[]string](narrowCheck(p.buttons)))
		if err != nil {
			t.Fatalf("at 420 px, %s: %v", p.path, err)
		}
		if len(off) > 0 {
			t.Errorf("at 420 px, %s: %s", p.path, strings.Join(off, "; "))
		}
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "sessions-420px.png", shot)
	}
	if err := chromedp.Do(browser,
		chromedp.EmulateViewport(1360, 820),
		chromedp.Navigate(s.web+"/"),
		chromedp.WaitVisible(row),
	); err != nil {
		t.Fatalf("wide viewport, back on the dashboard: %v", err)
	}

	// The key's page lists the waiter; its Reset button starts the reset.
	if err := chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-key=%q] [data-testid=key-link]`, key))),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=queue-row]`)),
	); err != nil {
		t.Fatalf("open the key page: %v", err)
	}
	queue, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`[data-testid=queue]`)))
	if err != nil || !strings.Contains(queue, "billing-retry") {
		t.Fatalf("queue on the key page: %q, %v", queue, err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "key.png", shot)
	}

	// Reset, confirm, and the key is gone.
	if err := chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(`[data-testid=reset-key]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=confirm]`)),
	); err != nil {
		t.Fatalf("open the confirmation: %v", err)
	}
	confirm, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`[data-testid=confirm]`)))
	if err != nil || !strings.Contains(confirm, "1 client waiting for it is turned away") || strings.Contains(confirm, "'-'") {
		t.Fatalf("confirmation text: %q, %v", confirm, err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "confirm.png", shot)
	}
	if err := chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(`[data-testid=confirm-reset]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
		chromedp.WaitNotPresent(row),
	); err != nil {
		t.Fatalf("confirm the reset: %v", err)
	}
	flash, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`[data-testid=flash]`)))
	if err != nil || !strings.Contains(flash, "released 1 key, refused 1 waiter") {
		t.Fatalf("message after the reset: %q, %v", flash, err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "after-reset.png", shot)
	}

	// Reset a source from its row: the stuck key goes too.
	stuckKey := chromedp.CSS(`tr[data-key="deploy/production"]`)
	if err := chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(`tr[data-key="deploy/production"] [data-testid=reset-source]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=confirm]`)),
	); err != nil {
		t.Fatalf("open the source confirmation: %v", err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "confirm-source.png", shot)
	}
	if err := chromedp.Do(browser,
		chromedp.Click(chromedp.CSS(`[data-testid=confirm-reset]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
		chromedp.WaitNotPresent(stuckKey),
	); err != nil {
		t.Fatalf("confirm the source reset: %v", err)
	}
	if flash, err := chromedp.Run(browser, chromedp.Text(chromedp.CSS(`[data-testid=flash]`))); err != nil ||
		!strings.Contains(flash, "Reset source ci-runner-7: released 1 key, refused 0 waiters") {
		t.Fatalf("message after the source reset: %q, %v", flash, err)
	}

	select {
	case err := <-waited:
		if !errors.Is(err, client.ErrReset) {
			t.Fatalf("the waiting client got %v, want client.ErrReset ('-')", err)
		}
	case <-ctx.Done():
		t.Fatal("the waiting client was never answered")
	}
	if _, held := s.table.Key(key); held {
		t.Fatal("the key is still held after the reset")
	}
}

func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("LC_SCREENSHOT_DIR"); d != "" && name == "dashboard.png" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Errorf("save screenshot: %v", err)
			continue
		}
		t.Logf("screenshot: %s", p)
	}
}

// narrowCheck is a script that lists what a narrow screen would hide: a
// navigation link or a button (selected by buttons) that is not displayed
// or lies partly outside the viewport, and a page wider than the viewport.
// It returns an empty list when all is in view.
func narrowCheck(buttons string) string {
	return fmt.Sprintf(`(() => {
	const off = [];
	const w = window.innerWidth;
	if (document.documentElement.scrollWidth > w) {
		off.push("the page is " + document.documentElement.scrollWidth + " px wide, the viewport " + w);
	}
	const inView = (el, what) => {
		const r = el.getBoundingClientRect();
		if (r.width === 0 || r.height === 0 || getComputedStyle(el).visibility === "hidden") {
			off.push(what + " is not displayed");
		} else if (r.left < 0 || r.right > w) {
			off.push(what + " spans x " + Math.round(r.left) + ".." + Math.round(r.right) + " outside 0.." + w);
		}
	};
	const nav = document.querySelectorAll(".topnav a");
	if (nav.length < 4) off.push("the navigation has " + nav.length + " links, want 4");
	nav.forEach(a => inView(a, "navigation link " + JSON.stringify(a.textContent)));
	const bs = document.querySelectorAll(%q);
	if (bs.length === 0) off.push("no button matches " + %[1]q);
	bs.forEach(b => inView(b, "button " + JSON.stringify(b.textContent)));
	return off;
})()`, buttons)
}
