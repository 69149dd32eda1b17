package locker

import (
	"errors"
	"fmt"
	"time"
)

// MaxToken is the largest fencing token a State accepts: tokens never
// wrap, and stay positive where a client keeps them in a signed integer.
const MaxToken = 1<<63 - 1

// Session TTL bounds (docs/protocol.md): a session grant whose TTL is
// outside them contradicts every State.
const (
	MinSessionTTL = time.Second
	MaxSessionTTL = 10 * time.Minute
)

// ErrContradiction is wrapped by State.Apply's refusal of a change that
// cannot follow the ones applied before it. The engine never makes one: a
// journal that holds one is damaged, or the engine has a bug.
var ErrContradiction = errors.New("change contradicts the table")

// State is the durable part of the lock table: every held key with its
// grant, the sessions that hold keys or were opened, and the highest token
// ever handed out. It changes only through Apply, ApplyBatch, Raise,
// OpenSession, ResumeSession, EndSession and (for a log written before
// tokens) Retoken, and is a pure function of
// what was applied, in order: it reads no clock, draws no random number,
// knows no connection and has no lock of its own (its owner applies one
// change at a time). That is what lets a journal's replay, its compaction
// snapshot and the check of the engine's own journal fold records with one
// function, which refuses what contradicts it.
//
// Queues, pending requests, connections, TTL deadlines and expiry are not
// in it: they are the engine's, and none of them survives a restart.
type State struct {
	holds map[string]Grant
	// sessions holds every session the State knows: one that holds keys
	// (all a single node's log knows of sessions), or one opened by
	// OpenSession and not ended (a cluster's log records opens and ends).
	sessions map[SessionID]SessionRecord
	high     uint64
	// peak is the largest len(holds) since holds was last rebuilt: Go maps
	// never give back their buckets, so a State that shrinks far below its
	// peak copies holds into a map of its size (as the Table's shards do).
	peak int
}

// SessionRecord is a session as a State keeps it.
type SessionRecord struct {
	// Source, Remote and TTL are those of the open, or, for a session
	// known only by its holds, of the grant that made it known.
	Source string
	Remote string
	TTL    time.Duration
	// Holds counts the keys the session holds.
	Holds int
	// Open is true for a session opened by OpenSession: it stays in the
	// State without holds until EndSession. A session known only by its
	// holds leaves the State with its last hold.
	Open bool
}

// Grant is a held key as a State keeps it.
type Grant struct {
	Token  uint64
	Holder Holder
	Since  time.Time
	// TTL is the TTL of the holding session; 0 for a v1 hold.
	TTL time.Duration
}

// NewState returns an empty State with room for about n held keys.
func NewState(n int) *State {
	return &State{holds: make(map[string]Grant, n), sessions: make(map[SessionID]SessionRecord)}
}

// Apply applies one change: a grant of a free key, or the release of a
// key's current grant (token 0: whatever grant it has). A change that
// contradicts the State — a grant of a key held under another token, a
// session grant with a TTL outside MinSessionTTL … MaxSessionTTL, a
// release of a key that is not held or is held under another token, a
// token above MaxToken — is refused with an error wrapping
// ErrContradiction, and changes nothing.
//
// A grant of token 0 is a grant from a log written before tokens
// existed; it takes no part in the highest token.
func (s *State) Apply(c Change) error {
	if err := s.check(c); err != nil {
		return fmt.Errorf("%w: %w", ErrContradiction, err)
	}
	s.apply(c)
	return nil
}

