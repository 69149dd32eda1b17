package locker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of sessions.
var (
	// ErrUnknownSession is returned when a session id names no open
	// session: never opened, ended, or expired.
	ErrUnknownSession = errors.New("unknown or expired session")
	// ErrTooManySessions is returned by OpenSession at Options.MaxSessions.
	ErrTooManySessions = errors.New("too many sessions")
	// ErrTooManyFromPeer is returned by OpenSession when the sessions
	// opened from the open's address reach Options.MaxSessionsPerPeer.
	ErrTooManyFromPeer = errors.New("too many sessions from this address")
)

// SessionID names a session: 64 random bits, never 0 (0 means "no session").
type SessionID uint64

// String returns the id as 16 lower-case hex digits.
func (id SessionID) String() string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[id&0xf]
		id >>= 4
	}
	return string(b[:])
}

// ParseSessionID parses the 16 hex digits of SessionID.String.
func ParseSessionID(s string) (SessionID, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("session id %q: want 16 hex digits", s)
	}
	n, err := strconv.ParseUint(s, 16, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("session id %q: want 16 hex digits, not all zero", s)
	}
	return SessionID(n), nil
}

// sessionTable is the table's set of sessions.
type sessionTable struct {
	mu sync.Mutex // guards m and byPeer; taken alone, never with an entry's or a session's mutex
	m  map[SessionID]*session
	// byPeer counts the sessions in m by the address they were opened
	// from, so that one address cannot fill the table.
	byPeer  map[string]int
	max     int
	perPeer int // 0: no bound of its own
	expired atomic.Uint64
}

func (st *sessionTable) init(maxSessions, perPeer int) {
	if maxSessions <= 0 {
		maxSessions = 10000
	}
	st.max = maxSessions
	st.perPeer = max(perPeer, 0)
	st.m = make(map[SessionID]*session)
	st.byPeer = make(map[string]int)
}

// add puts s in the table. st.mu must be held.
func (st *sessionTable) add(s *session) {
	st.m[s.id] = s
	st.byPeer[s.peer]++
}

// peerOf is the address part of a remote "host:port": sessions are
// counted by the address they were opened from, whatever their port.
func peerOf(remote string) string {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap().String()
	}
	if i := strings.LastIndexByte(remote, ':'); i > 0 {
		return remote[:i]
	}
	return remote
}

func (st *sessionTable) count() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.m)
}

func (st *sessionTable) get(id SessionID) *session {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.m[id]
}

func (st *sessionTable) remove(s *session) {
	st.mu.Lock()
	if st.m[s.id] == s {
		delete(st.m, s.id)
		if st.byPeer[s.peer]--; st.byPeer[s.peer] <= 0 {
			delete(st.byPeer, s.peer)
		}
	}
	st.mu.Unlock()
}

// session is one session: the holds and waiters it owns, its TTL and its
// connection.
type session struct {
	t      *Table
	id     SessionID
	ttl    time.Duration
	source string
	// peer is the address the session was opened from (counted against
	// Options.MaxSessionsPerPeer); a resume from elsewhere does not move it.
	peer string
	// last is when the last whole frame arrived, in Unix nanoseconds; the
	// session expires ttl after it.
	last atomic.Int64
	// stalled is set while the server holds the session's connection back
	// (its answers are not being taken): its TTL does not run meanwhile.
	stalled atomic.Bool

	// mu guards the fields below. It is a leaf: taken under an entry's
	// mutex, never the other way round.
	mu      sync.Mutex
	idle    sync.Cond // signalled when inflight drops to 0; uses mu
	remote  string
	link    *Link // the connection; nil while disconnected
	ended   bool
	holds   map[string]uint64 // key → token of every grant it holds
	waiters map[*waiter]struct{}
	// inflight counts grants being recorded for the session: end waits
	// for them so that no hold lands after it took its inventory.
	inflight int
	// stalls counts the Stalls not yet undone; stallSince is when the
	// first began (Unix ns).
	stalls     int
	stallSince int64
}

