package web

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"go.uber.org/goleak"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a handler over a fresh table with a fixed clock.
type fixture struct {
	t       *testing.T
	table   *locker.Table
	metrics *metrics.Metrics
	h       http.Handler
	now     time.Time
	waiters sync.WaitGroup
	errs    chan error
}

func newFixture(t *testing.T, mod ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), errs: make(chan error, 100)}
	f.metrics = metrics.New(metrics.Options{})
	f.table = locker.New(locker.Options{OnGrant: f.metrics.ObserveWait, OnRelease: f.metrics.ObserveHold})
	o := Options{Logger: slog.New(slog.DiscardHandler), Table: f.table, StuckAfter: 10 * time.Minute, Metrics: f.metrics, now: func() time.Time { return f.now }}
	for _, fn := range mod {
		fn(&o)
	}
	f.h = New(o)
	t.Cleanup(func() {
		// Free every waiter still parked so that no goroutine outlives the test.
		f.table.Each(func(ki locker.KeyInfo) bool {
			_, _ = f.table.ResetByKey(ki.Key)
			return true
		})
		f.waiters.Wait()
	})
	return f
}

// hold makes source hold key since the given age before the fixture's now.
func (f *fixture) hold(key, source string, age time.Duration) {
	f.t.Helper()
	if _, err := f.table.Restore(key, locker.Holder{Source: source, Remote: "10.0.0.1:5000"}, 0, f.now.Add(-age), 0); err != nil {
		f.t.Fatalf("restore %q: %v", key, err)
	}
}

// wait queues a Lock from source behind key's holder and returns once the
// waiter is in the queue. The Lock's outcome arrives on f.errs.
func (f *fixture) wait(key, source string) {
	f.t.Helper()
	before := 0
	if ki, ok := f.table.Key(key); ok {
		before = ki.Waiters
	}
	f.waiters.Go(func() {
		_, err := f.table.Lock(context.Background(), key, locker.Holder{Source: source, Remote: "10.0.0.2:6000"})
		if err == nil {
			_, _ = f.table.Unlock(key)
		}
		f.errs <- err
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ki, ok := f.table.Key(key); ok && ki.Waiters > before {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("waiter for %q never queued", key)
		}
		time.Sleep(time.Millisecond)
	}
}

// outcome returns the next Lock outcome from a waiter.
func (f *fixture) outcome() error {
	f.t.Helper()
	select {
	case err := <-f.errs:
		return err
	case <-time.After(5 * time.Second):
		f.t.Fatal("no waiter finished")
		return errors.New("unreachable")
	}
}

func (f *fixture) do(method, target, body string, hdr ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
	}
	r.Host = "localhost:22120" // httptest's example.com is not a name this server answers for
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			r.Host = hdr[i+1]
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func mustRequest(t *testing.T, method, target string) *http.Request {
	t.Helper()
	return localRequest(method, target)
}

// localRequest is httptest.NewRequest addressed to localhost, a Host the
// server answers for.
func localRequest(method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "localhost:22120"
	return r
}

// parseHTML parses a rendered page for queries on data-testid.
func parseHTML(t *testing.T, body string) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse page: %v", err)
	}
	return doc
}
