package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
)

// bigTable holds n keys from 50 sources with spread-out grant times.
func bigTable(tb testing.TB, n int) (*locker.Table, http.Handler) {
	tb.Helper()
	table := locker.New(locker.Options{})
	now := time.Now()
	for i := range n {
		key := fmt.Sprintf("tenant-%03d/job/%07d", i%977, i)
		h := locker.Holder{Source: fmt.Sprintf("worker-%02d", i%50), Remote: "10.0.0.1:40000"}
		if _, err := table.Restore(key, h, 0, now.Add(-time.Duration(i%7200)*time.Second), 0); err != nil {
			tb.Fatal(err)
		}
	}
	return table, New(Options{Table: table, Logger: slog.New(slog.DiscardHandler)})
}

// BenchmarkDashboard renders dashboard pages, lists and scrapes over
// 100,000 and 1,000,000 held keys (go test -run - -bench Dashboard ./web/).
// From exactBelow keys on they read a shared catalog, so a request costs
// about the same at both sizes; the catalog's rebuilds (a walk and two
// sorts, in the background at most every ten times what one takes) are
// reported as catalog-build.
func BenchmarkDashboard(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		table, h := bigTable(b, n)
		s := h.(*server)
		b.Cleanup(s.catalogs.builds.Wait)
		b.Run(fmt.Sprintf("keys=%d/catalog-build", n), func(b *testing.B) {
			for b.Loop() {
				buildCatalog(table, time.Now())
			}
		})
		for _, bc := range []struct{ name, target string }{
			{"first-page", "/"},
			{"page-500-by-age", "/?sort=age&page=500"},
			{"page-9999", "/?page=9999"},
			{"stuck-first", "/?sort=age&stuck=1"},
			{"filtered", "/?q=job/00123&source=worker-1"},
			{"live-refresh", "/?q=job"},
			{"api-default", "/api/v1/keys"},
			{"api-page-100", "/api/v1/keys?limit=100&after=tenant-500/job/0000000"},
			{"metrics", "/metrics"},
		} {
			b.Run(fmt.Sprintf("keys=%d/%s", n, bc.name), func(b *testing.B) {
				b.ReportAllocs()
				h.ServeHTTP(httptest.NewRecorder(), localRequest("GET", bc.target)) // not timed: the first catalog
				for b.Loop() {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, localRequest("GET", bc.target))
					if w.Code != 200 {
						b.Fatalf("%s: %d", bc.target, w.Code)
					}
				}
			})
		}
	}
}

// TestAPIPagesThrough100k follows the Link headers of the JSON list over
// 100,000 keys and checks that every key comes exactly once, in order.
func TestAPIPagesThrough100k(t *testing.T) {
	n := 100_000
	if testing.Short() || raceEnabled {
		n = 10_000 // the race detector makes 100,000 keys slow; the paths are the same
	}
	_, h := bigTable(t, n)
	next := regexp.MustCompile(`^<([^>]+)>; rel="next"$`)
	target := "/api/v1/keys?limit=5000"
	seen, last, pages := 0, "", 0
	for target != "" {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, localRequest("GET", target))
		if w.Code != 200 {
			t.Fatalf("%s: %d", target, w.Code)
		}
		for _, k := range decode[[]api.HeldKey](t, w.Body.String()) {
			if k.Key <= last {
				t.Fatalf("key %q after %q: not in order or repeated", k.Key, last)
			}
			last = k.Key
			seen++
		}
		pages++
		target = ""
		if m := next.FindStringSubmatch(w.Header().Get("Link")); m != nil {
			target = m[1]
		}
	}
	if seen != n || pages != (n+4999)/5000 {
		t.Fatalf("paged through %d keys in %d pages, want %d in %d", seen, pages, n, n/5000)
	}
}
