package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/wire"
)

// startWire serves a fresh in-memory table with wire.Server on a free
// loopback port until the test ends.
func startWire(t *testing.T) (*wire.Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &wire.Server{Table: locker.New(locker.Options{}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }() // ends at Shutdown below
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, wire.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, l.Addr().String()
}

// raceWaiter is one waiter of a race round: a v1 connection or a Lock on
// a session.
type raceWaiter struct {
	pos    int // its place in the queue
	conn   net.Conn
	s      *lsess
	id     uint32 // the session Lock's request id
	depart string // "", "close" (v1), "drop" or "cancel" (session)
}

// TestWaiterDisconnectRaces: 10,000 waiters leave a queue (a v1 client
// closes its socket; a session drops its connection or cancels) at random
// moments around the release that would grant them, with v1 and session
// waiters mixed on each key. The waiters that stay are granted in their
// queue order; a departed v1 waiter's grant is handed on, a dropped
// session keeps a grant that crossed its drop (and releases it after its
// resume); and at the end nothing is left: no key held, no waiter, no
// session, no connection. LC_RACES sets the number of departures.
func TestWaiterDisconnectRaces(t *testing.T) {
	target := int64(10000)
	if v := os.Getenv("LC_RACES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			t.Fatalf("LC_RACES=%q: want a whole number of at least 1", v)
		}
		target = n
	}
	srv, addr := startWire(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var departed, rounds, granted, crossed atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			key := fmt.Sprintf("race/%d", w)
			pool := make(map[int]*lsess) // a session per queue place, reused between rounds
			defer func() {
				for _, s := range pool {
					if a, err := s.ask(protocol.Close, "", 0); err != nil || a.Status != protocol.AnswerOK {
						t.Errorf("close: %+v, %v", a, err)
					}
					s.close()
				}
			}()
			for departed.Load() < target && !t.Failed() {
				d, g, c := raceRound(t, srv, addr, key, rng, pool)
				departed.Add(int64(d))
				granted.Add(int64(g))
				crossed.Add(int64(c))
				rounds.Add(1)
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Connections() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the server closes a connection a moment after its client
	}
	st := srv.Table.Stats()
	if st.Held != 0 || st.Waiting != 0 || st.Sessions != 0 || srv.Connections() != 0 {
		t.Errorf("left behind: %d held keys, %d waiters, %d sessions, %d connections", st.Held, st.Waiting, st.Sessions, srv.Connections())
	}
	t.Logf("%d rounds: %d departures raced against the release, %d grants to waiters that stayed, all in queue order; %d grants crossed a departure (given back by a v1 client that hung up, or kept by a dropped session and released after its resume)",
		rounds.Load(), departed.Load(), granted.Load(), crossed.Load())
}

// raceRound queues six waiters behind a v1 holder of key, lets some leave
// while the holder unlocks, and checks the rest are served in order. It
// returns the departures, the grants in order and the grants that crossed
// a drop.
func raceRound(t *testing.T, srv *wire.Server, addr, key string, rng *rand.Rand, pool map[int]*lsess) (departures, inOrder, crossedDrops int) {
	if a, err := v1Ask(addr, protocol.Frame{Action: protocol.TryLock, Key: key, Source: "holder"}, 0); err != nil || a != protocol.AnswerOK {
		t.Errorf("%s: holder's TryLock: %q, %v", key, a, err)
		return
	}
	const n = 6
	ws := make([]*raceWaiter, n)
	for i := range ws {
		w := &raceWaiter{pos: i}
		if rng.IntN(2) == 0 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := protocol.Frame{Action: protocol.Lock, Key: key, Source: fmt.Sprintf("v%d", i)}.Append(nil)
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			w.conn = c
			if rng.IntN(5) < 2 {
				w.depart = "close"
			}
		} else {
			if pool[i] == nil {
				s, err := openSession(addr, fmt.Sprintf("s%d", i), loadSessionTTL, 0)
				if err != nil {
					t.Fatal(err)
				}
				pool[i] = &lsess{sess: s}
			}
			w.s = pool[i]
			id, err := w.s.send(protocol.Lock, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			w.id = id
			switch rng.IntN(5) {
			case 0:
				w.depart = "drop"
			case 1:
				w.depart = "cancel"
			}
		}
		ws[i] = w
		// The queue order is the order of arrival: wait for this one to
		// be queued before the next comes.
		for deadline := time.Now().Add(10 * time.Second); ; {
			if ki, ok := srv.Table.Key(key); ok && ki.Waiters == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: waiter %d not queued", key, i)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}

	var mu sync.Mutex // guards order
	var order []int   // queue places of the waiters granted, in grant order
	var wg sync.WaitGroup
	jitter := func() { time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond) }
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(rng.IntN(300)) * time.Microsecond
	}
	for i, w := range ws {
		if w.depart != "" {
			departures++
		}
		wg.Go(func() {
			if w.depart != "" {
				time.Sleep(delays[i])
			}
			granted := func() { // at the grant, before its unlock lets the next one in
				mu.Lock()
				order = append(order, w.pos)
				mu.Unlock()
			}
			kept := serveWaiter(t, addr, key, w, granted)
			mu.Lock()
			defer mu.Unlock()
			if kept {
				crossedDrops++
			}
		})
	}
	jitter()
	if a, err := v1Ask(addr, protocol.Frame{Action: protocol.Unlock, Key: key, Source: "holder"}, 0); err != nil || a != protocol.AnswerOK {
		t.Errorf("%s: holder's Unlock: %q, %v", key, a, err)
	}
	wg.Wait()
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Errorf("%s: waiters granted in the order %v, not their queue order", key, order)
			break
		}
	}
	if ki, ok := srv.Table.Key(key); ok {
		t.Errorf("%s: still held after the round, by %+v", key, ki)
		if _, err := srv.Table.ResetByKey(key); err != nil {
			t.Fatal(err)
		}
	}
	return departures, len(order), crossedDrops
}

