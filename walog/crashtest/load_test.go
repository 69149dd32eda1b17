package crashtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/internal/lctest"
	"github.com/locking-center/locking-center/walog/crashtest/history"
)

// TestCrashRestartUnderLoad's size: loadV1 v1 clients and loadSessions
// session clients on loadKeys keys. -load-cycles (or LC_LOAD_CYCLES) sets
// the number of crashes; make soak runs 1,000.
const (
	loadKeys       = 8
	loadV1         = 10
	loadSessions   = 8
	loadSessionTTL = 30 * time.Second // outlasts every restart: sessions are resumed, not left to expire
	// loadCompactFloor is the failpoint build's compaction floor, low so
	// that every cycle compacts and reaches the compaction points.
	loadCompactFloor = 4096
)

var loadCycles = flag.Int("load-cycles", 0, "crash cycles of TestCrashRestartUnderLoad (default LC_LOAD_CYCLES, else 12)")

// failpoints are the crash points of the failpoint build (walog's
// failpoint_on.go), and the largest pass each is armed at: a lock point is
// passed on every batch, a compaction point once per compaction.
var failpoints = []struct {
	name    string
	maxPass int
}{
	{"append-before-fsync", 40},
	{"fsync-before-answer", 40},
	{"release-before-apply", 40},
	{"compact-temp-written", 2},
	{"compact-temp-synced", 2},
	{"compact-renamed", 2},
	{"compact-folder-synced", 2},
}

// failpointBinary builds the server with -tags failpoints (once).
func failpointBinary(t *testing.T) string { return lctest.Binary(t, "failpoints") }

// errHungUp is a v1 request the client gave up on, as the clients in
// clients/ do: it closed its write side and read on. With answer '+' the
// grant crossed the hang-up and the client holds the key; with 0 the
// server withdrew the waiter (it closed without answering).
var errHungUp = errors.New("hung up")