func newSession(t *Table, id SessionID, source, remote string, ttl time.Duration) *session {
	s := &session{t: t, id: id, ttl: ttl, source: source, remote: remote, peer: peerOf(remote),
		holds: make(map[string]uint64), waiters: make(map[*waiter]struct{})}
	s.idle.L = &s.mu
	s.last.Store(t.now().UnixNano())
	return s
}

// Link is one connection's hold on a session: requests go through it, and
// only the session's current Link may make them. Its methods are safe for
// concurrent use.
type Link struct {
	s      *session
	remote string
	closer func()
}

// OpenSession opens a new session for source with the given TTL. remote is
// the connection's address; closer, if not nil, is called (once, without
// any of the table's locks) when the session ends by expiry or EndSession
// or is taken over by a resume, to close the connection.
func (t *Table) OpenSession(source, remote string, ttl time.Duration, closer func()) (*Link, error) {
	st := &t.sessions
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.m) >= st.max {
		return nil, fmt.Errorf("%w (%d open)", ErrTooManySessions, len(st.m))
	}
	peer := peerOf(remote)
	if n := st.byPeer[peer]; st.perPeer > 0 && n >= st.perPeer {
		return nil, fmt.Errorf("%w (%s has %d open)", ErrTooManyFromPeer, peer, n)
	}
	var id SessionID
	for id == 0 || st.m[id] != nil {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("session id: %w", err)
		}
		id = SessionID(binary.BigEndian.Uint64(b[:]))
	}
	s := newSession(t, id, source, remote, ttl)
	l := &Link{s: s, remote: remote, closer: closer}
	s.link = l
	st.add(s)
	sj := t.sessionJournal()
	if sj == nil {
		return l, nil
	}
	// Recorded outside the table's lock, which every other open and
	// resume takes: the id is reserved meanwhile, and nobody knows it.
	st.mu.Unlock()
	err := sj.OpenSession(id, source, remote, ttl)
	st.mu.Lock()
	if err != nil {
		s.mu.Lock()
		s.ended, s.link = true, nil
		s.mu.Unlock()
		if st.m[id] == s {
			delete(st.m, id)
			if st.byPeer[s.peer]--; st.byPeer[s.peer] <= 0 {
				delete(st.byPeer, s.peer)
			}
		}
		return nil, fmt.Errorf("%w: open session: %w", ErrJournal, err)
	}
	s.last.Store(t.now().UnixNano()) // the TTL counts from the answer's commit
	return l, nil
}

// sessionJournal returns the table's journal if it records sessions, or nil.
func (t *Table) sessionJournal() SessionJournal {
	if !t.durable {
		return nil
	}
	sj, _ := t.journal.(SessionJournal)
	return sj
}

// ResumeSession takes the session id back for a new connection: its holds
// are kept, its TTL restarts, and its previous connection, if still
// attached, is detached (its pending Locks withdrawn with ErrDetached) and
// closed. It returns an error wrapping ErrUnknownSession when the session
// does not exist or has expired.
func (t *Table) ResumeSession(id SessionID, remote string, closer func()) (*Link, error) {
	s := t.sessions.get(id)
	if s == nil {
		return nil, fmt.Errorf("resume %s: %w", id, ErrUnknownSession)
	}
	if s.expiredAt(t.now()) {
		t.expire(s)
		return nil, fmt.Errorf("resume %s: %w", id, ErrUnknownSession)
	}
	if sj := t.sessionJournal(); sj != nil {
		if err := sj.ResumeSession(id, remote); err != nil {
			return nil, fmt.Errorf("%w: resume session %s: %w", ErrJournal, id, err)
		}
	}
	l := &Link{s: s, remote: remote, closer: closer}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return nil, fmt.Errorf("resume %s: %w", id, ErrUnknownSession)
	}
	old := s.link
	s.link = l
	s.remote = remote
	s.last.Store(t.now().UnixNano())
	stale := s.waitersOf(old)
	s.mu.Unlock()
	t.withdraw(stale, ErrDetached)
	if old != nil && old.closer != nil {
		old.closer()
	}
	return l, nil
}