// serveWaiter plays one waiter to its end: a waiter that stays takes its
// grant (calling granted) and unlocks; one that leaves does so. A v1
// waiter that hangs up as clients do (closing its write side, then
// reading) gives back a grant that crossed its hang-up; a dropped session
// resumes and releases a grant that crossed its drop (kept).
func serveWaiter(t *testing.T, addr, key string, w *raceWaiter, granted func()) (kept bool) {
	if w.conn != nil { // v1
		defer w.conn.Close()
		if w.depart == "close" {
			// Half-close, then read: the server withdraws the waiter (EOF
			// here), or its '+' crossed the hang-up and is given back.
			if err := w.conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Errorf("%s: close write: %v", key, err)
			}
			_ = w.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var b [1]byte
			if n, _ := w.conn.Read(b[:]); n == 1 && b[0] == protocol.AnswerOK {
				if a, err := v1Ask(addr, protocol.Frame{Action: protocol.Unlock, Key: key, Source: "w"}, 0); err != nil || a != protocol.AnswerOK {
					t.Errorf("%s: giving back a grant that crossed a hang-up: %q, %v", key, a, err)
				}
				return true
			}
			return false
		}
		_ = w.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		var b [1]byte
		if _, err := io.ReadFull(w.conn, b[:]); err != nil || b[0] != protocol.AnswerOK {
			t.Errorf("%s: v1 waiter %d: %q, %v", key, w.pos, b[0], err)
			return false
		}
		granted()
		if a, err := v1Ask(addr, protocol.Frame{Action: protocol.Unlock, Key: key, Source: "w"}, 0); err != nil || a != protocol.AnswerOK {
			t.Errorf("%s: v1 waiter %d unlock: %q, %v", key, w.pos, a, err)
		}
		return false
	}
	s := w.s
	switch w.depart {
	case "drop":
		sid := s.id
		s.close()
		ns, err := openSession(addr, "", loadSessionTTL, sid) // a resume ignores the source
		if err != nil {
			t.Errorf("%s: resume after a drop: %v", key, err)
			return false
		}
		s.sess, s.part = ns, nil
		a, err := s.ask(protocol.Unlock, key, 0)
		if err != nil {
			t.Errorf("%s: unlock after resume: %v", key, err)
			return false
		}
		return a.Status == protocol.AnswerOK
	case "cancel":
		if err := s.cancel(w.id); err != nil {
			t.Errorf("%s: cancel: %v", key, err)
			return false
		}
	}
	a, err := s.await(w.id, 30*time.Second)
	if err != nil {
		t.Errorf("%s: session waiter %d: %v", key, w.pos, err)
		return false
	}
	if a.Status != protocol.AnswerOK {
		if w.depart != "cancel" {
			t.Errorf("%s: session waiter %d answered %q", key, w.pos, a.Status)
		}
		return false // withdrawn by its Cancel
	}
	granted()
	if u, err := s.ask(protocol.Unlock, key, a.Token); err != nil || u.Status != protocol.AnswerOK || u.Token != a.Token {
		t.Errorf("%s: session waiter %d unlock: %+v, %v", key, w.pos, u, err)
	}
	return false
}
