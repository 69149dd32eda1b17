package faulttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/walog/crashtest/history"
)

// The load of every run: v1 and session clients on a handful of keys,
// each through a node picked at random for every connection.
const (
	loadKeys     = 4
	loadV1       = 4
	loadSessions = 4
	loadTTL      = 10 * time.Second // outlasts every fault: sessions are resumed, never left to expire
	dialTimeout  = 500 * time.Millisecond
	// answerTimeout bounds the wait for an answer that needs no queue: a
	// node that is paused or cut off is given up on after it.
	answerTimeout = 3 * time.Second
	// lockWait is how long a Lock waits in the queue before it is
	// cancelled (a session) or given up on (v1: an unknown outcome).
	lockWait = 2 * time.Second
)

// window is a time during which node was in a minority (cut off from the
// majority): a request sent to it then must not be told '+'.
type window struct {
	node     int
	from, to time.Time
}

// run is one fault's run: its keys, its history and what the clients
// found that the history does not show.
type run struct {
	c    *cluster
	keys []string
	rec  *history.Recorder

	mu       sync.Mutex     // guards every field below
	nodeOf   map[int]int    // history handle → the node the request was sent to
	minority []window       // open windows have a zero to
	problems []string       // violations found by the clients themselves
	lost     map[string]int // violation counts by kind, for the table
}

func newRun(c *cluster, prefix string) *run {
	r := &run{c: c, rec: history.NewRecorder(), nodeOf: map[int]int{}, lost: map[string]int{}}
	for i := range loadKeys {
		r.keys = append(r.keys, fmt.Sprintf("%s/k%d", prefix, i))
	}
	return r
}

// problem records a violation of kind with its description.
func (r *run) problem(kind, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost[kind]++
	r.problems = append(r.problems, kind+": "+fmt.Sprintf(format, args...))
}

// call records that op is being sent to node ni.
func (r *run) call(op history.Op, ni int) int {
	h := r.rec.Call(op)
	r.mu.Lock()
	r.nodeOf[h] = ni
	r.mu.Unlock()
	return h
}

// startMinority opens a window for node ni, from now.
func (r *run) startMinority(ni int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.minority = append(r.minority, window{node: ni, from: time.Now()})
}

// endMinorities closes every open window, now.
func (r *run) endMinorities() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.minority {
		if r.minority[i].to.IsZero() {
			r.minority[i].to = time.Now()
		}
	}
}

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