// v1Ask sends one v1 frame on a new connection and reads the answer. With
// giveUp > 0 it hangs up if no answer came by then (see errHungUp).
func v1Ask(addr string, f protocol.Frame, giveUp time.Duration) (byte, error) {
	b, err := f.Append(nil)
	if err != nil {
		return 0, err
	}
	// 15 s: under heavy connection churn a SYN that meets a TIME_WAIT of
	// the same ports is answered only by its second or third retransmission.
	c, err := net.DialTimeout("tcp", addr, 15*time.Second)
	if err != nil {
		return 0, err
	}
	// Every use below ends once the answer (or the server's close) is
	// read: closing with a reset then leaves no TIME_WAIT behind, which
	// thousands of connections a second would pile up.
	_ = c.(*net.TCPConn).SetLinger(0)
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return 0, err
	}
	wait := time.Minute
	if giveUp > 0 {
		wait = giveUp
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var a [1]byte
	_, err = io.ReadFull(c, a[:])
	if err == nil || giveUp == 0 || !isTimeout(err) {
		return a[0], err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	switch n, err := c.Read(a[:]); {
	case n == 1:
		return a[0], errHungUp
	case errors.Is(err, io.EOF):
		return 0, errHungUp
	default:
		return 0, err // the server died meanwhile: no outcome known
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// outcomeOf maps an answer byte to what the history records.
func outcomeOf(a byte) history.Outcome {
	switch a {
	case protocol.AnswerOK:
		return history.OK
	case protocol.AnswerLocked:
		return history.Busy
	case protocol.AnswerFail:
		return history.Fail
	}
	return history.Unknown
}

// lsess is a session of the load test: sess with requests that may be
// left waiting (a Lock given up on is cancelled, or its connection
// dropped), so it keeps the bytes of an answer read in part.
type lsess struct {
	*sess
	part []byte
}

// send writes one request and returns its id.
func (s *lsess) send(a protocol.Action, key string, token uint64) (uint32, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.next++
	id := s.next
	b, err := protocol.Request{Action: a, ID: id, Token: token, Key: key}.Append(nil)
	if err == nil {
		_, err = s.conn.Write(b)
	}
	return id, err
}

// cancel sends a Cancel of the Lock id.
func (s *lsess) cancel(id uint32) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b, err := protocol.Request{Action: protocol.Cancel, ID: id}.Append(nil)
	if err == nil {
		_, err = s.conn.Write(b)
	}
	return err
}

// await reads answers until the one to id, skipping Pings'. A timeout
// leaves the connection usable (the bytes read so far are kept).
func (s *lsess) await(id uint32, d time.Duration) (protocol.Answer, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	for {
		for len(s.part) >= protocol.AnswerSize {
			a, err := protocol.DecodeAnswer(s.part[:protocol.AnswerSize])
			s.part = s.part[protocol.AnswerSize:]
			if err != nil {
				return a, err
			}
			if a.ID == id {
				return a, nil
			}
			if a.ID&pingID == 0 {
				return a, fmt.Errorf("answer for id %d while waiting for %d", a.ID, id)
			}
		}
		n, err := s.conn.Read(buf[:])
		s.part = append(s.part, buf[:n]...)
		if err != nil && n == 0 {
			return protocol.Answer{}, err
		}
	}
}

// ask sends a request and waits for its answer.
func (s *lsess) ask(a protocol.Action, key string, token uint64) (protocol.Answer, error) {
	id, err := s.send(a, key, token)
	if err != nil {
		return protocol.Answer{}, err
	}
	return s.await(id, time.Minute)
}

// loadRun is the state of TestCrashRestartUnderLoad shared by its
// clients.
type loadRun struct {
	t    *testing.T
	keys []string
	rec  *history.Recorder // the current cycle's history
	addr string            // the current server

	// kept is a key outside keys that the checker takes after a boundary
	// and holds across the crash, releasing it at the next settle ("" for
	// none): the load's own holders are mostly waiting for an answer when
	// the server dies, which leaves their outcome unknown, but this hold
	// is known, so a restart that loses holds is caught in every cycle.
	kept     string
	keptHeld bool // the checker may hold kept: it releases it at the settle
}

// v1Client is one v1 client: it locks (sometimes giving up mid-queue),
// try-locks, unlocks, resets keys and its own source.
type v1Client struct {
	id   int
	name string
	held string // the key it was told '+' for and has not released
}

// mayHaveGivenBack records that the server may have granted key to who
// and taken the grant back on its own between from and to: a grant that
// crossed a client's departure (a v1 hang-up, a session's dropped
// connection) is handed on by the server when its '+' cannot be
// delivered. Others may see the key held meanwhile.
func mayHaveGivenBack(lr *loadRun, client int, key, who string, from, to time.Time) {
	lr.rec.Add(history.Op{Client: client, Kind: history.Unlock, Key: key, Who: who, Session: true,
		Outcome: history.Unknown, Call: from, Return: to})
}

func (w *v1Client) run(ctx context.Context, lr *loadRun, rng *rand.Rand) {
	for ctx.Err() == nil {
		if w.held != "" {
			if !w.release(lr, rng) {
				return
			}
			continue
		}
		k := lr.keys[rng.IntN(len(lr.keys))]
		kind, action := history.Lock, protocol.Lock
		var giveUp time.Duration
		switch r := rng.IntN(20); {
		case r < 11:
			if rng.IntN(4) == 0 {
				giveUp = time.Duration(1+rng.IntN(30)) * time.Millisecond // a hang-up mid-queue
			}
		case r < 18:
			kind, action = history.TryLock, protocol.TryLock
		default:
			kind, action = history.ResetKey, protocol.ResetByKey
		}
		h := lr.rec.Call(history.Op{Client: w.id, Kind: kind, Key: k, Who: w.name})
		a, err := v1Ask(lr.addr, protocol.Frame{Action: action, Key: k, Source: w.name}, giveUp)
		switch {
		case errors.Is(err, errHungUp) && a == 0:
			// Closed without an answer: the server withdrew the waiter, or
			// granted it and took the grant back before closing — or died
			// (the kernel closes its sockets too), leaving the grant held.
			lr.rec.Return(h, history.Unknown, 0)
			mayHaveGivenBack(lr, w.id, k, w.name, lr.rec.CallTime(h), time.Now())
			continue
		case errors.Is(err, errHungUp):
			// The grant crossed the hang-up: the client holds the key.
		case err != nil:
			return // the server died: left open, settled at the next restart
		}
		lr.rec.Return(h, outcomeOf(a), 0)
		if a == protocol.AnswerOK && action != protocol.ResetByKey {
			w.held = k
			if d := rng.IntN(300); d > 0 {
				time.Sleep(time.Duration(d) * time.Microsecond) // the critical section
			}
		}
	}
}

// release gives its key back by Unlock or, now and then, by a reset of
// its own source; false when the server died meanwhile.
func (w *v1Client) release(lr *loadRun, rng *rand.Rand) bool {
	op := history.Op{Client: w.id, Kind: history.Unlock, Key: w.held, Who: w.name}
	f := protocol.Frame{Action: protocol.Unlock, Key: w.held, Source: w.name}
	if rng.IntN(8) == 0 {
		op.Kind, op.Key = history.ResetSource, history.AllKeys
		f = protocol.Frame{Action: protocol.ResetBySource, Source: w.name}
	}
	h := lr.rec.Call(op)
	a, err := v1Ask(lr.addr, f, 0)
	if err != nil {
		return false
	}
	lr.rec.Return(h, outcomeOf(a), 0)
	w.held = ""
	return true
}

// sClient is one session client: Lock (sometimes cancelled, sometimes
// dropped while it waits), TryLock, Unlock by token, drops and resumes,
// Close and a new session.
type sClient struct {
	id    int
	name  string
	s     *lsess
	sid   uint64
	held  string
	token uint64
}

// open opens a new session; false when the server is gone.
func (w *sClient) open(lr *loadRun) bool {
	s, err := openSession(lr.addr, w.name, loadSessionTTL, 0)
	if err != nil {
		return false
	}
	w.s, w.sid = &lsess{sess: s}, s.id
	return true
}

// resume takes the session back on a new connection. A refused resume is
// recorded: the session held nothing (history checks that), and a new
// one is opened. false when the server is gone.
func (w *sClient) resume(lr *loadRun) bool {
	if w.s != nil {
		w.s.close()
		w.s = nil
	}
	if w.sid == 0 {
		return w.open(lr)
	}
	call := time.Now()
	s, err := openSession(lr.addr, w.name, loadSessionTTL, w.sid)
	switch {
	case errors.Is(err, errOpenRefused):
		lr.rec.Settle(time.Now(), func(c int) bool { return c == w.id })
		lr.rec.Add(history.Op{Client: w.id, Kind: history.Absent, Key: history.AllKeys, Who: w.name,
			Outcome: history.OK, Call: call, Return: time.Now()})
		w.held, w.token = "", 0
		return w.open(lr)
	case err != nil:
		return false
	}
	// A Lock pending on the dropped connection was withdrawn, or granted
	// before the drop: either way it is settled now.
	lr.rec.Settle(time.Now(), func(c int) bool { return c == w.id })
	w.s = &lsess{sess: s}
	return true
}

// unlockAny releases whatever grant the session may hold on k (token 0),
// after a Lock whose outcome it did not learn.
func (w *sClient) unlockAny(lr *loadRun, k string) bool {
	h := lr.rec.Call(history.Op{Client: w.id, Kind: history.Unlock, Key: k, Who: w.name, Session: true})
	a, err := w.s.ask(protocol.Unlock, k, 0)
	if err != nil {
		return false
	}
	lr.rec.Return(h, outcomeOf(a.Status), 0)
	return true
}

func (w *sClient) run(ctx context.Context, lr *loadRun, rng *rand.Rand) {
	if w.s == nil && !w.resume(lr) { // a settle a crash cut short left it without one
		return
	}
	for ctx.Err() == nil {
		if w.held != "" {
			if !w.release(lr, rng) {
				return
			}
			continue
		}
		k := lr.keys[rng.IntN(len(lr.keys))]
		switch r := rng.IntN(20); {
		case r < 12:
			if !w.lock(lr, rng, k) {
				return
			}
		case r < 19:
			h := lr.rec.Call(history.Op{Client: w.id, Kind: history.TryLock, Key: k, Who: w.name, Session: true})
			a, err := w.s.ask(protocol.TryLock, k, 0)
			if err != nil {
				return
			}
			lr.rec.Return(h, outcomeOf(a.Status), a.Token)
			if a.Status == protocol.AnswerOK {
				w.held, w.token = k, a.Token
				w.checkToken(lr, a)
			}
		default:
			if !w.resume(lr) { // a drop with nothing pending
				return
			}
		}
	}
}

func (w *sClient) checkToken(lr *loadRun, a protocol.Answer) {
	if a.Token == 0 {
		lr.t.Errorf("%s: '+' without a token", w.name)
	}
}

// lock waits for k a short while; then cancels, or drops the connection
// and resumes (the Lock's outcome is then unknown: it releases k by
// token 0 to settle it).
func (w *sClient) lock(lr *loadRun, rng *rand.Rand, k string) bool {
	h := lr.rec.Call(history.Op{Client: w.id, Kind: history.Lock, Key: k, Who: w.name, Session: true})
	id, err := w.s.send(protocol.Lock, k, 0)
	if err != nil {
		return false
	}
	a, err := w.s.await(id, time.Duration(2+rng.IntN(40))*time.Millisecond)
	if err != nil && isTimeout(err) {
		if rng.IntN(2) == 0 {
			// Dropped mid-queue: the Lock is withdrawn, or was granted and
			// stays held, or was granted and handed on by the server when
			// its '+' could not be written; settled by the resume.
			dropped := time.Now()
			if !w.resume(lr) {
				return false
			}
			mayHaveGivenBack(lr, w.id, k, w.name, dropped, time.Now())
			return w.unlockAny(lr, k)
		}
		if err := w.s.cancel(id); err != nil {
			return false
		}
		a, err = w.s.await(id, time.Minute)
	}
	if err != nil {
		return false
	}
	lr.rec.Return(h, outcomeOf(a.Status), a.Token)
	if a.Status == protocol.AnswerOK {
		w.held, w.token = k, a.Token
		w.checkToken(lr, a)
		if d := rng.IntN(300); d > 0 {
			time.Sleep(time.Duration(d) * time.Microsecond)
		}
	}
	return true
}

// release ends its hold: by Unlock under its token, by a drop and resume
// (the hold stays, released next time), or by Close and a new session.
func (w *sClient) release(lr *loadRun, rng *rand.Rand) bool {
	switch rng.IntN(10) {
	case 0:
		return w.resume(lr)
	case 1:
		h := lr.rec.Call(history.Op{Client: w.id, Kind: history.EndSession, Key: history.AllKeys, Who: w.name})
		a, err := w.s.ask(protocol.Close, "", 0)
		if err != nil {
			return false
		}
		lr.rec.Return(h, outcomeOf(a.Status), 0)
		w.s.close()
		w.s, w.held, w.token = nil, "", 0
		return w.open(lr)
	}
	h := lr.rec.Call(history.Op{Client: w.id, Kind: history.Unlock, Key: w.held, Who: w.name, Session: true, Token: w.token})
	a, err := w.s.ask(protocol.Unlock, w.held, w.token)
	if err != nil {
		return false
	}
	lr.rec.Return(h, outcomeOf(a.Status), 0)
	if a.Status == protocol.AnswerOK && a.Token != w.token {
		lr.t.Errorf("%s: unlock under token %d answered token %d", w.name, w.token, a.Token)
	}
	w.held, w.token = "", 0
	return true
}

// loadTally is what a run exercised.
type loadTally struct {
	cycles, randomKills int
	hits                map[string]int // failpoint kills, by name
	ops, grants, tokens int
	unknown             int
	atStart             int // crash points reached while the server started
}

// newLoadRun makes a load run on keys prefix/0… against addr (set later
// if empty), with its v1 clients and session clients.
func newLoadRun(t *testing.T, prefix, addr string) (*loadRun, []*v1Client, []*sClient) {
	lr := &loadRun{t: t, rec: history.NewRecorder(), addr: addr}
	for i := range loadKeys {
		lr.keys = append(lr.keys, fmt.Sprintf("%s/%d", prefix, i))
	}
	var v1s []*v1Client
	for i := range loadV1 {
		v1s = append(v1s, &v1Client{id: i, name: fmt.Sprintf("v%d", i)})
	}
	var ss []*sClient
	for i := range loadSessions {
		ss = append(ss, &sClient{id: loadV1 + i, name: fmt.Sprintf("s%d", i)})
	}
	return lr, v1s, ss
}

// TestCrashRestartUnderLoad runs 18 clients on 8 keys against the real
// binary with DATA_PATH, v1 and sessions mixed (Lock, TryLock, Unlock,
// hang-ups mid-queue, resets by key and by source, Cancel, session drops
// and resumes, Close), and kills the server with SIGKILL: most cycles at a
// named crash point of the failpoint build (the least hit so far, armed at
// a random pass), the others at a random moment. After each restart every
// client settles what it did not learn; each cycle's history (crash and
// restart included) is checked by porcupine against one mutex per key,
// outcomes not learnt counting as applied or not, and the fencing tokens
// of every cycle are above those of the cycles before. A ninth key, held
// by the checker from each boundary to the settle after the next kill,
// must be held again after every restart.
func TestCrashRestartUnderLoad(t *testing.T) {
	n, seed := cyclesAndSeed(t, "LC_LOAD_CYCLES", *loadCycles)
	rng := rand.New(rand.NewPCG(seed, 1))
	fp := failpointBinary(t)

	dataPath := filepath.Join(t.TempDir(), "locks.wal")
	lr, v1s, ss := newLoadRun(t, "load", "")
	lr.kept = "load/kept"
	settler := loadV1 + loadSessions // the client number of the checks after a restart
	defer func() {
		for _, w := range ss {
			if w.s != nil {
				w.s.close()
			}
		}
	}()

	tally := loadTally{hits: make(map[string]int)}
	var highBefore uint64 // the highest token of the cycles before
	srv := startWith(t, fp, dataPath, "LC_COMPACT_FLOOR="+strconv.Itoa(loadCompactFloor))
	segment := []*server{srv} // the servers since the last boundary, the current one last
	for _, w := range ss {
		lr.addr = srv.addr
		if !w.open(lr) {
			t.Fatalf("%s: could not open a session", w.name)
		}
	}
	// check checks the history since the last boundary: a settle that
	// completed, after which every key is free and no call is open.
	check := func(cycle int) {
		rep, err := lr.rec.Check(time.Minute)
		tally.ops += rep.Ops
		tally.grants += rep.Grants
		tally.tokens += rep.Tokens
		tally.unknown += rep.Unknown
		if err != nil {
			var outs strings.Builder
			for i, s := range segment {
				fmt.Fprintf(&outs, "--- server %d of %d since the last boundary:\n%s", i+1, len(segment), s.out)
			}
			t.Errorf("cycle %d: %v\n%s", cycle, err, outs.String())
		}
		// Tokens only grow: every token since the boundary is above every
		// token before it, whatever the key.
		low, high := tokenRange(lr.rec.Ops())
		if low != 0 && low <= highBefore {
			t.Errorf("cycle %d: token %d is not above %d, the highest before", cycle, low, highBefore)
		}
		highBefore = max(highBefore, high)
		lr.rec = history.NewRecorder()
		segment = segment[len(segment)-1:]
	}
	for cycle := range n {
		lr.addr = srv.addr
		// The server of this cycle was started armed at a crash point
		// (or not) by the cycle before. First every client settles what
		// the last crash left unknown; a crash point may stop that too.
		if settleAfterRestart(t, lr, srv, v1s, ss, settler, cycle) {
			check(cycle)
			takeKept(lr, settler)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, w := range v1s {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(cycle)))
			wg.Go(func() { w.run(ctx, lr, wrng) })
		}
		for _, w := range ss {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(cycle)))
			wg.Go(func() { w.run(ctx, lr, wrng) })
		}
		wait := time.Duration(20+rng.IntN(280)) * time.Millisecond
		if srv.armed != "" {
			wait = 3 * time.Second // reached well before, unless the load missed it
		}
		select {
		case <-srv.exited:
		case <-time.After(wait):
			srv.kill()
		}
		dead := time.Now()
		if srv.armed != "" && strings.Contains(srv.out.String(), "failpoint "+srv.armed+" reached") {
			tally.hits[srv.armed]++
		} else {
			tally.randomKills++
		}
		cancel()
		wg.Wait()
		for _, w := range ss {
			if w.s != nil {
				w.s.close() // its connection died with the server
				w.s = nil
			}
		}
		// Nothing still open can take effect after the process died.
		lr.rec.Settle(dead, nil)
		tally.cycles++
		if t.Failed() {
			break
		}

		// The next server: armed at the least hit crash point at a
		// random pass, or (one cycle in eight, and the last) left for a
		// random SIGKILL.
		env := []string{"LC_COMPACT_FLOOR=" + strconv.Itoa(loadCompactFloor)}
		if cycle%8 != 7 && cycle < n-1 {
			fpi := leastHit(tally.hits)
			env = append(env, fmt.Sprintf("LC_FAILPOINT=%s:%d", failpoints[fpi].name, 1+rng.IntN(failpoints[fpi].maxPass)))
		}
		srv = startArmed(t, fp, dataPath, env, &tally)
		segment = append(segment, srv)
	}
	lr.addr = srv.addr
	if !t.Failed() && settleAfterRestart(t, lr, srv, v1s, ss, settler, n) {
		check(n)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	<-srv.exited
	if srv.err != nil {
		t.Errorf("server exit on SIGTERM: %v\n%s", srv.err, srv.out)
	}
	var hits []string
	for _, f := range failpoints {
		hits = append(hits, fmt.Sprintf("%s %d", f.name, tally.hits[f.name]))
	}
	t.Logf("%d cycles: %d crash-point kills (%s; %d of them during a start), %d random SIGKILLs; %d operations checked by porcupine, %d grants (%d with their token), %d outcomes unknown; 0 violations unless reported above",
		tally.cycles, tally.cycles-tally.randomKills+tally.atStart, strings.Join(hits, ", "), tally.atStart, tally.randomKills, tally.ops, tally.grants, tally.tokens, tally.unknown)
	if tally.grants < tally.cycles {
		t.Errorf("only %d grants in %d cycles: the test exercised little", tally.grants, tally.cycles)
	}
	if min := os.Getenv("LC_FAILPOINT_MIN_HITS"); min != "" {
		want, _ := strconv.Atoi(min)
		for _, f := range failpoints {
			if tally.hits[f.name] < want {
				t.Errorf("crash point %s hit %d times, want at least %d", f.name, tally.hits[f.name], want)
			}
		}
	}
}

