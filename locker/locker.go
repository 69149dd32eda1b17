package locker

import (
	"cmp"
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
	// ErrNotHeld is returned by Unlock when the key is not held.
	ErrNotHeld = errors.New("key is not held")
	// ErrReset is returned by Lock when ResetByKey dropped the key while the
	// caller was waiting for it.
	ErrReset = errors.New("key was reset while waiting")
	// ErrSourceReset is returned by Lock when ResetBySource withdrew the
	// caller's source while it was waiting.
	ErrSourceReset = errors.New("source was reset while waiting")
	// ErrEmptyKey is returned for an empty key: it names nothing.
	ErrEmptyKey = errors.New("empty key")
	// ErrJournal wraps every refusal of the Journal, so that callers can tell
	// "not durable" apart from the other outcomes.
	ErrJournal = errors.New("journal refused")
)

// Holder says who asked for a key.
type Holder struct {
	// Source names the requester: a service name or a host.
	Source string
	// Remote is the requester's network address.
	Remote string
}

// Journal makes the lock table durable. The engine calls Acquire after a key
// is won and before the winner is told, and Release before a release takes
// effect. Both must return only once the record is durable; an error undoes
// the grant or cancels the release. Calls for one key never overlap, and
// reach the journal in the order they take effect.
type Journal interface {
	Acquire(key string, h Holder, since time.Time) error
	Release(key string) error
}

type noJournal struct{}

func (noJournal) Acquire(string, Holder, time.Time) error { return nil }
func (noJournal) Release(string) error                    { return nil }

// Options configures a Table. The zero value is an in-memory table.
type Options struct {
	// Journal records acquires and releases; nil keeps the table in memory.
	Journal Journal
	// OnGrant, if set, is called for every grant that takes effect with the
	// time the holder waited for it. It must be fast and must not call the
	// Table.
	OnGrant func(waited time.Duration)
	// OnRelease, if set, is called for every release with the time the key
	// was held. Same rules as OnGrant.
	OnRelease func(held time.Duration)
}

// shardCount spreads the key map over several mutexes so that lockers of
// different keys rarely meet on one.
const shardCount = 64

// Table is the lock table. Its methods are safe for concurrent use.
type Table struct {
	shards    [shardCount]shard
	seed      maphash.Seed
	journal   Journal
	onGrant   func(time.Duration)
	onRelease func(time.Duration)
	nextID    atomic.Uint64
	held      atomic.Int64
	waiting   atomic.Int64
}

type shard struct {
	// mu guards keys and the refs of every entry in it, so that an entry is
	// in the map exactly while somebody holds a reference to it.
	mu   sync.Mutex
	keys map[string]*entry
	peak int // largest len(keys) since the map was last rebuilt
}

// entry is one key: its slot, its holder and its cancellation registry.
type entry struct {
	key string
	// slot is the lock: a full buffer means held. Goroutines blocked
	// sending into it are the queue; the runtime serves them in order.
	slot chan *request
	refs int // guarded by the shard's mu

	// mu guards the fields below and is held across journal calls, so a
	// key's acquire and release records reach the journal in the order
	// they take effect. It is also held around every receive from slot:
	// only holders of mu release the key.
	mu sync.Mutex
	// holder is the acknowledged holder; nil while the key is free or while
	// the runtime has handed it to a waiter that has not yet noticed.
	holder *request
	// reset is closed by ResetByKey to free every registered waiter; it is
	// made when the first waiter registers.
	reset   chan struct{}
	waiters map[uint64]*request // the cancellation registry
}

// request is one Lock or TryLock call.
type request struct {
	id uint64
	Holder
	since  time.Time     // arrival while waiting, grant time once held; guarded by entry.mu
	cancel chan struct{} // closed by ResetBySource; nil for requests that never waited
	// revoked, guarded by entry.mu, means another caller released the grant
	// before this request acknowledged it.
	revoked bool
}

// New returns an empty lock table.
func New(opts Options) *Table {
	t := &Table{
		seed:      maphash.MakeSeed(),
		journal:   opts.Journal,
		onGrant:   opts.OnGrant,
		onRelease: opts.OnRelease,
	}
	if t.journal == nil {
		t.journal = noJournal{}
	}
	if t.onGrant == nil {
		t.onGrant = func(time.Duration) {}
	}
	if t.onRelease == nil {
		t.onRelease = func(time.Duration) {}
	}
	for i := range t.shards {
		t.shards[i].keys = make(map[string]*entry)
	}
	return t
}

func (t *Table) shardOf(key string) *shard {
	return &t.shards[maphash.String(t.seed, key)%shardCount]
}

