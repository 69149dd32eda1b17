package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// Kind says what a raft entry of the lock table carries.
type Kind byte

// The kinds of entry.
const (
	// KindBatch is one engine batch: what one fsync covers on a single node.
	KindBatch Kind = 1
	// KindOpen opens a session.
	KindOpen Kind = 2
	// KindResume moves an open session to another address.
	KindResume Kind = 3
	// KindEnd is a session's end with the batch of its releases (and the
	// grants they hand over).
	KindEnd Kind = 4
	// KindImport carries a single node's table into an empty cluster: every
	// session, every hold and the token floor. A snapshot is one too.
	KindImport Kind = 5
)

// entryVersion is the first byte of every entry and snapshot: a node that
// meets a version it does not know refuses the entry rather than guess.
const entryVersion = 1

// Entry is one raft entry of the lock table.
type Entry struct {
	Kind Kind
	// Term is the raft term in which the leader's engine planned the entry;
	// the FSM skips the entry when raft stored it under another term.
	Term uint64
	// Changes is the batch of KindBatch and KindEnd.
	Changes []locker.Change
	// Session is the session KindOpen opens, KindResume moves and KindEnd
	// ends; Source, Remote and TTL those of an open, Remote that of a resume.
	Session locker.SessionID
	Source  string
	Remote  string
	TTL     time.Duration
	// Sessions, Holds and Floor are KindImport's: the open sessions, every
	// held key, and a token every later grant's token is above.
	Sessions []ImportSession
	Holds    []ImportHold
	Floor    uint64
}

// ImportSession is one open session of an import.
type ImportSession struct {
	ID     locker.SessionID
	Source string
	Remote string
	TTL    time.Duration
}

// ImportHold is one held key of an import.
type ImportHold struct {
	Key   string
	Grant locker.Grant
}

// Encode returns e's bytes: the version, the kind, the term, then what the
// kind carries, as unsigned varints, length-prefixed strings and
// fixed-width session ids.
func Encode(e *Entry) []byte {
	b := make([]byte, 0, 64+len(e.Changes)*48+len(e.Holds)*48)
	b = append(b, entryVersion, byte(e.Kind))
	b = binary.AppendUvarint(b, e.Term)
	switch e.Kind {
	case KindBatch:
		b = appendChanges(b, e.Changes)
	case KindOpen:
		b = binary.BigEndian.AppendUint64(b, uint64(e.Session))
		b = appendString(b, e.Source)
		b = appendString(b, e.Remote)
		b = appendDuration(b, e.TTL)
	case KindResume:
		b = binary.BigEndian.AppendUint64(b, uint64(e.Session))
		b = appendString(b, e.Remote)
	case KindEnd:
		b = binary.BigEndian.AppendUint64(b, uint64(e.Session))
		b = appendChanges(b, e.Changes)
	case KindImport:
		b = binary.AppendUvarint(b, e.Floor)
		b = binary.AppendUvarint(b, uint64(len(e.Sessions)))
		for _, s := range e.Sessions {
			b = binary.BigEndian.AppendUint64(b, uint64(s.ID))
			b = appendString(b, s.Source)
			b = appendString(b, s.Remote)
			b = appendDuration(b, s.TTL)
		}
		b = binary.AppendUvarint(b, uint64(len(e.Holds)))
		for _, h := range e.Holds {
			b = appendChange(b, locker.Change{Key: h.Key, Token: h.Grant.Token, Grant: true,
				Holder: h.Grant.Holder, Since: h.Grant.Since, TTL: h.Grant.TTL})
		}
	}
	return b
}

func appendChanges(b []byte, cs []locker.Change) []byte {
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for _, c := range cs {
		b = appendChange(b, c)
	}
	return b
}

// appendChange writes a release as its flag, key and token, and a grant
// with its holder, since and TTL after them.
func appendChange(b []byte, c locker.Change) []byte {
	if !c.Grant {
		b = append(b, 0)
		b = appendString(b, c.Key)
		return binary.AppendUvarint(b, c.Token)
	}
	b = append(b, 1)
	b = appendString(b, c.Key)
	b = binary.AppendUvarint(b, c.Token)
	b = appendString(b, c.Holder.Source)
	b = appendString(b, c.Holder.Remote)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Holder.Session))
	b = append(b, c.Holder.Origin.Action)
	b = binary.AppendUvarint(b, uint64(c.Holder.Origin.ID))
	// since travels as Unix nanoseconds, the zero time as a flag: apply
	// must not read a clock, and the zero time has no Unix nanoseconds.
	if c.Since.IsZero() {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.AppendVarint(b, c.Since.UnixNano())
	}
	return appendDuration(b, c.TTL)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendDuration(b []byte, d time.Duration) []byte {
	return binary.AppendVarint(b, int64(d))
}

// ErrBadEntry wraps every refusal of Decode.
var ErrBadEntry = errors.New("malformed entry")

// Decode parses an entry made by Encode. Every count and length is checked
// against the bytes left before anything is allocated for it, so a short
// or hostile entry is refused with an error wrapping ErrBadEntry, never a
// panic or a huge allocation.
func Decode(b []byte) (*Entry, error) {
	d := decoder{b: b}
	e, err := d.entry()
	if err == nil && len(d.b) != 0 {
		err = fmt.Errorf("%d bytes after the entry", len(d.b))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadEntry, err)
	}
	return e, nil
}

// decoder reads b from the front.
type decoder struct {
	b []byte
}

// The fewest bytes a change, an import session and a hold take: they bound
// the counts an entry may claim.
const (
	minChange  = 1 + 1 + 1
	minSession = 8 + 1 + 1 + 1
	minHold    = 1 + 1 + 1 + 1 + 1 + 8 + 1 + 1 + 1 + 1
)

