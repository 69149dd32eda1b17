package locker

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by the engine. Compare with errors.Is: the journal's errors
// come back wrapped.
var (
	// ErrLocked is returned by TryLock when the key is held by anyone.
	ErrLocked = errors.New("key is held")
	// ErrNotHeld is returned by Unlock and Release when the key is not held
	// (by that grant, for Release).
	ErrNotHeld = errors.New("key is not held")
	// ErrReset is given to a waiter that ResetByKey withdrew.
	ErrReset = errors.New("key was reset while waiting")
	// ErrSourceReset is given to a waiter that ResetBySource withdrew.
	ErrSourceReset = errors.New("source was reset while waiting")
	// ErrCanceled is given to a waiter withdrawn by Pending.Cancel.
	ErrCanceled = errors.New("lock canceled while waiting")
	// ErrSessionEnded is returned for a request of a session that has
	// ended (closed, expired or ended by an operator), and given to its
	// waiters when it ends.
	ErrSessionEnded = errors.New("session ended")
	// ErrDetached is returned for a request made through a Link that is no
	// longer the session's connection, and given to the waiters it had
	// when it was detached.
	ErrDetached = errors.New("session connection detached")
	// ErrEmptyKey is returned for an empty key: it names nothing.
	ErrEmptyKey = errors.New("empty key")
	// ErrJournal wraps every refusal of the Journal, so that callers can tell
	// "not durable" apart from the other outcomes.
	ErrJournal = errors.New("journal refused")
	// ErrOutcomeUnknown is wrapped by a journal's error when the batch may
	// still take effect later (a replicated journal that lost its
	// leadership while committing): the caller must not answer that
	// nothing changed, and closes the connection instead.
	ErrOutcomeUnknown = errors.New("outcome not known")
)

// Holder says who asked for a key.
type Holder struct {
	// Source names the requester: a service name or a host.
	Source string
	// Remote is the requester's network address.
	Remote string
	// Session is the session that owns the request; 0 for v1.
	Session SessionID
	// Origin is, for a session's Lock or TryLock, the request that asked:
	// the grant it makes remembers it, so that the same request sent again
	// finds that grant (Reissue, docs/protocol.md). Zero for v1.
	Origin Origin
}

// Origin names the session request that asked for a grant: its action
// (OriginLock or OriginTryLock, the protocol's action numbers) and the id
// the client gave it.
type Origin struct {
	Action byte
	ID     uint32
}

// The actions of an Origin.
const (
	OriginLock    byte = 1
	OriginTryLock byte = 5
)

// Change is one entry of a journal batch: a grant of Key under Token to
// Holder, or the release of the grant Token of Key.
type Change struct {
	Key   string
	Token uint64
	// Grant is true for a grant, false for a release.
	Grant bool
	// For a grant: who holds it, since when, and the TTL of its session
	// (0 for a v1 hold).
	Holder Holder
	Since  time.Time
	TTL    time.Duration
}

// Journal makes the lock table durable. The engine hands it every change
// before the change takes effect, as one batch per operation (a handover's
// release and grant, or a session end's releases, are one batch), and it
// must return only once the batch is durable; an error means the batch did
// not take effect. Batches touching one key never overlap and reach the
// journal in the order they take effect. The slice is not retained.
type Journal interface {
	Commit(batch []Change) error
}

// SessionJournal is a Journal that also records sessions: their open,
// resume and end (a cluster's journal, where a session lives on the next
// leader). A Table whose Journal implements it records each open and
// resume before answering it, and a session's end (its releases included)
// through EndSession instead of Commit, even when the session holds
// nothing. A single node's journal does not implement it: its log records
// no opens.
type SessionJournal interface {
	Journal
	OpenSession(id SessionID, source, remote string, ttl time.Duration) error
	ResumeSession(id SessionID, remote string) error
	EndSession(id SessionID, batch []Change) error
}

// memoryJournal is the journal of a table kept only in memory: it folds
// every batch into a State, the function a durable journal's replay and a
// cluster's FSM fold records with, so that in memory too the table changes
// only by records that State accepts. It waits for nothing; a batch it
// refuses is an engine bug, and changes nothing, as on disk.
type memoryJournal struct {
	mu sync.Mutex // guards s: batches of different keys commit concurrently
	s  *State
}