// waitersOf lists the waiters that l queued. s.mu must be held.
func (s *session) waitersOf(l *Link) []*waiter {
	var ws []*waiter
	for w := range s.waiters {
		if l == nil || w.link == l {
			ws = append(ws, w)
		}
	}
	return ws
}

// withdraw takes each waiter still queued out of its queue and gives its
// done err, returning how many it withdrew.
func (t *Table) withdraw(ws []*waiter, err error) int {
	n := 0
	for _, w := range ws {
		e := w.e
		e.mu.Lock()
		ok := w.queued
		if ok {
			t.dequeue(w)
			n++
		}
		e.mu.Unlock()
		if ok {
			t.unref(e, 1)
			w.done(0, err)
		}
	}
	return n
}

// ID returns the session's id.
func (l *Link) ID() SessionID { return l.s.id }

// TTL returns the session's TTL.
func (l *Link) TTL() time.Duration { return l.s.ttl }

// Touch records that a whole frame arrived: the TTL counts from now.
func (l *Link) Touch() { l.s.last.Store(l.s.t.now().UnixNano()) }

// Stall tells the session that the server has stopped reading its
// connection (its answers are not being taken): its TTL does not run until
// the matching Unstall, which takes the stalled time off what has elapsed.
// Stalls nest.
func (l *Link) Stall() {
	s := l.s
	s.mu.Lock()
	if s.stalls == 0 {
		s.stallSince = s.t.now().UnixNano()
		s.stalled.Store(true)
	}
	s.stalls++
	s.mu.Unlock()
}

// Unstall undoes one Stall.
func (l *Link) Unstall() {
	s := l.s
	s.mu.Lock()
	s.stalls--
	if s.stalls == 0 {
		// The stalled time does not count against the TTL, unless a frame
		// arrived meanwhile and the TTL counts from it anyway.
		if last := s.last.Load(); last < s.stallSince {
			// A Touch racing this one wins: it restarts the TTL anyway.
			s.last.CompareAndSwap(last, last+s.t.now().UnixNano()-s.stallSince)
		}
		s.stalled.Store(false)
	}
	s.mu.Unlock()
}

func (l *Link) holder(o Origin) Holder {
	return Holder{Source: l.s.source, Remote: l.remote, Session: l.s.id, Origin: o}
}

// Lock queues a Lock of key for the session, as Table.LockFunc: done is
// called exactly once, possibly before Lock returns, without the table's
// locks. id is the request's id: when the session holds key under a grant
// that a Lock with this id made, that grant is given again at once
// (Reissue). It fails at once with ErrSessionEnded or ErrDetached when
// the session cannot take keys through l.
func (l *Link) Lock(key string, id uint32, done func(token uint64, err error)) (*Pending, error) {
	return l.s.t.lock(key, l.holder(Origin{OriginLock, id}), l.s, l, done)
}

// TryLock takes key for the session if it is free at this instant, or
// returns the grant that a TryLock with the same id made and the session
// still holds (Reissue).
func (l *Link) TryLock(key string, id uint32) (uint64, error) {
	return l.s.t.tryLock(key, l.holder(Origin{OriginTryLock, id}), l.s, l)
}

// Unlock releases the session's grant token of key (token 0: whichever
// grant the session holds on key) and returns the released grant's token.
// It returns ErrNotHeld, changing nothing, when the session does not hold
// key under that token.
func (l *Link) Unlock(key string, token uint64) (uint64, error) {
	s := l.s
	if !s.usable(l) {
		return 0, s.refusal()
	}
	e := s.t.lookup(key)
	if e == nil {
		return 0, ErrNotHeld
	}
	defer s.t.unref(e, 1)
	return s.t.releaseOne(e, "unlock", func(g *grant) bool {
		return g.sess == s && (token == 0 || g.token == token)
	})
}