// v1Ask sends one v1 frame to node ni on a new connection and reads the
// answer within wait. The call is recorded only once the connection is
// made (a refused dial sent nothing); a request sent whose answer did
// not come is left open (h ≥ 0, err != nil): its outcome is not known.
func (r *run) v1Ask(ni int, op history.Op, f protocol.Frame, wait time.Duration) (a byte, h int, err error) {
	b, err := f.Append(nil)
	if err != nil {
		return 0, -1, err
	}
	conn, err := net.DialTimeout("tcp", r.c.nodes[ni].client(), dialTimeout)
	if err != nil {
		return 0, -1, err
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	defer conn.Close()
	h = r.call(op, ni)
	if _, err := conn.Write(b); err != nil {
		return 0, h, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	var ans [1]byte
	if _, err := io.ReadFull(conn, ans[:]); err != nil {
		if op.Kind != history.Lock || !isTimeout(err) {
			return 0, h, err
		}
		// A Lock waited too long: hang up as the clients do (close the
		// write side, read on). The server withdraws the waiter and
		// closes, or the grant crossed the hang-up and its '+' comes.
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			return 0, h, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(answerTimeout))
		n, err := conn.Read(ans[:])
		switch {
		case n == 1:
		case errors.Is(err, io.EOF):
			// Withdrawn — or granted and given back when the '+' could
			// not be written: either way not held now.
			r.rec.Return(h, history.Unknown, 0)
			r.mayHaveGivenBack(op.Client, op.Key, op.Who, false, r.rec.CallTime(h), time.Now())
			return 0, h, nil
		default:
			return 0, h, err
		}
	}
	o := outcomeOf(ans[0])
	if op.Kind == history.Unlock && o == history.Fail {
		// Not held, or the release could not be recorded (SPEC §8.5):
		// nothing changed, which "applied or not" covers.
		o = history.Unknown
	}
	r.rec.Return(h, o, 0)
	return ans[0], h, nil
}

// mayHaveGivenBack records that the server may have granted key to who
// and taken it back on its own between from and to: a grant that crossed
// a client's departure is handed on when its '+' cannot be delivered.
func (r *run) mayHaveGivenBack(client int, key, who string, session bool, from, to time.Time) {
	r.rec.Add(history.Op{Client: client, Kind: history.Unlock, Key: key, Who: who, Session: session,
		Outcome: history.Unknown, Call: from, Return: to})
}

// v1Client locks or try-locks a random key through a random node, holds
// it a moment and unlocks it. An outcome not known is settled by a
// ResetBySource of its own source, sent until it is answered.
func (r *run) v1Client(ctx context.Context, id int, rng *rand.Rand) {
	name := fmt.Sprintf("v%d", id)
	n := len(r.c.nodes)
	for ctx.Err() == nil {
		key := r.keys[rng.IntN(len(r.keys))]
		kind, action, wait := history.Lock, protocol.Lock, lockWait
		if rng.IntN(5) < 2 {
			kind, action, wait = history.TryLock, protocol.TryLock, answerTimeout
		}
		a, h, err := r.v1Ask(rng.IntN(n), history.Op{Client: id, Kind: kind, Key: key, Who: name},
			protocol.Frame{Action: action, Key: key, Source: name}, wait)
		switch {
		case h < 0:
			sleepCtx(ctx, 20*time.Millisecond) // that node is down: another next
			continue
		case err != nil:
			if kind == history.Lock {
				r.mayHaveGivenBack(id, key, name, false, r.rec.CallTime(h), time.Now())
			}
			r.v1Settle(id, name, key, rng)
			continue
		case a != protocol.AnswerOK:
			continue
		}
		sleepCtx(ctx, time.Duration(1+rng.IntN(5))*time.Millisecond) // the critical section
		for {
			a, h, err := r.v1Ask(rng.IntN(n), history.Op{Client: id, Kind: history.Unlock, Key: key, Who: name},
				protocol.Frame{Action: protocol.Unlock, Key: key, Source: name}, answerTimeout)
			if h < 0 {
				sleepCtx(context.Background(), 20*time.Millisecond)
				continue
			}
			if err != nil || a != protocol.AnswerOK {
				// Not known, or '-' (not held, or not recorded): the reset
				// of its own source settles it. A hold that was lost shows
				// in the history as another client's grant meanwhile.
				r.v1Settle(id, name, key, rng)
			}
			break
		}
	}
}

// v1Settle resets the client's source until a node answers '+'; every
// call of the client still open is then settled as of that answer. The
// client can hold nothing but key (it holds one key at most, and settles
// before it asks for another), so each reset is recorded on key alone: on
// every other key it changes nothing whatever its outcome, and attempts
// left unknown on every key would make the history needlessly hard for
// porcupine.
func (r *run) v1Settle(id int, name, key string, rng *rand.Rand) {
	deadline := time.Now().Add(time.Minute)
	op := history.Op{Client: id, Kind: history.ResetSource, Key: key, Who: name}
	f := protocol.Frame{Action: protocol.ResetBySource, Source: name}
	// The first attempt is recorded as it is made. Once one is left
	// unknown, the later attempts are recorded only if answered '+': an
	// unknown one's window would lie inside the first's, which already
	// covers whatever it may have done.
	a, h, err := r.v1Ask(rng.IntN(len(r.c.nodes)), op, f, answerTimeout)
	unknown := h >= 0 && err != nil
	for !(h >= 0 && err == nil && a == protocol.AnswerOK) {
		if time.Now().After(deadline) {
			r.problem("stuck", "%s: no node answered its ResetBySource for a minute", name)
			return
		}
		sleepCtx(context.Background(), 50*time.Millisecond)
		if !unknown {
			a, h, err = r.v1Ask(rng.IntN(len(r.c.nodes)), op, f, answerTimeout)
			unknown = h >= 0 && err != nil
			continue
		}
		sent := time.Now()
		a, err = v1Quiet(r.c.nodes[rng.IntN(len(r.c.nodes))].client(), f, answerTimeout)
		if err == nil && a == protocol.AnswerOK {
			o := op
			o.Outcome, o.Call, o.Return = history.OK, sent, time.Now()
			r.rec.Add(o)
			h = 0
		}
	}
	r.rec.Settle(time.Now(), func(c int) bool { return c == id })
}

// v1Quiet sends f to addr and reads its answer, recording nothing.
func v1Quiet(addr string, f protocol.Frame, wait time.Duration) (byte, error) {
	b, err := f.Append(nil)
	if err != nil {
		return 0, err
	}
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return 0, err
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	defer conn.Close()
	if _, err := conn.Write(b); err != nil {
		return 0, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	var ans [1]byte
	_, err = io.ReadFull(conn, ans[:])
	return ans[0], err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// rawSession is a session spoken frame by frame, one request at a time,
// so that the history says exactly what was sent and answered.
type rawSession struct {
	conn  net.Conn
	node  int
	id    uint64
	ttl   time.Duration
	next  uint32
	part  []byte
	sent  time.Time // when the open or the last request was sent
	close func()
}

var errRefused = errors.New("open refused")

// openRaw opens (resume 0) or resumes a session on node ni. A '-' answer
// is errRefused; no answer is another error.
func openRaw(addr string, ni int, source string, ttl time.Duration, resume uint64) (*rawSession, error) {
	conn, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	b, _ := protocol.Open{Version: protocol.SessionVersion, TTLMillis: uint32(ttl / time.Millisecond), Resume: resume, Source: source}.Append(nil)
	sent := time.Now()
	if _, err := conn.Write(b); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(answerTimeout))
	var ans [protocol.OpenAnswerSize]byte
	if _, err := io.ReadFull(conn, ans[:]); err != nil {
		conn.Close()
		return nil, err
	}
	oa, _ := protocol.DecodeOpenAnswer(ans[:])
	if oa.Status != protocol.AnswerOK {
		conn.Close()
		return nil, errRefused
	}
	s := &rawSession{conn: conn, node: ni, id: oa.Session, ttl: time.Duration(oa.TTLMillis) * time.Millisecond, sent: sent}
	s.close = func() { conn.Close() }
	return s, nil
}

// send writes one request and returns its id.
func (s *rawSession) send(a protocol.Action, key string, token uint64) (uint32, error) {
	s.next++
	b, err := protocol.Request{Action: a, ID: s.next, Token: token, Key: key}.Append(nil)
	if err != nil {
		return 0, err
	}
	s.sent = time.Now()
	_, err = s.conn.Write(b)
	return s.next, err
}

// cancel sends a Cancel of the Lock id.
func (s *rawSession) cancel(id uint32) error {
	b, _ := protocol.Request{Action: protocol.Cancel, ID: id}.Append(nil)
	s.sent = time.Now()
	_, err := s.conn.Write(b)
	return err
}

// await reads answers until the one to id, within d.
func (s *rawSession) await(id uint32, d time.Duration) (protocol.Answer, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(d))
	var buf [64]byte
	for {
		for len(s.part) >= protocol.AnswerSize {
			a, _ := protocol.DecodeAnswer(s.part[:protocol.AnswerSize])
			s.part = s.part[protocol.AnswerSize:]
			if a.ID == id {
				return a, nil
			}
		}
		n, err := s.conn.Read(buf[:])
		s.part = append(s.part, buf[:n]...)
		if err != nil && n == 0 {
			return protocol.Answer{}, err
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// sessionClient is one session of the load, with its history client
// number; gen counts the sessions it had to open anew (a lost one).
type sessionClient struct {
	id        int
	name      string
	gen       int
	s         *rawSession
	sid       uint64
	confirmed time.Time // send time of the last answered frame: the session lives until confirmed + TTL
	unsure    string    // the key of a request whose outcome is not known
	held      string
	token     uint64
	refusedBy []string // the nodes that answered '-' in a row to the Unlock of held
}

func (w *sessionClient) who() string { return fmt.Sprintf("%s.%d", w.name, w.gen) }

// sessionLoad runs one session client until ctx ends, then releases what
// it holds.
func (r *run) sessionLoad(ctx context.Context, id int, rng *rand.Rand) {
	w := &sessionClient{id: id, name: fmt.Sprintf("s%d", id)}
	defer func() {
		if w.s != nil {
			w.s.close()
		}
	}()
	for {
		if w.s == nil && !r.connect(ctx, w, rng) {
			return
		}
		if w.held != "" {
			r.sessionRequest(w, history.Unlock, protocol.Unlock, w.held, w.token, answerTimeout)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		key := r.keys[rng.IntN(len(r.keys))]
		if rng.IntN(5) < 3 {
			r.sessionRequest(w, history.Lock, protocol.Lock, key, 0, lockWait)
		} else {
			r.sessionRequest(w, history.TryLock, protocol.TryLock, key, 0, answerTimeout)
		}
		if w.held != "" {
			sleepCtx(ctx, time.Duration(1+rng.IntN(5))*time.Millisecond)
		}
	}
}

// sessionRequest sends one request and records it. A Lock not granted
// within wait is cancelled. A connection that breaks, or a node that does
// not answer, leaves the outcome unknown: the session resumes elsewhere.
func (r *run) sessionRequest(w *sessionClient, kind history.Kind, a protocol.Action, key string, token uint64, wait time.Duration) {
	h := r.call(history.Op{Client: w.id, Kind: kind, Key: key, Who: w.who(), Session: true, Token: token}, w.s.node)
	reqID, err := w.s.send(a, key, token)
	sent := w.s.sent
	var ans protocol.Answer
	if err == nil {
		ans, err = w.s.await(reqID, wait)
		if err != nil && isTimeout(err) && a == protocol.Lock {
			if err = w.s.cancel(reqID); err == nil {
				ans, err = w.s.await(reqID, answerTimeout)
			}
		}
	}
	if err != nil {
		w.s.close()
		w.s = nil
		if kind == history.Lock || kind == history.TryLock {
			w.unsure = key
			r.mayHaveGivenBack(w.id, key, w.who(), true, sent, time.Now())
		} else if kind == history.Unlock {
			w.unsure, w.held, w.token = key, "", 0
		}
		return
	}
	w.confirmed = sent
	if kind == history.Unlock && ans.Status == protocol.AnswerFail {
		// '-' to an Unlock: not held, or the release could not be
		// recorded (a deposed leader's ErrNotLeader, SPEC §8.5): nothing
		// changed either way, which "applied or not" covers. The client
		// asks again through another node (the one that answered may be
		// deposed, and closes its connections) until an answer is '+' or
		// the same '-' comes from the leader three times.
		r.rec.ReturnAt(h, history.Unknown, 0, time.Now())
		through := w.s.node
		w.s.close()
		w.s = nil
		if token == 0 {
			return // a settle: '-' is "not held"
		}
		w.refusedBy = append(w.refusedBy, fmt.Sprintf("n%d at %s", through+1, time.Now().Format(time.StampMicro)))
		if len(w.refusedBy) < 3 {
			return // held and token kept: asked again after the resume
		}
		r.problem("lost", "%s: Unlock of %s under its token %d answered '-' three times (through %s)", w.who(), key, token, strings.Join(w.refusedBy, ", "))
		w.held, w.token, w.refusedBy = "", 0, nil
		return
	}
	w.refusedBy = nil
	r.rec.Return(h, outcomeOf(ans.Status), ans.Token)
	switch kind {
	case history.Lock, history.TryLock:
		if ans.Status == protocol.AnswerOK {
			if ans.Token == 0 {
				r.problem("token", "%s: '+' to %s of %s without a token", w.who(), kind, key)
			}
			w.held, w.token = key, ans.Token
		}
	case history.Unlock:
		if token != 0 && ans.Status == protocol.AnswerOK && ans.Token != token {
			r.problem("token", "%s: Unlock of %s under token %d answered token %d", w.who(), key, token, ans.Token)
		}
		w.held, w.token = "", 0
	}
}

// connect opens the client's session, or resumes it through any node,
// until it is taken back or its TTL has passed (then it counts as lost
// and a new one is opened). After a resume, what was not known is
// settled: every open call as of the resume, and an Unlock by token 0 of
// the key it concerned. It returns false once ctx has ended with nothing
// left to settle.
func (r *run) connect(ctx context.Context, w *sessionClient, rng *rand.Rand) bool {
	n := len(r.c.nodes)
	backoff := 20 * time.Millisecond
	for {
		if w.sid == 0 && ctx.Err() != nil {
			return false
		}
		if w.sid != 0 && time.Now().After(w.confirmed.Add(loadTTL)) {
			r.problem("session", "%s: could not resume within its TTL (last answered frame sent at %s)", w.who(), w.confirmed.Format(time.StampMilli))
			r.sessionGone(w)
			continue
		}
		ni := rng.IntN(n)
		s, err := openRaw(r.c.nodes[ni].client(), ni, w.name, loadTTL, w.sid)
		switch {
		case errors.Is(err, errRefused) && w.sid != 0:
			r.problem("session", "%s: resume refused through n%d, %v after its last answered frame", w.who(), ni+1, time.Since(w.confirmed).Round(time.Millisecond))
			r.sessionGone(w)
			continue
		case err != nil:
			sleepCtx(context.Background(), backoff)
			backoff = min(2*backoff, 200*time.Millisecond)
			continue
		}
		w.s, w.confirmed = s, s.sent
		if w.sid == 0 {
			w.sid = s.id
			return true
		}
		// Resumed: what was pending on the lost connection is gone.
		r.rec.Settle(time.Now(), func(c int) bool { return c == w.id })
		if w.unsure != "" {
			key := w.unsure
			w.unsure = ""
			r.sessionRequest(w, history.Unlock, protocol.Unlock, key, 0, answerTimeout)
			if w.s == nil {
				continue // broken again: resume again
			}
		}
		if ctx.Err() != nil && w.held == "" {
			return false
		}
		return true
	}
}

// sessionGone records the end of a lost session (its holds end at its
// expiry, some time since its last frame) and starts a new one.
func (r *run) sessionGone(w *sessionClient) {
	r.rec.Settle(time.Now(), func(c int) bool { return c == w.id })
	r.rec.Add(history.Op{Client: w.id, Kind: history.EndSession, Key: history.AllKeys, Who: w.who(),
		Outcome: history.OK, Call: w.confirmed, Return: time.Now()})
	w.gen++
	w.sid, w.unsure, w.held, w.token = 0, "", "", 0
}

// startLoad starts the clients; the returned stop ends them and waits
// until each has settled what it did.
func (r *run) startLoad(seed uint64) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range loadV1 {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		wg.Go(func() { r.v1Client(ctx, i, rng) })
	}
	for i := range loadSessions {
		rng := rand.New(rand.NewPCG(seed, uint64(100+i)))
		wg.Go(func() { r.sessionLoad(ctx, loadV1+i, rng) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