func (j *memoryJournal) Commit(batch []Change) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.s.ApplyBatch(batch, 0)
}

// restore records a grant a journal's replay restores into the table.
func (j *memoryJournal) restore(c Change) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.s.Apply(c)
}

// State calls fn with the State an in-memory table's changes are folded
// into, under the lock that keeps batches out meanwhile; it reports false
// for a table with a journal of its own (whose State is that journal's).
func (t *Table) State(fn func(*State)) bool {
	j, ok := t.journal.(*memoryJournal)
	if !ok {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	fn(j.s)
	return true
}

// Options configures a Table. The zero value is an in-memory table.
type Options struct {
	// Journal records changes; nil keeps the table in memory, folding
	// each change into a State of its own (see Table.State).
	Journal Journal
	// TokenFloor is the highest fencing token handed out before (by an
	// earlier run, from its journal). The first token is the larger of
	// TokenFloor+1 and the current time in Unix microseconds, so tokens
	// also grow across restarts without a journal.
	TokenFloor uint64
	// MaxSessions bounds the sessions (connected or not); 0 means 10000.
	// Opening one more is refused with ErrTooManySessions.
	MaxSessions int
	// MaxSessionsPerPeer bounds the sessions opened from one address (the
	// host of the open's remote address), connected or not; 0 means no
	// bound of its own. Opening one more from it is refused with
	// ErrTooManyFromPeer; a resume is never refused by it.
	MaxSessionsPerPeer int
	// OnGrant, if set, is called for every grant that takes effect with the
	// time the holder waited for it. It must be fast and must not call the
	// Table.
	OnGrant func(waited time.Duration)
	// OnRelease, if set, is called for every release with the time the key
	// was held. Same rules as OnGrant.
	OnRelease func(held time.Duration)
	// Now replaces time.Now in tests.
	Now func() time.Time
}

// shardCount spreads the key map over several mutexes so that lockers of
// different keys rarely meet on one.
const shardCount = 64

// Table is the lock table. Its methods are safe for concurrent use.
type Table struct {
	shards    [shardCount]shard
	seed      maphash.Seed
	journal   Journal
	durable   bool
	onGrant   func(time.Duration)
	onRelease func(time.Duration)
	now       func() time.Time
	lastToken atomic.Uint64 // the last fencing token handed out
	held      atomic.Int64
	waiting   atomic.Int64

	sessions sessionTable
}

type shard struct {
	// mu guards keys and the refs of every entry in it, so that an entry is
	// in the map exactly while somebody holds a reference to it.
	mu   sync.Mutex
	keys map[string]*entry
	peak int // largest len(keys) since the map was last rebuilt
}

// entry is one key: its grant and its queue.
type entry struct {
	key  string
	refs int // guarded by the shard's mu; the holder and each waiter own one

	// mu guards everything below and is held across journal calls, so a
	// key's changes reach the journal in the order they take effect.
	mu         sync.Mutex
	hold       *grant  // nil while the key is free
	head, tail *waiter // the queue, oldest first
	queued     int
}

// grant is one hold of a key.
type grant struct {
	token uint64
	h     Holder
	since time.Time
	sess  *session // nil for v1
}

// waiter is one queued Lock.
type waiter struct {
	e          *entry
	h          Holder
	since      time.Time
	sess       *session // nil for v1
	link       *Link    // the session connection that asked; nil for v1
	done       func(token uint64, err error)
	tbl        *Table
	prev, next *waiter
	queued     bool // in e's queue; guarded by e.mu
}

// New returns an empty lock table.
func New(opts Options) *Table {
	t := &Table{
		seed:      maphash.MakeSeed(),
		journal:   opts.Journal,
		durable:   opts.Journal != nil,
		onGrant:   opts.OnGrant,
		onRelease: opts.OnRelease,
		now:       opts.Now,
	}
	if t.journal == nil {
		t.journal = &memoryJournal{s: NewState(0)}
	}
	if t.onGrant == nil {
		t.onGrant = func(time.Duration) {}
	}
	if t.onRelease == nil {
		t.onRelease = func(time.Duration) {}
	}
	if t.now == nil {
		t.now = time.Now
	}
	for i := range t.shards {
		t.shards[i].keys = make(map[string]*entry)
	}
	t.lastToken.Store(max(opts.TokenFloor, uint64(t.now().UnixMicro())-1))
	t.sessions.init(opts.MaxSessions, opts.MaxSessionsPerPeer)
	return t
}

// Durable reports whether the table has a journal: its changes then wait
// for the disk, and callers that must not block should call it from a
// goroutine of their own.
func (t *Table) Durable() bool { return t.durable }

// LastToken returns the highest fencing token handed out so far.
func (t *Table) LastToken() uint64 { return t.lastToken.Load() }

// RaiseTokens makes every later token greater than floor: the highest
// token an earlier run handed out, from its journal.
func (t *Table) RaiseTokens(floor uint64) {
	for {
		last := t.lastToken.Load()
		if floor <= last || t.lastToken.CompareAndSwap(last, floor) {
			return
		}
	}
}

// commit hands a batch to the journal.
func (t *Table) commit(batch []Change) error {
	return t.journal.Commit(batch)
}

// nextToken returns a fresh fencing token. Tokens of refused batches are
// simply never used: nobody learnt them.
func (t *Table) nextToken() uint64 { return t.lastToken.Add(1) }

func (t *Table) shardOf(key string) *shard {
	return &t.shards[maphash.String(t.seed, key)%shardCount]
}

// ref returns the entry for key, creating it, and takes a reference on it.
func (t *Table) ref(key string) *entry {
	s := t.shardOf(key)
	s.mu.Lock()
	e := s.keys[key]
	if e == nil {
		e = &entry{key: key}
		s.keys[key] = e
		s.peak = max(s.peak, len(s.keys))
	}
	e.refs++
	s.mu.Unlock()
	return e
}

// lookup is ref for keys that must already exist; it returns nil otherwise.
func (t *Table) lookup(key string) *entry {
	s := t.shardOf(key)
	s.mu.Lock()
	e := s.keys[key]
	if e != nil {
		e.refs++
	}
	s.mu.Unlock()
	return e
}

// unref drops n references and forgets the key when they were the last.
// It must not be called with e.mu held.
func (t *Table) unref(e *entry, n int) {
	if n == 0 {
		return
	}
	s := t.shardOf(e.key)
	s.mu.Lock()
	s.drop(e, n)
	s.mu.Unlock()
}

// drop drops n references on e, an entry of s, and forgets it when they
// were the last. s.mu must be held.
func (s *shard) drop(e *entry, n int) {
	e.refs -= n
	if e.refs > 0 {
		return
	}
	delete(s.keys, e.key)
	// Go maps never give back their buckets; rebuild a shard that has
	// shrunk far below its peak so a burst of distinct keys is not kept
	// forever.
	if s.peak >= 1024 && len(s.keys) < s.peak/4 {
		m := make(map[string]*entry, len(s.keys))
		for k, v := range s.keys {
			m[k] = v
		}
		s.keys = m
		s.peak = len(m)
	}
}

// Pending is a queued Lock. Its Cancel withdraws it.
type Pending struct{ w *waiter }

// decided is the Pending of a Lock granted at once: nothing to withdraw.
var decided = &Pending{}

// notice is an outcome to tell a waiter once the entry mutexes are
// released: waiters' callbacks never run under the table's locks.
type notice struct {
	done  func(token uint64, err error)
	token uint64
	err   error
}

// notices are outcomes decided under locks, told after them in order.
type notices []notice

func (ns *notices) add(w *waiter, token uint64, err error) {
	*ns = append(*ns, notice{done: w.done, token: token, err: err})
}

// send tells every outcome, in the order they were decided.
func (ns notices) send() {
	for _, n := range ns {
		n.done(n.token, n.err)
	}
}

// Cancel withdraws the waiter and reports true, after giving its done
// ErrCanceled; it reports false when the lock was already decided (granted,
// refused or withdrawn): its done has then been called or is being called.
func (p *Pending) Cancel() bool {
	if p == nil || p.w == nil {
		return false
	}
	w := p.w
	e := w.e
	e.mu.Lock()
	if !w.queued {
		e.mu.Unlock()
		return false
	}
	t := w.tbl
	t.dequeue(w)
	e.mu.Unlock()
	t.unref(e, 1)
	w.done(0, ErrCanceled)
	return true
}

// Lock waits for key in FIFO order and returns the grant's token once the
// caller holds it. It returns ErrReset or ErrSourceReset when a reset
// withdrew the caller, the context's cause when ctx ended first (the caller
// is then out of the queue, and a grant that crossed the cancellation is
// released again), and an error wrapping ErrJournal when the grant could not
// be made durable.
func (t *Table) Lock(ctx context.Context, key string, h Holder) (uint64, error) {
	return t.LockQueued(ctx, key, h, nil)
}

// LockQueued is Lock that calls queued, if not nil, once the request has
// to wait in the queue (never when the key was free), before it waits: the
// caller can then start watching for its client's departure, and cancel ctx
// with the reason, only for the requests that need it.
func (t *Table) LockQueued(ctx context.Context, key string, h Holder, queued func()) (uint64, error) {
	type result struct {
		token uint64
		err   error
	}
	res := make(chan result, 1)
	p, err := t.lock(key, h, nil, nil, func(token uint64, err error) { res <- result{token, err} })
	if err != nil {
		return 0, err
	}
	if p != decided && queued != nil {
		queued()
	}
	select {
	case r := <-res:
		return r.token, r.err
	case <-ctx.Done():
	}
	if p.Cancel() {
		<-res
		return 0, context.Cause(ctx)
	}
	r := <-res
	if r.err != nil {
		return 0, r.err
	}
	// Granted as ctx ended: the caller will not use it, so hand it on.
	_ = t.Release(key, r.token)
	return 0, context.Cause(ctx)
}

// LockFunc queues a Lock of key and calls done exactly once with the
// outcome: the grant's token, or why there is none. done may run before
// LockFunc returns (the key was free) or later, in whichever goroutine
// grants or withdraws it (a release, a reset, a Cancel, an expiry), after
// that goroutine has let go of the table's locks; it should be quick, since
// that goroutine has more to tell. The returned Pending withdraws the
// waiter.
func (t *Table) LockFunc(key string, h Holder, done func(token uint64, err error)) (*Pending, error) {
	return t.lock(key, h, nil, nil, done)
}

// lock is Lock for v1 callers and sessions alike.
func (t *Table) lock(key string, h Holder, s *session, l *Link, done func(uint64, error)) (*Pending, error) {
	if key == "" {
		return nil, ErrEmptyKey
	}
	e := t.ref(key)
	now := t.now()
	e.mu.Lock()
	if g := e.hold; s != nil && t.reissued(g, s, l, h.Origin) {
		token := g.token
		e.mu.Unlock()
		t.unref(e, 1)
		done(token, nil)
		return decided, nil
	}
	if e.hold == nil {
		// Free, so nobody queues (a queue exists only behind a holder).
		g, err := t.grantFree(e, h, s, l, now)
		e.mu.Unlock()
		if err != nil {
			t.unref(e, 1)
			return nil, err
		}
		done(g.token, nil)
		return decided, nil
	}
	w := &waiter{e: e, h: h, since: now, sess: s, link: l, done: done, tbl: t}
	if s != nil && !s.addWaiter(w, l) {
		e.mu.Unlock()
		t.unref(e, 1)
		return nil, s.refusal()
	}
	t.enqueue(w)
	e.mu.Unlock()
	return &Pending{w: w}, nil
}

// grantFree grants the free key of e to h. e.mu must be held; on success
// the caller's reference becomes the holder's.
func (t *Table) grantFree(e *entry, h Holder, s *session, l *Link, arrived time.Time) (*grant, error) {
	if s != nil && !s.begin(l) {
		return nil, s.refusal()
	}
	g := &grant{token: t.nextToken(), h: h, since: t.now(), sess: s}
	err := t.journal.Commit([]Change{grantChange(e.key, g)})
	if s != nil {
		s.finish(e.key, g.token, err == nil)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: acquire %q: %w", ErrJournal, e.key, err)
	}
	t.hold(e, g, arrived)
	return g, nil
}

func grantChange(key string, g *grant) Change {
	c := Change{Key: key, Token: g.token, Grant: true, Holder: g.h, Since: g.since}
	if g.sess != nil {
		c.TTL = g.sess.ttl
	}
	return c
}

// hold makes g the holder of e. e.mu must be held.
func (t *Table) hold(e *entry, g *grant, arrived time.Time) {
	e.hold = g
	t.held.Add(1)
	t.onGrant(g.since.Sub(arrived))
}

func (t *Table) enqueue(w *waiter) {
	e := w.e
	w.queued = true
	w.prev = e.tail
	if e.tail != nil {
		e.tail.next = w
	} else {
		e.head = w
	}
	e.tail = w
	e.queued++
	t.waiting.Add(1)
}

// dequeue takes w out of its queue (and its session's waiters). e.mu must
// be held; the caller drops w's reference once it unlocks.
func (t *Table) dequeue(w *waiter) {
	e := w.e
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		e.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		e.tail = w.prev
	}
	w.prev, w.next = nil, nil
	w.queued = false
	e.queued--
	t.waiting.Add(-1)
	if w.sess != nil {
		w.sess.dropWaiter(w)
	}
}

