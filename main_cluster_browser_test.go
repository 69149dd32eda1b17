package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"
)

// TestClusterPageInBrowser opens the cluster page of a follower of a real
// 3-node cluster (the binary, three processes) in a headless chromium: it
// lists the three nodes, marks the leader, says which node served it and
// who leads, and its hand-over button leads to a confirmation whose form
// posts to /cluster/transfer. A screenshot is saved (cluster.png in
// $LC_SCREENSHOT_DIR when that is set).
func TestClusterPageInBrowser(t *testing.T) {
	chrome := lctest.Chromium(t, "the real-browser test of the cluster page")
	nodes := startCluster(t, 3, nil)
	leader := awaitLeader(t, nodes, 20*time.Second)
	var f *clusterNode
	for _, nd := range nodes {
		if nd != leader {
			f = nd
			break
		}
	}

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

	css := func(sel string, a ...any) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(sel, a...)) }
	if err := chromedp.Do(browser,
		chromedp.Navigate("http://"+f.Web+"/cluster"),
		chromedp.WaitVisible(css(`[data-testid="nodes"]`)),
	); err != nil {
		t.Fatalf("open the cluster page: %v", err)
	}
	text := func(sel string, a ...any) string {
		t.Helper()
		s, err := chromedp.Run(browser, chromedp.Text(css(sel, a...)))
		if err != nil {
			t.Fatalf("%s: %v", fmt.Sprintf(sel, a...), err)
		}
		return s
	}
	rows, err := chromedp.Run(browser, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid="node-row"]').length`))
	if err != nil {
		t.Fatal(err)
	}
	servedBy, leads := text(`[data-testid="served-by"]`), text(`[data-testid="leader"]`)
	leaderRole := text(`tr[data-node=%q] [data-testid="node-role"]`, leader.id)
	if rows != 3 || servedBy != f.id || leads != leader.id || !strings.Contains(strings.ToLower(leaderRole), "leader") {
		t.Fatalf("cluster page: %d rows, served by %q, leader %q, leader's role %q; want 3, %s, %s, leader",
			rows, servedBy, leads, leaderRole, f.id, leader.id)
	}
	// Every node's applied index is shown (the others told theirs; the
	// page refreshes itself until they have, on a loaded machine).
	if _, err := chromedp.Run(browser, chromedp.Poll[bool](
		`Array.from(document.querySelectorAll('[data-testid="node-applied"]')).every(e => /^[0-9]+$/.test(e.textContent))`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		applied, _ := chromedp.Run(browser, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('[data-testid="node-applied"]')).map(e => e.textContent)`))
		t.Fatalf("the nodes' applied indexes are not all shown: %q (%v)", applied, err)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "cluster.png", shot)
	}

	// The hand-over button: a confirmation first, whose form posts the
	// node's id to /cluster/transfer.
	if err := chromedp.Do(browser,
		chromedp.Click(css(`tr[data-node=%q] [data-testid="transfer"]`, f.id)),
		chromedp.WaitVisible(css(`[data-testid="confirm-transfer"]`)),
	); err != nil {
		t.Fatalf("hand-over confirmation: %v", err)
	}
	form, err := chromedp.Run(browser, chromedp.Evaluate[[]string](
		`(() => { const f = document.querySelector('form.confirm-actions'); return [f.getAttribute('action'), f.method, f.elements.id.value]; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if len(form) != 3 || form[0] != "/cluster/transfer" || form[1] != "post" || form[2] != f.id {
		t.Fatalf("hand-over form: %q; want action /cluster/transfer, method post, id %s", form, f.id)
	}

	// The follower's dashboard: a key held through the leader shows once
	// applied, "as of index N", and the queue is said to be the leader's.
	for _, key := range []string{"browser/a", "browser/b"} { // b's entry commits a's on the followers
		b, _ := protocol.Frame{Action: protocol.Lock, Key: key}.Append(nil)
		if got := raw(t, leader.Addr, b); got != '+' {
			t.Fatalf("Lock %s: %q", key, got)
		}
	}
	if err := chromedp.Do(browser,
		chromedp.Navigate("http://"+f.Web+"/"),
		chromedp.WaitVisible(css(`tr[data-key="browser/a"]`)),
	); err != nil {
		t.Fatalf("a follower's dashboard: %v", err)
	}
	bar, next := text(`[data-testid="cluster-bar"]`), text(`tr[data-key="browser/a"] [data-testid="next"]`)
	if !strings.Contains(bar, "as of index") || !strings.Contains(bar, leader.id) || !strings.Contains(next, "queued on the leader") {
		t.Fatalf("a follower's dashboard: bar %q, next in line %q", bar, next)
	}
	if shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100)); err == nil {
		saveScreenshot(t, "cluster-follower-dashboard.png", shot)
	}
}

// saveScreenshot keeps a screenshot in the test's artifact folder, and in
// $LC_SCREENSHOT_DIR when that is set.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("LC_SCREENSHOT_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			t.Errorf("save %s: %v", name, err)
		}
	}
}