// ref returns the entry for key, creating it, and takes a reference on it.
func (t *Table) ref(key string) *entry {
	s := t.shardOf(key)
	s.mu.Lock()
	e := s.keys[key]
	if e == nil {
		e = &entry{key: key, slot: make(chan *request, 1)}
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

// unref drops a reference and forgets the key when it was the last one.
// It must not be called with e.mu held.
func (t *Table) unref(e *entry) {
	s := t.shardOf(e.key)
	s.mu.Lock()
	s.drop(e)
	s.mu.Unlock()
}

// drop drops a reference on e, an entry of s, and forgets it when it was
// the last one. s.mu must be held.
func (s *shard) drop(e *entry) {
	e.refs--
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

// Lock waits for key in FIFO order and returns nil once the caller holds it.
// It returns ErrReset or ErrSourceReset when a reset withdrew the caller,
// the context's cause when ctx ended first (the caller is then out of the
// queue), and an error wrapping ErrJournal when the grant could not be made
// durable.
func (t *Table) Lock(ctx context.Context, key string, h Holder) error {
	if key == "" {
		return ErrEmptyKey
	}
	e := t.ref(key)
	r := &request{id: t.nextID.Add(1), Holder: h, since: time.Now()}
	arrived := r.since

	e.mu.Lock()
	if e.take(r) {
		return t.acknowledge(ctx, e, r, nil, arrived)
	}
	r.cancel = make(chan struct{})
	if e.reset == nil {
		e.reset = make(chan struct{})
	}
	reset := e.reset
	if e.waiters == nil {
		e.waiters = make(map[uint64]*request)
	}
	e.waiters[r.id] = r
	t.waiting.Add(1)
	e.mu.Unlock()

	// From here to the select's park is the only stretch in which the
	// registry shows a waiter that the channel does not queue yet; take
	// keeps newcomers out meanwhile.
	var err error
	select {
	case e.slot <- r:
		e.mu.Lock()
		return t.acknowledge(ctx, e, r, reset, arrived)
	case <-reset:
		err = ErrReset
	case <-r.cancel:
		err = ErrSourceReset
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	e.mu.Lock()
	t.dropWaiter(e, r)
	e.mu.Unlock()
	t.unref(e)
	return err
}

// dropWaiter takes r out of the registry, unless a reset already did.
// e.mu must be held.
func (t *Table) dropWaiter(e *entry, r *request) {
	if e.waiters[r.id] == r {
		delete(e.waiters, r.id)
		t.waiting.Add(-1)
	}
}

// take fills the slot with r if the key is free and nobody is registered to
// wait for it: a waiter that has registered but not yet parked on the
// channel is ahead of any newcomer, so a free slot is its, not the
// newcomer's. e.mu must be held.
func (e *entry) take(r *request) bool {
	if len(e.waiters) > 0 {
		return false
	}
	select {
	case e.slot <- r:
		return true
	default:
		return false
	}
}

// acknowledge turns a won slot into a held key, or hands it on when the
// request was withdrawn in the same instant or the journal refuses. It is
// called with e.mu held and releases it.
func (t *Table) acknowledge(ctx context.Context, e *entry, r *request, reset chan struct{}, arrived time.Time) error {
	t.dropWaiter(e, r)
	err := withdrawn(ctx, r, reset)
	if r.revoked {
		// An Unlock or reset released this grant before we saw it: it is
		// already gone, and counts as granted and released at once.
		e.mu.Unlock()
		t.unref(e)
		return err
	}
	now := time.Now()
	if err == nil {
		if jerr := t.journal.Acquire(e.key, r.Holder, now); jerr != nil {
			err = fmt.Errorf("%w: acquire %q: %w", ErrJournal, e.key, jerr)
		}
	}
	if err != nil {
		<-e.slot // r itself; the next live waiter is handed the key
		e.mu.Unlock()
		t.unref(e)
		return err
	}
	r.since = now
	e.holder = r
	e.mu.Unlock()
	t.held.Add(1)
	t.onGrant(now.Sub(arrived))
	return nil
}

// withdrawn reports why a request that won its slot must not keep it.
func withdrawn(ctx context.Context, r *request, reset chan struct{}) error {
	select {
	case <-reset:
		return ErrReset
	case <-r.cancel:
		return ErrSourceReset
	default:
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// TryLock takes key if it is free at this instant and returns ErrLocked
// otherwise. It never waits, and never takes a key being handed to a
// waiter or one that a waiter has asked for.
func (t *Table) TryLock(key string, h Holder) error {
	if key == "" {
		return ErrEmptyKey
	}
	e := t.ref(key)
	r := &request{id: t.nextID.Add(1), Holder: h, since: time.Now()}
	e.mu.Lock()
	if !e.take(r) {
		e.mu.Unlock()
		t.unref(e)
		return ErrLocked
	}
	return t.acknowledge(context.Background(), e, r, nil, r.since)
}

// release empties the slot of a held key and says whether the caller must
// drop the holder's reference. e.mu must be held and the slot full.
func (t *Table) release(e *entry) (dropRef bool) {
	r := <-e.slot // hands the slot to the oldest live waiter, if any
	if r != e.holder {
		r.revoked = true // its own acknowledge drops its reference
		return false
	}
	e.holder = nil
	t.held.Add(-1)
	t.onRelease(time.Since(r.since))
	return true
}

// Unlock releases key, whoever holds it; the oldest live waiter is granted
// at once. It returns ErrNotHeld when the key is free and an error wrapping
// ErrJournal, with the key still held, when the release cannot be recorded.
func (t *Table) Unlock(key string) error {
	e := t.lookup(key)
	if e == nil {
		return ErrNotHeld
	}
	defer t.unref(e)
	e.mu.Lock()
	if len(e.slot) == 0 {
		e.mu.Unlock()
		return ErrNotHeld
	}
	if err := t.journal.Release(key); err != nil {
		e.mu.Unlock()
		return fmt.Errorf("%w: release %q: %w", ErrJournal, key, err)
	}
	drop := t.release(e)
	e.mu.Unlock()
	if drop {
		t.unref(e)
	}
	return nil
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
	defer t.unref(e)
	e.mu.Lock()
	held := len(e.slot) == 1
	if held {
		if err := t.journal.Release(key); err != nil {
			e.mu.Unlock()
			return res, fmt.Errorf("%w: reset %q: %w", ErrJournal, key, err)
		}
	}
	// Close before the release: closing completes the select of every
	// parked waiter, so the runtime skips them all when the slot frees.
	if e.reset != nil {
		close(e.reset)
		e.reset = nil
		// Every registered waiter is leaving with ErrReset: out of the
		// registry now, so the key is free for newcomers at once.
		res.Refused = len(e.waiters)
		t.waiting.Add(-int64(len(e.waiters)))
		clear(e.waiters)
	}
	drop := false
	if held {
		drop = t.release(e)
		res.Released = 1
	}
	e.mu.Unlock()
	if drop {
		t.unref(e)
	}
	return res, nil
}

// ResetBySource first withdraws every waiter of source, on any key, with
// ErrSourceReset, then releases every key that source holds; each passes to
// its next live waiter as on Unlock. A key whose release cannot be recorded
// stays held; the first such error is returned after the others are done.
func (t *Table) ResetBySource(source string) (ResetResult, error) {
	var res ResetResult
	t.eachEntry(func(e *entry) {
		e.mu.Lock()
		for _, r := range e.waiters {
			if r.Source == source {
				close(r.cancel)
				t.dropWaiter(e, r) // deleting during range is allowed
				res.Refused++
			}
		}
		e.mu.Unlock()
	})
	var errs []error
	t.eachEntry(func(e *entry) {
		e.mu.Lock()
		if e.holder == nil || e.holder.Source != source {
			e.mu.Unlock()
			return
		}
		if err := t.journal.Release(e.key); err != nil {
			e.mu.Unlock()
			errs = append(errs, fmt.Errorf("%w: reset source %q, key %q: %w", ErrJournal, source, e.key, err))
			return
		}
		drop := t.release(e)
		e.mu.Unlock()
		res.Released++
		if drop {
			t.unref(e)
		}
	})
	if len(errs) > 0 {
		return res, errs[0]
	}
	return res, nil
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
			s.drop(e)
		}
		s.mu.Unlock()
	}
}

// Restore marks key as held by h since the given time. It is meant for
// rebuilding the table from a journal before serving, and does not call
// the journal. It fails if the key is held.
func (t *Table) Restore(key string, h Holder, since time.Time) error {
	if key == "" {
		return ErrEmptyKey
	}
	e := t.ref(key)
	r := &request{id: t.nextID.Add(1), Holder: h, since: since}
	select {
	case e.slot <- r:
	default:
		t.unref(e)
		return fmt.Errorf("restore %q: %w", key, ErrLocked)
	}
	e.mu.Lock()
	e.holder = r
	e.mu.Unlock()
	t.held.Add(1)
	return nil
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
	// Holder and Since describe the holder and when it was granted the key.
	Holder Holder
	Since  time.Time
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
}

// Stats returns the table's totals without walking it.
func (t *Table) Stats() Stats {
	return Stats{Held: int(t.held.Load()), Waiting: int(t.waiting.Load())}
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
	defer t.unref(e)
	return e.info(true)
}

func (e *entry) info(withQueue bool) (KeyInfo, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.holder == nil {
		return KeyInfo{}, false
	}
	ki := KeyInfo{Key: e.key, Holder: e.holder.Holder, Since: e.holder.since}
	var queue []*request
	for _, r := range e.waiters {
		ki.Waiters++
		if ki.OldestWaiter.IsZero() || r.since.Before(ki.OldestWaiter) {
			ki.OldestWaiter = r.since
		}
		if withQueue {
			queue = append(queue, r)
		}
	}
	if withQueue {
		// Registration order is queue order: ids grow with arrival and each
		// waiter parks right after it registers.
		slices.SortFunc(queue, func(a, b *request) int { return cmp.Compare(a.id, b.id) })
		ki.Queue = make([]Waiter, len(queue))
		for i, r := range queue {
			ki.Queue[i] = Waiter{Holder: r.Holder, Since: r.since}
		}
	}
	return ki, true
}