// TryLock takes key if it is free at this instant and returns its token,
// or ErrLocked. It never waits.
func (t *Table) TryLock(key string, h Holder) (uint64, error) {
	return t.tryLock(key, h, nil, nil)
}

func (t *Table) tryLock(key string, h Holder, s *session, l *Link) (uint64, error) {
	if key == "" {
		return 0, ErrEmptyKey
	}
	e := t.ref(key)
	e.mu.Lock()
	if g := e.hold; s != nil && t.reissued(g, s, l, h.Origin) {
		token := g.token
		e.mu.Unlock()
		t.unref(e, 1)
		return token, nil
	}
	if e.hold != nil {
		e.mu.Unlock()
		t.unref(e, 1)
		return 0, ErrLocked
	}
	now := t.now()
	g, err := t.grantFree(e, h, s, l, now)
	e.mu.Unlock()
	if err != nil {
		t.unref(e, 1)
		return 0, err
	}
	return g.token, nil
}

// reissued reports whether g, the grant of a key, was made for session s
// by the request o, and l is still the session's connection: that
// request, sent again (a client that lost its answer), gets g back instead
// of waiting behind it or answering "held".
// The entry's mutex must be held.
func (t *Table) reissued(g *grant, s *session, l *Link, o Origin) bool {
	return g != nil && g.sess == s && o.Action != 0 && g.h.Origin == o && s.usable(l)
}