func (d *decoder) entry() (*Entry, error) {
	if len(d.b) < 2 {
		return nil, errors.New("shorter than its header")
	}
	if d.b[0] != entryVersion {
		return nil, fmt.Errorf("version %d, want %d", d.b[0], entryVersion)
	}
	e := &Entry{Kind: Kind(d.b[1])}
	d.b = d.b[2:]
	var err error
	if e.Term, err = d.uvarint(); err != nil {
		return nil, fmt.Errorf("term: %w", err)
	}
	switch e.Kind {
	case KindBatch:
		e.Changes, err = d.changes()
	case KindOpen:
		if e.Session, err = d.session(); err == nil {
			if e.Source, err = d.string(); err == nil {
				if e.Remote, err = d.string(); err == nil {
					e.TTL, err = d.duration()
				}
			}
		}
	case KindResume:
		if e.Session, err = d.session(); err == nil {
			e.Remote, err = d.string()
		}
	case KindEnd:
		if e.Session, err = d.session(); err == nil {
			e.Changes, err = d.changes()
		}
	case KindImport:
		err = d.importBody(e)
	default:
		return nil, fmt.Errorf("unknown kind %d", e.Kind)
	}
	if err != nil {
		return nil, err
	}
	return e, nil
}

func (d *decoder) importBody(e *Entry) error {
	var err error
	if e.Floor, err = d.uvarint(); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	n, err := d.count(minSession)
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	e.Sessions = make([]ImportSession, n)
	for i := range e.Sessions {
		s := &e.Sessions[i]
		if s.ID, err = d.session(); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		if s.Source, err = d.string(); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		if s.Remote, err = d.string(); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
		if s.TTL, err = d.duration(); err != nil {
			return fmt.Errorf("session %d: %w", i, err)
		}
	}
	if n, err = d.count(minHold); err != nil {
		return fmt.Errorf("holds: %w", err)
	}
	e.Holds = make([]ImportHold, n)
	for i := range e.Holds {
		c, err := d.change()
		if err != nil {
			return fmt.Errorf("hold %d: %w", i, err)
		}
		if !c.Grant {
			return fmt.Errorf("hold %d is a release", i)
		}
		e.Holds[i] = ImportHold{Key: c.Key, Grant: locker.Grant{Token: c.Token, Holder: c.Holder, Since: c.Since, TTL: c.TTL}}
	}
	return nil
}

func (d *decoder) changes() ([]locker.Change, error) {
	n, err := d.count(minChange)
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	cs := make([]locker.Change, n)
	for i := range cs {
		if cs[i], err = d.change(); err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
	}
	return cs, nil
}

func (d *decoder) change() (locker.Change, error) {
	var c locker.Change
	flag, err := d.byte()
	if err != nil {
		return c, err
	}
	if flag > 1 {
		return c, fmt.Errorf("grant flag %d", flag)
	}
	c.Grant = flag == 1
	if c.Key, err = d.string(); err != nil {
		return c, fmt.Errorf("key: %w", err)
	}
	if c.Token, err = d.uvarint(); err != nil {
		return c, fmt.Errorf("token: %w", err)
	}
	if !c.Grant {
		return c, nil
	}
	if c.Holder.Source, err = d.string(); err != nil {
		return c, fmt.Errorf("source: %w", err)
	}
	if c.Holder.Remote, err = d.string(); err != nil {
		return c, fmt.Errorf("remote: %w", err)
	}
	if c.Holder.Session, err = d.session(); err != nil {
		return c, err
	}
	if c.Holder.Origin.Action, err = d.byte(); err != nil {
		return c, fmt.Errorf("origin: %w", err)
	}
	id, err := d.uvarint()
	if err != nil || id > math.MaxUint32 {
		return c, fmt.Errorf("origin id: %v %w", id, err)
	}
	c.Holder.Origin.ID = uint32(id)
	hasSince, err := d.byte()
	if err != nil || hasSince > 1 {
		return c, fmt.Errorf("since flag %d: %w", hasSince, err)
	}
	if hasSince == 1 {
		ns, err := d.varint()
		if err != nil {
			return c, fmt.Errorf("since: %w", err)
		}
		c.Since = time.Unix(0, ns)
	}
	if c.TTL, err = d.duration(); err != nil {
		return c, fmt.Errorf("ttl: %w", err)
	}
	return c, nil
}

var errShort = errors.New("cut short")

func (d *decoder) byte() (byte, error) {
	if len(d.b) == 0 {
		return 0, errShort
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c, nil
}

func (d *decoder) uvarint() (uint64, error) {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		return 0, errors.New("bad varint")
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) varint() (int64, error) {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		return 0, errors.New("bad varint")
	}
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) duration() (time.Duration, error) {
	v, err := d.varint()
	return time.Duration(v), err
}

func (d *decoder) session() (locker.SessionID, error) {
	if len(d.b) < 8 {
		return 0, fmt.Errorf("session id: %w", errShort)
	}
	id := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return locker.SessionID(id), nil
}

// count reads a count of items of at least size bytes each, refusing one
// the bytes left cannot hold.
func (d *decoder) count(size int) (int, error) {
	n, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64(len(d.b)/size) {
		return 0, fmt.Errorf("count %d, but only %d bytes left", n, len(d.b))
	}
	return int(n), nil
}

func (d *decoder) string() (string, error) {
	n, err := d.uvarint()
	if err != nil {
		return "", err
	}
	if n > uint64(len(d.b)) {
		return "", fmt.Errorf("length %d, but only %d bytes left", n, len(d.b))
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s, nil
}
