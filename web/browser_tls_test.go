package web

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

// TestDashboardOverHTTPSInBrowser: with a TLSConfig the dashboard is
// served over https to a real headless chromium, renders, and refreshes
// itself live (its script's requests go over TLS too).
//
// chromium is told to trust the test's certificate alone, by the SHA-256
// of its public key (--ignore-certificate-errors-spki-list): no CA is
// installed in a system store and every other certificate would still be
// refused.
func TestDashboardOverHTTPSInBrowser(t *testing.T) {
	chrome := needChromium(t, "the https real-browser test")
	ca := tlstest.NewCA(t, "browser test CA")
	leaf := ca.Issue(t, tlstest.Options{})

	table := locker.New(locker.Options{})
	if _, err := table.TryLock("deploy/production", locker.Holder{Source: "ci-runner-7", Remote: "10.0.4.17:53124"}); err != nil {
		t.Fatal(err)
	}
	o := Options{Table: table, Metrics: metrics.New(metrics.Options{}), Logger: slog.New(slog.DiscardHandler),
		StuckAfter: 10 * time.Minute, Version: "v1.0.0", Connections: func() int { return 0 },
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{leaf.TLS}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(New(o))
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(o.Listener(ln)) }) // returns ErrServerClosed at Shutdown
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		wg.Wait()
	})
	url := "https://localhost:" + strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:") + "/"

	spki := sha256.Sum256(leaf.Cert.RawSubjectPublicKeyInfo)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	alloc, stopAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("ignore-certificate-errors-spki-list", base64.StdEncoding.EncodeToString(spki[:])),
		// localhost, the certificate's name, to the IPv4 listener (not ::1).
		chromedp.Flag("host-resolver-rules", "MAP localhost 127.0.0.1"),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1360, 820),
	)
	defer stopAlloc()
	browser, stopBrowser := chromedp.NewContext(alloc)
	defer stopBrowser()

	if err := chromedp.Do(browser,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key="deploy/production"]`)),
	); err != nil {
		t.Fatalf("open the dashboard over https: %v", err)
	}
	proto, err := chromedp.Run(browser, chromedp.Evaluate[string](`location.protocol`))
	if err != nil || proto != "https:" {
		t.Fatalf("page protocol %q (%v), want https:", proto, err)
	}
	if _, err := chromedp.Run(browser, chromedp.Poll[bool](`document.getElementById("live-status").textContent.startsWith("Live ·")`,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("live refresh over https never ran: %v", err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "dashboard-https.png", shot)
	}
}