// apply applies c, which check accepted.
func (s *State) apply(c Change) {
	if c.Grant {
		s.holds[c.Key] = Grant{Token: c.Token, Holder: c.Holder, Since: c.Since, TTL: c.TTL}
		s.peak = max(s.peak, len(s.holds))
		if id := c.Holder.Session; id != 0 {
			r, ok := s.sessions[id]
			if !ok {
				r = SessionRecord{Source: c.Holder.Source, Remote: c.Holder.Remote, TTL: c.TTL}
			}
			r.Holds++
			s.sessions[id] = r
		}
		s.high = max(s.high, c.Token)
		return
	}
	g := s.holds[c.Key]
	delete(s.holds, c.Key)
	if s.peak >= 1024 && len(s.holds) < s.peak/4 {
		m := make(map[string]Grant, len(s.holds))
		for k, v := range s.holds {
			m[k] = v
		}
		s.holds, s.peak = m, len(m)
	}
	if id := g.Holder.Session; id != 0 {
		r := s.sessions[id]
		if r.Holds--; r.Holds <= 0 && !r.Open {
			delete(s.sessions, id)
		} else {
			s.sessions[id] = r
		}
	}
	s.high = max(s.high, c.Token)
}

// undo is what one applied change replaced, so that ApplyBatch can put it
// back exactly.
type undo struct {
	key     string
	grant   Grant
	held    bool
	session SessionID
	record  SessionRecord
	known   bool
}

// ApplyBatch applies batch in order and then, if end is not 0, ends that
// session (see EndSession): all of it or nothing. A batch is what one
// journal commit covers — a release and the grant it hands over, a
// session's end with all its releases — so a change of it that is refused
// takes back the ones before it, and the error wraps ErrContradiction.
func (s *State) ApplyBatch(batch []Change, end SessionID) error {
	if len(batch) == 1 && end == 0 {
		return s.Apply(batch[0]) // nothing to take back: checked before applied
	}
	high := s.high
	done := make([]undo, 0, len(batch))
	for i, c := range batch {
		if err := s.check(c); err != nil {
			s.rollback(done, high)
			return fmt.Errorf("%w: change %d of %d: %w", ErrContradiction, i+1, len(batch), err)
		}
		u := undo{key: c.Key}
		u.grant, u.held = s.holds[c.Key]
		if c.Grant {
			u.session = c.Holder.Session
		} else {
			u.session = u.grant.Holder.Session
		}
		if u.session != 0 {
			u.record, u.known = s.sessions[u.session]
		}
		s.apply(c)
		done = append(done, u)
	}
	if end != 0 {
		if err := s.EndSession(end); err != nil {
			s.rollback(done, high)
			return err
		}
	}
	return nil
}

// rollback takes back the changes done recorded, last first.
func (s *State) rollback(done []undo, high uint64) {
	for i := len(done) - 1; i >= 0; i-- {
		u := done[i]
		if u.held {
			s.holds[u.key] = u.grant
		} else {
			delete(s.holds, u.key)
		}
		if u.session != 0 {
			if u.known {
				s.sessions[u.session] = u.record
			} else {
				delete(s.sessions, u.session)
			}
		}
	}
	s.high = high
}

// OpenSession records the open of session id from source at remote with
// a TTL of ttl. An id of 0, a TTL outside MinSessionTTL … MaxSessionTTL or
// an id the State already knows is refused with an error wrapping
// ErrContradiction (ids are 64 random bits: the engine never opens one
// twice), and changes nothing.
func (s *State) OpenSession(id SessionID, source, remote string, ttl time.Duration) error {
	switch _, known := s.sessions[id]; {
	case id == 0:
		return fmt.Errorf("%w: open of session 0", ErrContradiction)
	case ttl < MinSessionTTL || ttl > MaxSessionTTL:
		return fmt.Errorf("%w: open of session %s with a TTL of %v, outside %v … %v", ErrContradiction, id, ttl, MinSessionTTL, MaxSessionTTL)
	case known:
		return fmt.Errorf("%w: open of session %s, which is already known", ErrContradiction, id)
	}
	s.sessions[id] = SessionRecord{Source: source, Remote: remote, TTL: ttl, Open: true}
	return nil
}

// ResumeSession records that open session id now speaks from remote. A
// session that is not open is refused with an error wrapping
// ErrContradiction.
func (s *State) ResumeSession(id SessionID, remote string) error {
	r, ok := s.sessions[id]
	if !ok || !r.Open {
		return fmt.Errorf("%w: resume of session %s, which is not open", ErrContradiction, id)
	}
	r.Remote = remote
	s.sessions[id] = r
	return nil
}