// handover is a planned release of e's grant: next, if any, is the waiter
// that gets the key under a new grant.
type handover struct {
	e    *entry
	old  *grant
	next *waiter
	g    *grant
}

// planRelease plans the release of e's grant and the grant to the first
// waiter that can still take it, appending both changes to batch. Waiters
// of sessions that have ended are refused on the way. e.mu must be held and
// the key held.
func (t *Table) planRelease(e *entry, batch []Change, ns *notices) (handover, []Change, int) {
	hv := handover{e: e, old: e.hold}
	batch = append(batch, Change{Key: e.key, Token: e.hold.token})
	refused := 0
	for w := e.head; w != nil; w = e.head {
		if w.sess != nil && !w.sess.begin(w.link) {
			// Its session ended or moved to another connection while
			// this release was on its way: it never gets the key.
			t.dequeue(w)
			ns.add(w, 0, w.sess.refusal())
			refused++
			continue
		}
		hv.next = w
		hv.g = &grant{token: t.nextToken(), h: w.h, sess: w.sess}
		hv.g.since = t.now()
		batch = append(batch, grantChange(e.key, hv.g))
		break
	}
	return hv, batch, refused
}

// apply carries out a recorded handover. e.mu must be held. It returns the
// references to drop once the mutex is released; the new holder is told
// through ns.
func (t *Table) apply(hv handover, ns *notices) int {
	e := hv.e
	old := hv.old
	e.hold = nil
	if old.sess != nil {
		old.sess.dropHold(e.key, old.token)
	}
	t.held.Add(-1)
	t.onRelease(t.now().Sub(old.since))
	if hv.next == nil {
		return 1 // the old holder's reference
	}
	w := hv.next
	t.dequeue(w)
	if w.sess != nil {
		w.sess.finish(e.key, hv.g.token, true)
	}
	t.hold(e, hv.g, w.since)
	ns.add(w, hv.g.token, nil)
	return 1 // the waiter's reference is now the new holder's
}