// settleAfterRestart brings every client back to a known state after a
// restart, recording each step: a v1 holder unlocks its key (which must
// have survived), each session resumes (its holds must have survived) and
// releases what it holds, and a checker try-locks every key, then resets
// it, so that every key is free and no call open: a boundary of the
// history. It returns false if the server died meanwhile (an armed crash
// point), which is not an error.
func settleAfterRestart(t *testing.T, lr *loadRun, srv *server, v1s []*v1Client, ss []*sClient, settler, cycle int) bool {
	t.Helper()
	gone := func(what string, err error) bool {
		select {
		case <-srv.exited:
			return false // a crash point stopped the server: the cycle's crash came early
		case <-time.After(100 * time.Millisecond):
		}
		t.Errorf("cycle %d: %s after the restart: %v\n%s", cycle, what, err, srv.out)
		return false
	}
	if lr.keptHeld {
		if _, err := checkerAsk(lr, settler, history.Unlock, protocol.Frame{Action: protocol.Unlock, Key: lr.kept, Source: "checker"}); err != nil {
			return gone("checker unlock of the kept key", err)
		}
		lr.keptHeld = false
	}
	for _, w := range v1s {
		if w.held == "" {
			continue
		}
		if !w.release(lr, rand.New(rand.NewPCG(uint64(cycle), uint64(w.id)))) {
			return gone(w.name+" unlock", errors.New("no answer"))
		}
	}
	for _, w := range ss {
		if !w.resume(lr) {
			return gone(w.name+" resume", errors.New("no answer"))
		}
		if w.held != "" {
			h := lr.rec.Call(history.Op{Client: w.id, Kind: history.Unlock, Key: w.held, Who: w.name, Session: true, Token: w.token})
			a, err := w.s.ask(protocol.Unlock, w.held, w.token)
			if err != nil {
				return gone(w.name+" unlock", err)
			}
			lr.rec.Return(h, outcomeOf(a.Status), 0)
			w.held, w.token = "", 0
		}
	}
	for _, k := range lr.keys {
		if _, err := checkerAsk(lr, settler, history.TryLock, protocol.Frame{Action: protocol.TryLock, Key: k, Source: "checker"}); err != nil {
			return gone("checker trylock", err)
		}
		if _, err := checkerAsk(lr, settler, history.ResetKey, protocol.Frame{Action: protocol.ResetByKey, Key: k}); err != nil {
			return gone("checker reset", err)
		}
	}
	return true
}