// EndSession records the end of open session id, which must hold nothing
// by then (its releases come first, in the same batch: see ApplyBatch).
// Otherwise it is refused with an error wrapping ErrContradiction, and
// changes nothing.
func (s *State) EndSession(id SessionID) error {
	r, ok := s.sessions[id]
	switch {
	case !ok || !r.Open:
		return fmt.Errorf("%w: end of session %s, which is not open", ErrContradiction, id)
	case r.Holds > 0:
		return fmt.Errorf("%w: end of session %s, which still holds %d keys", ErrContradiction, id, r.Holds)
	}
	delete(s.sessions, id)
	return nil
}

// Session returns session id's record; ok is false when the State does not
// know it.
func (s *State) Session(id SessionID) (r SessionRecord, ok bool) {
	r, ok = s.sessions[id]
	return r, ok
}

// EachSession calls fn with every session the State knows, in no
// particular order, until fn returns false. fn must not change the State.
func (s *State) EachSession(fn func(id SessionID, r SessionRecord) bool) {
	for id, r := range s.sessions {
		if !fn(id, r) {
			return
		}
	}
}

// check says why c cannot follow what was applied, or nil.
func (s *State) check(c Change) error {
	if c.Token > MaxToken {
		return fmt.Errorf("token %d is 2^63 or more: tokens would wrap", c.Token)
	}
	old, held := s.holds[c.Key]
	if c.Grant {
		if held && old.Token != c.Token {
			return fmt.Errorf("grant of key %q under token %d while it is held under token %d, with no release between", c.Key, c.Token, old.Token)
		}
		if held {
			return fmt.Errorf("grant of key %q under token %d, which already holds it", c.Key, c.Token)
		}
		if c.Holder.Session != 0 && (c.TTL < MinSessionTTL || c.TTL > MaxSessionTTL) {
			return fmt.Errorf("grant of key %q to a session with a TTL of %v, outside %v … %v", c.Key, c.TTL, MinSessionTTL, MaxSessionTTL)
		}
		return nil
	}
	if !held {
		return fmt.Errorf("release of key %q under token %d, which is not held", c.Key, c.Token)
	}
	if c.Token != 0 && c.Token != old.Token {
		return fmt.Errorf("release of key %q under token %d, while its current grant is token %d", c.Key, c.Token, old.Token)
	}
	return nil
}

// Raise records that every token handed out so far is at most token (a
// journal's mark): the highest token never goes down. A token above
// MaxToken is refused with an error wrapping ErrContradiction.
func (s *State) Raise(token uint64) error {
	if token > MaxToken {
		return fmt.Errorf("%w: token %d is 2^63 or more: tokens would wrap", ErrContradiction, token)
	}
	s.high = max(s.high, token)
	return nil
}

// Retoken gives key's grant the token token: a grant restored from a log
// written before tokens existed gets its token from the engine that
// restores it. It reports false when key is not held.
func (s *State) Retoken(key string, token uint64) bool {
	g, ok := s.holds[key]
	if !ok {
		return false
	}
	g.Token = token
	s.holds[key] = g
	s.high = max(s.high, token)
	return true
}

// Held returns key's grant; ok is false when key is free.
func (s *State) Held(key string) (g Grant, ok bool) {
	g, ok = s.holds[key]
	return g, ok
}

// Len returns how many keys are held.
func (s *State) Len() int { return len(s.holds) }

// Sessions returns how many sessions the State knows: those that hold
// keys, and those opened and not ended.
func (s *State) Sessions() int { return len(s.sessions) }

// HighToken returns the highest token applied or raised to.
func (s *State) HighToken() uint64 { return s.high }

// Each calls fn with every held key, in no particular order, until fn
// returns false. fn must not change the State.
func (s *State) Each(fn func(key string, g Grant) bool) {
	for k, g := range s.holds {
		if !fn(k, g) {
			return
		}
	}
}

// Clear empties the State but for its highest token.
func (s *State) Clear() {
	clear(s.holds)
	clear(s.sessions)
}