// abandon undoes the plan of a handover whose batch was not recorded
// (err). When its outcome is not known (err wraps ErrOutcomeUnknown, a
// cluster's leadership lost mid-commit), the grant planned for the next
// waiter may exist all the same — a later leader can commit the batch — so
// that waiter leaves the queue and is told err: never '-', nor a Cancel's
// '-' later, for a grant that may have been made. e.mu must be held; it
// returns the references to drop once it is released (the waiter's).
func (t *Table) abandon(hv handover, err error, ns *notices) int {
	w := hv.next
	if w == nil {
		return 0
	}
	if w.sess != nil {
		w.sess.finish(hv.e.key, 0, false)
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		return 0 // nothing recorded: it waits on
	}
	t.dequeue(w)
	ns.add(w, 0, fmt.Errorf("%w: the grant of %q handed to this waiter: %w", ErrJournal, hv.e.key, err))
	return 1
}

// releaseOne releases e's grant if match accepts it. e is referenced by the
// caller.
func (t *Table) releaseOne(e *entry, what string, match func(*grant) bool) (uint64, error) {
	e.mu.Lock()
	if e.hold == nil || !match(e.hold) {
		e.mu.Unlock()
		return 0, ErrNotHeld
	}
	var ns notices
	hv, batch, refused := t.planRelease(e, nil, &ns)
	if err := t.commit(batch); err != nil {
		refused += t.abandon(hv, err, &ns)
		e.mu.Unlock()
		t.unref(e, refused)
		ns.send()
		return 0, fmt.Errorf("%w: %s %q: %w", ErrJournal, what, e.key, err)
	}
	drop := t.apply(hv, &ns) + refused
	e.mu.Unlock()
	t.unref(e, drop)
	ns.send()
	return hv.old.token, nil
}