// checkerAsk sends f for the checker (client settler) and records it in
// the history as a kind on f's key. A request the server died on is left
// open: it is settled once the server is found dead.
func checkerAsk(lr *loadRun, settler int, kind history.Kind, f protocol.Frame) (byte, error) {
	h := lr.rec.Call(history.Op{Client: settler, Kind: kind, Key: f.Key, Who: "checker"})
	a, err := v1Ask(lr.addr, f, 0)
	if err == nil {
		lr.rec.Return(h, outcomeOf(a), 0)
	}
	return a, err
}

// takeKept has the checker try-lock the kept key after a boundary and hold
// it through the cycle. A crash point may stop the server during the
// TryLock: its outcome is then unknown, and the settle releases the key
// all the same (a v1 Unlock of a free key answers '-', which the history
// allows when the TryLock may not have been applied).
func takeKept(lr *loadRun, settler int) {
	a, err := checkerAsk(lr, settler, history.TryLock, protocol.Frame{Action: protocol.TryLock, Key: lr.kept, Source: "checker"})
	// Its outcome unknown, the checker may hold the key. A '#' would be a
	// violation (the key is free after a boundary): the history check of
	// the cycle reports it, with the rest of the cycle.
	lr.keptHeld = err != nil || a == protocol.AnswerOK
}

