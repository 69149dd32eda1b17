package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
)

// Sessions against the real server binary.

func newSession(t *testing.T, addr string, opts ...client.Option) *client.Session {
	t.Helper()
	s, err := client.NewSession(context.Background(), addr, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func sessionHex(s *client.Session) string { return fmt.Sprintf("%016x", s.ID()) }

// heldBy fails unless key is held by session s under token.
func heldBy(t *testing.T, srv *realServer, key string, s *client.Session, token uint64) {
	t.Helper()
	k := srv.key(key)
	switch {
	case k == nil:
		t.Fatalf("%s is not held, want it held by session %s", key, sessionHex(s))
	case k.Session == nil || *k.Session != sessionHex(s) || k.Token != token:
		t.Fatalf("%s is held by session %v token %d, want %s token %d", key, k.Session, k.Token, sessionHex(s), token)
	}
}

// TestSessionFIFO: two sessions wait for a key held by a third; they are
// served in the order they asked, each with a larger token.
func TestSessionFIFO(t *testing.T) {
	srv := startReal(t)
	ctx := context.Background()
	h, a, b := newSession(t, srv.addr), newSession(t, srv.addr), newSession(t, srv.addr)
	t0, err := h.Lock(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		who   string
		token uint64
	}
	order := make(chan grant, 2)
	var wg sync.WaitGroup
	for i, w := range []struct {
		name string
		s    *client.Session
	}{{"a", a}, {"b", b}} {
		wg.Go(func() {
			tok, err := w.s.Lock(ctx, "q")
			if err != nil {
				t.Error(err)
				return
			}
			order <- grant{w.name, tok}
			if err := w.s.Unlock(ctx, "q", tok); err != nil {
				t.Error(err)
			}
		})
		eventually(t, 10*time.Second, "the waiter to queue", func() bool { return srv.waiters("q") == i+1 })
	}
	if err := h.Unlock(ctx, "q", t0); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	g1, g2 := <-order, <-order
	if g1.who != "a" || g2.who != "b" {
		t.Fatalf("served %s then %s, want a then b", g1.who, g2.who)
	}
	if !(t0 < g1.token && g1.token < g2.token) {
		t.Fatalf("tokens %d, %d, %d do not increase", t0, g1.token, g2.token)
	}
}

// TestSessionCancelWithdraws: a Lock whose ctx ends leaves the queue (as
// the JSON API shows), and the key does not go to it afterwards.
func TestSessionCancelWithdraws(t *testing.T) {
	srv := startReal(t)
	ctx := context.Background()
	h, w := newSession(t, srv.addr), newSession(t, srv.addr)
	tok, err := h.Lock(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := w.Lock(wctx, "w"); errc <- err }()
	eventually(t, 10*time.Second, "the waiter to queue", func() bool { return srv.waiters("w") == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock = %v", err)
	}
	eventually(t, 10*time.Second, "the queue to empty", func() bool { return srv.waiters("w") == 0 })
	if err := h.Unlock(ctx, "w", tok); err != nil {
		t.Fatal(err)
	}
	if k := srv.key("w"); k != nil {
		t.Fatalf("after the holder's Unlock the key is held (%+v): it went to the withdrawn waiter", k)
	}
}

// TestSessionStaleUnlock: a grant reset and taken by another session; the
// first holder's Unlock by its token answers '-' and releases nothing.
func TestSessionStaleUnlock(t *testing.T) {
	srv := startReal(t)
	ctx := context.Background()
	a, b := newSession(t, srv.addr), newSession(t, srv.addr)
	ta, err := a.Lock(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.New(srv.addr).ResetByKey(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	tb, err := b.Lock(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx, "s", ta); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("stale Unlock = %v, want ErrNotHeld", err)
	}
	if err := a.Unlock(ctx, "s", 0); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("Unlock token 0 by a session that holds nothing = %v, want ErrNotHeld", err)
	}
	heldBy(t, srv, "s", b, tb)
	if _, err := a.TryLock(ctx, "s"); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of b's key = %v, want ErrLocked", err)
	}
}

// TestSessionTokensIncrease: tokens grow strictly over grants of many
// keys, by sessions and v1 alike.
func TestSessionTokensIncrease(t *testing.T) {
	srv := startReal(t)
	ctx := context.Background()
	s := newSession(t, srv.addr)
	var last uint64
	for i := range 300 {
		key := fmt.Sprintf("t/%d", i%7)
		tok, err := s.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if tok <= last {
			t.Fatalf("grant %d: token %d after %d", i, tok, last)
		}
		last = tok
		if err := s.Unlock(ctx, key, tok); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 { // a v1 grant in between takes a token too
			if err := client.New(srv.addr).Lock(ctx, key); err != nil {
				t.Fatal(err)
			}
			k := srv.key(key)
			if k == nil || k.Token <= last {
				t.Fatalf("v1 grant: %+v, want a token above %d", k, last)
			}
			last = k.Token
			if err := client.New(srv.addr).Unlock(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSessionResumeAfterDrop: the connection is cut under a session
// holding a key; the session resumes and still holds it, same token.
func TestSessionResumeAfterDrop(t *testing.T) {
	srv := startReal(t)
	p := newProxy(t, srv.addr)
	ctx := context.Background()
	s := newSession(t, p.addr(), client.WithTTL(3*time.Second))
	tok, err := s.Lock(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	p.cut()
	// The Ping after a third of the TTL notices at the latest; a request
	// notices at once.
	if _, err := s.TryLock(ctx, "other"); err != nil && !errors.Is(err, client.ErrDisconnected) {
		t.Fatalf("TryLock across the cut = %v", err)
	}
	eventually(t, 5*time.Second, "the session to resume", func() bool {
		_, err := s.TryLock(ctx, "probe")
		return err == nil
	})
	heldBy(t, srv, "r", s, tok)
	if err := s.Unlock(ctx, "r", tok); err != nil {
		t.Fatalf("Unlock after the resume: %v", err)
	}
	if s.Err() != nil {
		t.Fatalf("resumed session reports %v", s.Err())
	}
}

// TestSessionResumeAfterRestart: the server is restarted with DATA_PATH;
// the session resumes and keeps its hold, same token.
func TestSessionResumeAfterRestart(t *testing.T) {
	srv := startReal(t, "DATA_PATH="+filepath.Join(t.TempDir(), "locks.wal"))
	ctx := context.Background()
	s := newSession(t, srv.addr, client.WithTTL(5*time.Second))
	tok, err := s.Lock(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	srv.restart()
	eventually(t, 5*time.Second, "the session to resume", func() bool {
		_, err := s.TryLock(ctx, "probe")
		return err == nil
	})
	heldBy(t, srv, "d", s, tok)
	if err := s.Unlock(ctx, "d", tok); err != nil {
		t.Fatalf("Unlock after the restart: %v", err)
	}
	if next, err := s.Lock(ctx, "d"); err != nil || next <= tok {
		t.Fatalf("Lock after the restart: token %d (%v), want above %d", next, err, tok)
	}
}

// TestSessionExpires: the server is kept out of reach; the session's hold
// is released by the server at expiry, a waiter gets it, and Done fires.
func TestSessionExpires(t *testing.T) {
	srv := startReal(t)
	p := newProxy(t, srv.addr)
	ctx := context.Background()
	s := newSession(t, p.addr(), client.WithTTL(time.Second))
	if _, err := s.Lock(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	waiter := newSession(t, srv.addr)
	got := make(chan time.Time, 1)
	go func() {
		if _, err := waiter.Lock(ctx, "e"); err != nil {
			t.Error(err)
		}
		got <- time.Now()
	}()
	eventually(t, 10*time.Second, "the waiter to queue", func() bool { return srv.waiters("e") == 1 })
	p.setDown(true)
	p.cut()
	cut := time.Now()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5s after the server went out of reach (TTL 1s)")
	}
	if d := time.Since(cut); d > 1500*time.Millisecond {
		t.Errorf("Done after %v, want within the 1s TTL", d)
	}
	if !errors.Is(s.Err(), client.ErrSessionLost) {
		t.Fatalf("Err = %v, want ErrSessionLost", s.Err())
	}
	select {
	case at := <-got:
		if d := at.Sub(cut); d > 2*time.Second {
			t.Errorf("waiter granted %v after the cut, want within TTL + 1s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the expired session's key did not pass to the waiter")
	}
}

// TestSessionKilledHolder: a process holding 100 keys through a session
// is killed with SIGKILL; every key passes to its next waiter within
// TTL + 1s, in FIFO order, with a larger token.
func TestSessionKilledHolder(t *testing.T) {
	srv := startReal(t)
	const n = 100
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$")
	helper.Env = append(os.Environ(), "LC_HELPER_ADDRESS="+srv.addr, fmt.Sprintf("LC_HELPER_KEYS=%d", n))
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	helperTokens := make(map[string]uint64)
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		var key string
		var tok uint64
		if _, err := fmt.Sscan(sc.Text(), &key, &tok); err == nil {
			helperTokens[key] = tok
		}
	}
	if len(helperTokens) != n {
		t.Fatalf("the helper reported %d holds, want %d", len(helperTokens), n)
	}

	ctx := context.Background()
	first, second := newSession(t, srv.addr), newSession(t, srv.addr)
	type grant struct {
		key   string
		token uint64
		at    time.Time
	}
	firstGot, secondGot := make(chan grant, n), make(chan grant, n)
	var wg sync.WaitGroup
	for w, s := range []*client.Session{first, second} {
		got := []chan grant{firstGot, secondGot}[w]
		for i := range n {
			key := fmt.Sprintf("k/%d", i)
			wg.Go(func() {
				tok, err := s.Lock(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				got <- grant{key, tok, time.Now()}
			})
		}
		eventually(t, 20*time.Second, fmt.Sprintf("%d waiters on every key", w+1), func() bool {
			for i := range n {
				if srv.waiters(fmt.Sprintf("k/%d", i)) != w+1 {
					return false
				}
			}
			return true
		})
	}
	killed := time.Now()
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case g := <-firstGot:
			if d := g.at.Sub(killed); d > 2*time.Second {
				t.Errorf("%s granted %v after the kill, want within TTL (1s) + 1s", g.key, d)
			}
			if g.token <= helperTokens[g.key] {
				t.Errorf("%s: token %d not above the killed holder's %d", g.key, g.token, helperTokens[g.key])
			}
			heldBy(t, srv, g.key, first, g.token)
		case g := <-secondGot:
			t.Fatalf("%s went to the second waiter before the first", g.key)
		case <-time.After(5 * time.Second):
			t.Fatal("keys of the killed holder not granted 5s after the kill")
		}
	}
	// The second waiters get each key once the first gives it back.
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for range n {
		select {
		case <-secondGot:
		case <-time.After(5 * time.Second):
			t.Fatal("the second waiters were not served after the first closed its session")
		}
	}
	wg.Wait()
}

// TestHelperHolder is the process TestSessionKilledHolder kills: it holds
// LC_HELPER_KEYS keys through a session with a 1s TTL, prints each key and
// token, then "ready", and waits to be killed.
func TestHelperHolder(t *testing.T) {
	addr := os.Getenv("LC_HELPER_ADDRESS")
	if addr == "" {
		t.Skip("run by TestSessionKilledHolder only")
	}
	var n int
	fmt.Sscan(os.Getenv("LC_HELPER_KEYS"), &n)
	s, err := client.NewSession(context.Background(), addr, client.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range n {
		key := fmt.Sprintf("k/%d", i)
		tok, err := s.Lock(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d\n", key, tok)
	}
	fmt.Print(b.String() + "ready\n")
	<-s.Done() // until SIGKILL
	t.Fatalf("the helper's session ended: %v", s.Err())
}

// TestSessionSharedByGoroutines: many goroutines on one session, each
// locking keys that others want, all see mutual exclusion.
func TestSessionSharedByGoroutines(t *testing.T) {
	srv := startReal(t)
	s := newSession(t, srv.addr)
	ctx := context.Background()
	var mu sync.Mutex // guards inside
	inside := map[string]bool{}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 30 {
				key := fmt.Sprintf("m/%d", (g+i)%4)
				err := s.Do(ctx, key, func(ctx context.Context, token uint64) error {
					mu.Lock()
					if inside[key] {
						t.Errorf("two goroutines inside %s", key)
					}
					inside[key] = true
					mu.Unlock()
					time.Sleep(100 * time.Microsecond)
					mu.Lock()
					inside[key] = false
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSessionReissueFindsLostGrant: the answer to a Lock (then to a
// TryLock) is lost with its connection after the server granted it. The
// session resumes and reissues the request with its id; the server
// answers the grant it made, so the caller gets that grant's token — it
// neither waits behind its own hold nor leaves it held by nobody. The
// second time the server is restarted (DATA_PATH) between the loss and
// the resume: the grant's request is in the log.
func TestSessionReissueFindsLostGrant(t *testing.T) {
	srv := startReal(t, "DATA_PATH="+filepath.Join(t.TempDir(), "locks.wal"))
	p := newProxy(t, srv.addr)
	ctx := context.Background()
	for _, tc := range []struct {
		key     string
		try     bool
		restart bool
	}{{"lost-lock", false, false}, {"lost-trylock", true, false}, {"lost-over-restart", false, true}} {
		p.loseFirstAnswer()
		s := newSession(t, p.addr(), client.WithTTL(5*time.Second))
		got := make(chan struct {
			token uint64
			err   error
		}, 1)
		go func() {
			var r struct {
				token uint64
				err   error
			}
			if tc.try {
				r.token, r.err = s.TryLock(ctx, tc.key)
			} else {
				r.token, r.err = s.Lock(ctx, tc.key)
			}
			got <- r
		}()
		// The server granted it; its answer is being lost.
		eventually(t, 5*time.Second, "the grant of "+tc.key, func() bool { return srv.key(tc.key) != nil })
		eventually(t, 5*time.Second, "the cut", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.down
		})
		want := srv.key(tc.key).Token
		if tc.restart {
			srv.restart()
		}
		p.setDown(false)
		r := <-got
		if r.err != nil || r.token != want {
			t.Fatalf("%s: after the lost answer = %d, %v; want the grant's token %d\n%s", tc.key, r.token, r.err, want, srv.logText())
		}
		heldBy(t, srv, tc.key, s, want)
		if n := srv.waiters(tc.key); n != 0 {
			t.Fatalf("%s: %d waiters: the reissue waited behind its own grant", tc.key, n)
		}
		if err := s.Unlock(ctx, tc.key, want); err != nil {
			t.Fatalf("%s: Unlock of the found grant: %v", tc.key, err)
		}
	}
}