// Unlock releases key, whoever holds it (v1 has no owners); the oldest live
// waiter is granted at once. It returns the released grant's token,
// ErrNotHeld when the key is free, or an error wrapping ErrJournal, with the
// key still held, when the release cannot be recorded.
func (t *Table) Unlock(key string) (uint64, error) {
	e := t.lookup(key)
	if e == nil {
		return 0, ErrNotHeld
	}
	defer t.unref(e, 1)
	return t.releaseOne(e, "release", func(*grant) bool { return true })
}

// Release releases the grant token of key, and only that grant: when the
// key is free or held under another token it returns ErrNotHeld and
// changes nothing. It is how a grant that was never delivered is handed on.
func (t *Table) Release(key string, token uint64) error {
	e := t.lookup(key)
	if e == nil {
		return ErrNotHeld
	}
	defer t.unref(e, 1)
	_, err := t.releaseOne(e, "release", func(g *grant) bool { return g.token == token })
	return err
}

// ResetResult says what a reset did.
type ResetResult struct {
	// Released is the number of keys whose holder was dropped.
	Released int
	// Refused is the number of waiters that were answered with a reset.
	Refused int
}

// ResetByKey drops the holder of key and withdraws every waiter of it with
// ErrReset. Resetting a free key does nothing. If the release cannot be
// recorded the key stays held, the waiters stay queued, and the error wraps
// ErrJournal.
func (t *Table) ResetByKey(key string) (ResetResult, error) {
	var res ResetResult
	e := t.lookup(key)
	if e == nil {
		return res, nil
	}
	drop := 1
	var ns notices
	defer func() {
		t.unref(e, drop)
		ns.send()
	}()
	e.mu.Lock()
	defer e.mu.Unlock() // runs first: nobody is told under the lock
	if e.hold == nil {
		return res, nil
	}
	if err := t.commit([]Change{{Key: key, Token: e.hold.token}}); err != nil {
		return res, fmt.Errorf("%w: reset %q: %w", ErrJournal, key, err)
	}
	for w := e.head; w != nil; w = e.head {
		t.dequeue(w)
		ns.add(w, 0, ErrReset)
		res.Refused++
	}
	drop += res.Refused
	drop += t.apply(handover{e: e, old: e.hold}, &ns)
	res.Released = 1
	return res, nil
}

