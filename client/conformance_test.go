package client_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
)

// The conformance tests run against a real server when clients/run-tests
// gives its address (LC_TEST_ADDRESS, LC_TEST_WEB_ADDRESS), like the other
// eight clients' suites; otherwise they skip.

func conformance(t *testing.T) (addr, web, prefix string) {
	t.Helper()
	addr, web = os.Getenv("LC_TEST_ADDRESS"), os.Getenv("LC_TEST_WEB_ADDRESS")
	if addr == "" || web == "" {
		t.Skip("LC_TEST_ADDRESS and LC_TEST_WEB_ADDRESS unset: no real server to test against")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return addr, web, "go-" + hex.EncodeToString(b) + "/"
}

// api keeps no idle connections, so no goroutine outlives a test.
var api = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// queueOf reads a key's queue from the JSON API; -1 when the key is not held.
func queueOf(t *testing.T, web, key string) int {
	t.Helper()
	resp, err := api.Get("http://" + web + "/api/v1/keys/" + url.PathEscape(key))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return -1
	}
	var k struct {
		Queue []struct{ Source string } `json:"queue"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&k); err != nil {
		t.Fatal(err)
	}
	return len(k.Queue)
}

func awaitQueue(t *testing.T, web, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queueOf(t, web, key) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q never reached %d", key, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConformanceLockTryLockUnlock(t *testing.T) {
	addr, _, p := conformance(t)
	ctx := context.Background()
	c := client.New(addr, client.WithSource("go-conformance"))
	if err := c.Lock(ctx, p+"k"); err != nil {
		t.Fatal(err)
	}
	if err := c.TryLock(ctx, p+"k"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock on a held key = %v, want ErrLocked", err)
	}
	if err := c.Unlock(ctx, p+"k"); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(ctx, p+"k"); !errors.Is(err, client.ErrRefused) {
		t.Fatalf("Unlock of a free key = %v, want ErrRefused", err)
	}
}

func TestConformanceFIFO(t *testing.T) {
	addr, web, p := conformance(t)
	ctx := context.Background()
	holder := client.New(addr)
	if err := holder.Lock(ctx, p+"q"); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	for i, name := range []string{"first", "second"} {
		go func() {
			c := client.New(addr, client.WithSource(name))
			if err := c.Lock(ctx, p+"q"); err != nil {
				t.Error(err)
				return
			}
			order <- name
			_ = c.Unlock(ctx, p+"q")
		}()
		awaitQueue(t, web, p+"q", i+1)
	}
	if err := holder.Unlock(ctx, p+"q"); err != nil {
		t.Fatal(err)
	}
	if a, b := <-order, <-order; a != "first" || b != "second" {
		t.Fatalf("served %s then %s", a, b)
	}
}

func TestConformanceCancelWithdraws(t *testing.T) {
	addr, web, p := conformance(t)
	ctx := context.Background()
	c := client.New(addr)
	if err := c.Lock(ctx, p+"w"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := c.Lock(wctx, p+"w"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline = %v", err)
	}
	awaitQueue(t, web, p+"w", 0)
	if err := c.Unlock(ctx, p+"w"); err != nil {
		t.Fatal(err)
	}
	if got := queueOf(t, web, p+"w"); got != -1 {
		t.Fatalf("the key went to the withdrawn waiter (queue %d)", got)
	}
}

func TestConformanceResetWhileWaiting(t *testing.T) {
	addr, web, p := conformance(t)
	ctx := context.Background()
	c := client.New(addr)
	if err := c.Lock(ctx, p+"r"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Lock(ctx, p+"r") }()
	awaitQueue(t, web, p+"r", 1)
	if err := c.ResetByKey(ctx, p+"r"); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, client.ErrReset) {
		t.Fatalf("Lock reset while waiting = %v, want ErrReset", err)
	}
}

func TestConformanceLongKeyRefusedBeforeConnecting(t *testing.T) {
	conformance(t)
	c := client.New("127.0.0.1:1") // nothing listens: only validation can answer
	err := c.Lock(context.Background(), strings.Repeat("k", 128))
	if !errors.Is(err, client.ErrRefused) || errors.Is(err, client.ErrUnreachable) {
		t.Fatalf("Lock with a 128-byte key = %v, want ErrRefused before connecting", err)
	}
}