// Detach tells the session that l's connection is gone: its pending Locks
// are withdrawn with ErrDetached (their done is called), its holds stay,
// and its TTL keeps counting from the last whole frame. It does nothing when
// l is no longer the session's connection.
func (l *Link) Detach() {
	s := l.s
	s.mu.Lock()
	if s.link != l {
		s.mu.Unlock()
		return
	}
	s.link = nil
	ws := s.waitersOf(l)
	s.mu.Unlock()
	s.t.withdraw(ws, ErrDetached)
}

// Close ends the session (Close action): its pending Locks are refused
// with ErrSessionEnded, its holds released as one journal batch. l's
// closer is not called: the caller closes its own connection.
func (l *Link) Close() (ResetResult, error) {
	s := l.s
	if !s.usable(l) {
		return ResetResult{}, s.refusal()
	}
	return s.t.end(s, false)
}

// EndSession ends session id as if it had expired: its pending Locks are
// refused, every key it holds is released (one journal batch), and its
// connection is closed.
func (t *Table) EndSession(id SessionID) (ResetResult, error) {
	s := t.sessions.get(id)
	if s == nil {
		return ResetResult{}, fmt.Errorf("end %s: %w", id, ErrUnknownSession)
	}
	return t.end(s, true)
}

// end ends s. Its holds are released only once the grants being recorded
// for it have landed, so that none escapes the release. If the releases
// cannot be recorded the keys stay held by the ended session and the error
// wraps ErrJournal: a reset (or a restart, which restores the session and
// lets it expire) frees them.
func (t *Table) end(s *session, closeConn bool) (ResetResult, error) {
	var res ResetResult
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return res, fmt.Errorf("end %s: %w", s.id, ErrUnknownSession)
	}
	s.ended = true
	link := s.link
	s.link = nil
	ws := s.waitersOf(nil)
	for s.inflight > 0 {
		s.idle.Wait()
	}
	keys := make([]string, 0, len(s.holds))
	for k := range s.holds {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	t.sessions.remove(s)

	res.Refused = t.withdraw(ws, ErrSessionEnded)
	var commit func([]Change) error
	if sj := t.sessionJournal(); sj != nil {
		commit = func(batch []Change) error { return sj.EndSession(s.id, batch) }
	}
	var ns notices
	err := t.releaseManyWith(keys, func(e *entry) (bool, int) {
		return e.hold != nil && e.hold.sess == s, 0
	}, &res, &ns, commit)
	ns.send()
	if closeConn && link != nil && link.closer != nil {
		link.closer()
	}
	if err != nil {
		return res, fmt.Errorf("%w: end session %s: %w", ErrJournal, s.id, err)
	}
	return res, nil
}

func (s *session) expiredAt(now time.Time) bool {
	return !s.stalled.Load() && now.UnixNano()-s.last.Load() >= int64(s.ttl)
}

// expire ends s because its TTL passed.
func (t *Table) expire(s *session) {
	// A journal refusal still ended the session: count it.
	if _, err := t.end(s, true); !errors.Is(err, ErrUnknownSession) {
		t.sessions.expired.Add(1)
	}
}

// ExpireSessions ends every session whose TTL has passed and returns how
// many it ended.
func (t *Table) ExpireSessions() int {
	now := t.now()
	var due []*session
	t.sessions.mu.Lock()
	for _, s := range t.sessions.m {
		if s.expiredAt(now) {
			due = append(due, s)
		}
	}
	t.sessions.mu.Unlock()
	for _, s := range due {
		t.expire(s)
	}
	return len(due)
}

// ExpiryInterval is how often RunExpiry looks for expired sessions: a
// session's holds are released within this of its TTL (and a release's
// fsync).
const ExpiryInterval = 100 * time.Millisecond

// RunExpiry ends expired sessions every ExpiryInterval until ctx ends.
// The caller owns the goroutine it runs in.
func (t *Table) RunExpiry(ctx context.Context) {
	tick := time.NewTicker(ExpiryInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.ExpireSessions()
		}
	}
}