// startArmed starts the failpoint build with env. A crash point reached
// during the start (a start rewrites the log, and compacts) counts as
// that point's hit and this cycle's crash: the server is started again,
// unarmed.
func startArmed(t *testing.T, fp, dataPath string, env []string, tally *loadTally) *server {
	t.Helper()
	armed := armedOf(env)
	srv, err := tryStart(fp, dataPath, env...)
	if errors.Is(err, errExitedAtStart) && armed != "" && strings.Contains(srv.out.String(), "failpoint "+armed+" reached") {
		tally.hits[armed]++
		tally.atStart++
		return startWith(t, fp, dataPath, env[:1]...) // LC_COMPACT_FLOOR only
	}
	if err != nil {
		t.Fatal(err)
	}
	srv.armed = armed
	return srv
}

// leastHit returns the index of the crash point hit least so far.
func leastHit(hits map[string]int) int {
	best := 0
	for i, f := range failpoints {
		if hits[f.name] < hits[failpoints[best].name] {
			best = i
		}
	}
	return best
}

// armedOf returns the crash point an environment arms ("" for none).
func armedOf(env []string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "LC_FAILPOINT="); ok {
			name, _, _ := strings.Cut(v, ":")
			return name
		}
	}
	return ""
}

// tokenRange returns the lowest and highest known grant token of ops (0,
// 0 for none).
func tokenRange(ops []history.Op) (low, high uint64) {
	var ts []uint64
	for _, op := range ops {
		if op.Token != 0 && op.Outcome == history.OK && (op.Kind == history.Lock || op.Kind == history.TryLock) {
			ts = append(ts, op.Token)
		}
	}
	if len(ts) == 0 {
		return 0, 0
	}
	return slices.Min(ts), slices.Max(ts)
}
