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
// grant, the sessions that hold keys, and the highest token ever handed
// out. It changes only through Apply, Raise and (for a log written before
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
	// sessions counts the keys each session holds: a session is in the
	// State while it holds something.
	sessions map[SessionID]int
	high     uint64
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
	return &State{holds: make(map[string]Grant, n), sessions: make(map[SessionID]int)}
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
	if c.Grant {
		s.holds[c.Key] = Grant{Token: c.Token, Holder: c.Holder, Since: c.Since, TTL: c.TTL}
		if c.Holder.Session != 0 {
			s.sessions[c.Holder.Session]++
		}
		s.high = max(s.high, c.Token)
		return nil
	}
	g := s.holds[c.Key]
	delete(s.holds, c.Key)
	if id := g.Holder.Session; id != 0 {
		if s.sessions[id]--; s.sessions[id] <= 0 {
			delete(s.sessions, id)
		}
	}
	s.high = max(s.high, c.Token)
	return nil
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

// Sessions returns how many sessions hold keys.
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