// ResetBySource first withdraws every waiter of source, on any key, with
// ErrSourceReset, then releases every key that source holds; each passes to
// its next live waiter as on Unlock. The releases are one journal batch: if
// it is refused, every key stays held and the error wraps ErrJournal.
func (t *Table) ResetBySource(source string) (ResetResult, error) {
	var res ResetResult
	var keys []string
	t.eachEntry(func(e *entry) {
		e.mu.Lock()
		mine := e.hold != nil && e.hold.h.Source == source
		for w := e.head; w != nil && !mine; w = w.next {
			mine = w.h.Source == source
		}
		e.mu.Unlock()
		if mine {
			keys = append(keys, e.key)
		}
	})
	var ns notices
	err := t.releaseMany(keys, func(e *entry) (bool, int) {
		refused := 0
		for w := e.head; w != nil; {
			next := w.next
			if w.h.Source == source {
				t.dequeue(w)
				ns.add(w, 0, ErrSourceReset)
				refused++
			}
			w = next
		}
		res.Refused += refused
		return e.hold != nil && e.hold.h.Source == source, refused
	}, &res, &ns)
	ns.send()
	if err != nil {
		return res, fmt.Errorf("%w: reset source %q: %w", ErrJournal, source, err)
	}
	return res, nil
}

// releaseMany locks the entries of keys in key order, asks pick whether to
// release each one's grant (pick may refuse waiters first, and says how
// many references that freed), records every release and handover as one
// batch, and applies them. res.Released counts the releases. A refused
// batch changes no grant; the waiters pick refused stay refused. The
// outcomes go to ns, for the caller to send once it holds no lock.
func (t *Table) releaseMany(keys []string, pick func(*entry) (release bool, freed int), res *ResetResult, ns *notices) error {
	return t.releaseManyWith(keys, pick, res, ns, nil)
}