// usable reports whether requests may come through l (nil: any).
func (s *session) usable(l *Link) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended && (l == nil || s.link == l)
}

// refusal is the error for a request that usable refused: the session
// ended, or the request came through a link that is no longer its own.
func (s *session) refusal() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return ErrSessionEnded
	}
	return ErrDetached
}

// begin registers a grant about to be recorded for the session through l;
// false when the session cannot take it. Every true is followed by finish.
func (s *session) begin(l *Link) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || (l != nil && s.link != l) {
		return false
	}
	s.inflight++
	return true
}

// finish ends what begin started: held says whether the grant took effect.
func (s *session) finish(key string, token uint64, held bool) {
	s.mu.Lock()
	if held {
		s.holds[key] = token
	}
	s.inflight--
	if s.inflight == 0 {
		s.idle.Broadcast()
	}
	s.mu.Unlock()
}

func (s *session) addHold(key string, token uint64) {
	s.mu.Lock()
	s.holds[key] = token
	s.mu.Unlock()
}

func (s *session) dropHold(key string, token uint64) {
	s.mu.Lock()
	if s.holds[key] == token {
		delete(s.holds, key)
	}
	s.mu.Unlock()
}

// addWaiter registers w if the session can still take keys through l.
func (s *session) addWaiter(w *waiter, l *Link) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.link != l {
		return false
	}
	s.waiters[w] = struct{}{}
	return true
}

func (s *session) dropWaiter(w *waiter) {
	s.mu.Lock()
	delete(s.waiters, w)
	s.mu.Unlock()
}

// restore returns the session id, creating it disconnected (restored from
// a journal): it expires one TTL from now unless it is resumed.
func (st *sessionTable) restore(t *Table, id SessionID, source, remote string, ttl time.Duration) *session {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.m[id]
	if s == nil {
		s = newSession(t, id, source, remote, ttl)
		st.add(s)
	}
	return s
}

// RestoreSession creates session id, disconnected, if the table does not
// know it (a session without holds, which Restore does not bring back),
// and restarts its TTL so that it expires ttl + grace from now unless it
// is resumed: a new leader's takeover (SPEC §8.3). It is meant for
// rebuilding the table before serving, and does not call the journal.
func (t *Table) RestoreSession(id SessionID, source, remote string, ttl, grace time.Duration) {
	s := t.sessions.restore(t, id, source, remote, ttl)
	s.last.Store(t.now().Add(grace).UnixNano())
}

// SessionInfo is a read-only view of a session.
type SessionInfo struct {
	ID     SessionID
	Source string
	// Remote is the address of its connection (the last one while
	// disconnected).
	Remote    string
	Connected bool
	TTL       time.Duration
	// ExpiresIn is the time left before expiry; it counts down while the
	// session is silent, connected or not.
	ExpiresIn time.Duration
	Holds     int // keys it holds
	Waiting   int // its pending Locks
}

func (s *session) info(now time.Time) SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.ttl - time.Duration(now.UnixNano()-s.last.Load())
	return SessionInfo{ID: s.id, Source: s.source, Remote: s.remote, Connected: s.link != nil,
		TTL: s.ttl, ExpiresIn: max(left, 0), Holds: len(s.holds), Waiting: len(s.waiters)}
}

// Sessions calls fn with every open session, in no particular order, until
// fn returns false.
func (t *Table) Sessions(fn func(SessionInfo) bool) {
	t.sessions.mu.Lock()
	all := make([]*session, 0, len(t.sessions.m))
	for _, s := range t.sessions.m {
		all = append(all, s)
	}
	t.sessions.mu.Unlock()
	now := t.now()
	for _, s := range all {
		if !fn(s.info(now)) {
			return
		}
	}
}

// SessionInfo returns the view of session id; ok is false when it is not
// open.
func (t *Table) SessionInfo(id SessionID) (info SessionInfo, ok bool) {
	s := t.sessions.get(id)
	if s == nil {
		return SessionInfo{}, false
	}
	return s.info(t.now()), true
}