// releaseManyWith is releaseMany with the batch recorded by commit instead
// of the journal's Commit; commit, when set, is called even for an empty
// batch (a session's end is recorded whether it holds keys or not).
func (t *Table) releaseManyWith(keys []string, pick func(*entry) (release bool, freed int), res *ResetResult, ns *notices, commit func([]Change) error) error {
	if len(keys) == 0 {
		if commit != nil {
			return commit(nil)
		}
		return nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	entries := make([]*entry, 0, len(keys))
	for _, k := range keys {
		if e := t.lookup(k); e != nil {
			entries = append(entries, e)
		}
	}
	drops := make([]int, len(entries))
	for i, e := range entries {
		e.mu.Lock() // in key order: see the package comment
		drops[i] = 1
	}
	var batch []Change
	var plans []handover
	var at []int
	for i, e := range entries {
		release, freed := pick(e)
		drops[i] += freed
		if !release {
			continue
		}
		hv, b, refused := t.planRelease(e, batch, ns)
		batch = b
		drops[i] += refused
		plans = append(plans, hv)
		at = append(at, i)
	}
	var err error
	switch {
	case commit != nil:
		err = commit(batch)
	case len(batch) > 0:
		err = t.journal.Commit(batch)
	}
	if err == nil {
		for j, hv := range plans {
			drops[at[j]] += t.apply(hv, ns)
		}
		res.Released += len(plans)
	} else {
		for j, hv := range plans {
			drops[at[j]] += t.abandon(hv, err, ns)
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		entries[i].mu.Unlock()
	}
	for i, e := range entries {
		t.unref(e, drops[i])
	}
	return err
}

// eachEntry calls fn for every entry, one shard at a time, holding a
// reference but no lock while fn runs.
func (t *Table) eachEntry(fn func(*entry)) {
	var batch []*entry
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		batch = batch[:0]
		for _, e := range s.keys {
			e.refs++
			batch = append(batch, e)
		}
		s.mu.Unlock()
		for _, e := range batch {
			fn(e)
		}
		// Drop the batch's references under one lock: a walk of 100,000
		// keys is on the dashboard's hot path.
		s.mu.Lock()
		for _, e := range batch {
			s.drop(e, 1)
		}
		s.mu.Unlock()
	}
}

// Restore marks key as held by h since the given time under token, for a
// session of the given TTL when h.Session is not 0 (the session is created,
// disconnected, if it does not exist yet). A token of 0 asks for a new one
// (a log written before tokens existed). It is meant for rebuilding the
// table from a journal before serving, does not call the journal, and
// returns the grant's token. It fails if the key is held.
func (t *Table) Restore(key string, h Holder, token uint64, since time.Time, ttl time.Duration) (uint64, error) {
	if key == "" {
		return 0, ErrEmptyKey
	}
	if token == 0 {
		token = t.nextToken()
	}
	t.RaiseTokens(token)
	var s *session
	if h.Session != 0 {
		s = t.sessions.restore(t, h.Session, h.Source, h.Remote, ttl)
	}
	e := t.ref(key)
	e.mu.Lock()
	if e.hold != nil {
		e.mu.Unlock()
		t.unref(e, 1) // the shard's mutex, never under the entry's
		return 0, fmt.Errorf("restore %q: %w", key, ErrLocked)
	}
	g := &grant{token: token, h: h, since: since, sess: s}
	if j, ok := t.journal.(*memoryJournal); ok {
		c := grantChange(key, g)
		c.TTL = ttl
		if err := j.restore(c); err != nil {
			e.mu.Unlock()
			t.unref(e, 1)
			return 0, fmt.Errorf("restore %q: %w", key, err)
		}
	}
	e.hold = g
	if s != nil {
		s.addHold(key, token)
	}
	t.held.Add(1)
	e.mu.Unlock()
	return token, nil
}

// Waiter is one queued request, as seen by Key.
type Waiter struct {
	Holder
	// Since is when the request joined the queue.
	Since time.Time
}

// KeyInfo is a read-only view of one held key.
type KeyInfo struct {
	Key string
	// Holder and Since describe the holder and when it was granted the key;
	// Holder.Session is the owning session (0 for a v1 hold).
	Holder Holder
	Since  time.Time
	// Token is the grant's fencing token.
	Token uint64
	// Waiters is the length of the queue; OldestWaiter is the arrival of its
	// head (zero when nobody waits).
	Waiters      int
	OldestWaiter time.Time
	// Queue lists the waiters in queue order. Only Key fills it.
	Queue []Waiter
}

// Stats are the table's totals.
type Stats struct {
	Held    int // keys held
	Waiting int // requests queued
	// Sessions counts open sessions, connected or not.
	Sessions int
	// SessionExpirations counts sessions ended by their TTL since start.
	SessionExpirations uint64
}

// Stats returns the table's totals without walking it.
func (t *Table) Stats() Stats {
	return Stats{
		Held:               int(t.held.Load()),
		Waiting:            int(t.waiting.Load()),
		Sessions:           t.sessions.count(),
		SessionExpirations: t.sessions.expired.Load(),
	}
}

// Each calls fn with every held key, in no particular order, until fn
// returns false. Each key is a consistent snapshot; the set is not.
func (t *Table) Each(fn func(KeyInfo) bool) {
	stop := false
	t.eachEntry(func(e *entry) {
		if stop {
			return
		}
		ki, ok := e.info(false)
		if ok && !fn(ki) {
			stop = true
		}
	})
}

// Key returns the holder and the whole queue of key; ok is false when the
// key is not held.
func (t *Table) Key(key string) (ki KeyInfo, ok bool) {
	e := t.lookup(key)
	if e == nil {
		return KeyInfo{}, false
	}
	defer t.unref(e, 1)
	return e.info(true)
}

func (e *entry) info(withQueue bool) (KeyInfo, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hold == nil {
		return KeyInfo{}, false
	}
	ki := KeyInfo{Key: e.key, Holder: e.hold.h, Since: e.hold.since, Token: e.hold.token, Waiters: e.queued}
	if e.head != nil {
		ki.OldestWaiter = e.head.since
	}
	if withQueue {
		ki.Queue = make([]Waiter, 0, e.queued)
		for w := e.head; w != nil; w = w.next {
			ki.Queue = append(ki.Queue, Waiter{Holder: w.h, Since: w.since})
		}
	}
	return ki, true
}
