package cluster

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// sample entries of every kind, with every field set somewhere.
func sampleEntries() []*Entry {
	since := time.Unix(1_700_000_000, 123456789)
	v1 := locker.Change{Key: "orders/17", Token: 1_800_000_000_000_001, Grant: true,
		Holder: locker.Holder{Source: "billing", Remote: "10.0.0.7:5123"}, Since: since}
	sess := locker.Change{Key: "ключ", Token: 1 << 62, Grant: true,
		Holder: locker.Holder{Source: "svc", Remote: "[::1]:9", Session: 0xdeadbeefcafef00d, Origin: locker.Origin{Action: locker.OriginTryLock, ID: 1<<32 - 1}},
		Since:  since, TTL: 30 * time.Second}
	rel := locker.Change{Key: "orders/17", Token: 1_800_000_000_000_001}
	return []*Entry{
		{Kind: KindBatch, Term: 3, Changes: []locker.Change{rel, v1}},
		{Kind: KindBatch, Term: 1 << 40, Changes: []locker.Change{{Key: "z", Token: 1, Grant: true}}},
		{Kind: KindOpen, Term: 4, Session: 0xdeadbeefcafef00d, Source: "svc", Remote: "[::1]:9", TTL: time.Minute},
		{Kind: KindResume, Term: 5, Session: 0xdeadbeefcafef00d, Remote: "10.1.1.1:1"},
		{Kind: KindEnd, Term: 6, Session: 0xdeadbeefcafef00d, Changes: []locker.Change{{Key: "ключ", Token: 1 << 62}, v1}},
		{Kind: KindImport, Term: 1, Floor: 1_800_000_000_000_100,
			Sessions: []ImportSession{{ID: 0xdeadbeefcafef00d, Source: "svc", Remote: "[::1]:9", TTL: 30 * time.Second}},
			Holds: []ImportHold{{Key: v1.Key, Grant: locker.Grant{Token: v1.Token, Holder: v1.Holder, Since: since}},
				{Key: sess.Key, Grant: locker.Grant{Token: sess.Token, Holder: sess.Holder, Since: since, TTL: sess.TTL}}}},
	}
}

// equalEntry compares entries field by field, times by Equal (a decoded
// time has no monotonic reading).
func equalEntry(a, b *Entry) bool {
	norm := func(e *Entry) *Entry {
		c := *e
		c.Changes = append([]locker.Change(nil), e.Changes...)
		for i := range c.Changes {
			c.Changes[i].Since = time.Unix(0, c.Changes[i].Since.UnixNano())
			if e.Changes[i].Since.IsZero() {
				c.Changes[i].Since = time.Time{}
			}
		}
		c.Holds = append([]ImportHold(nil), e.Holds...)
		for i := range c.Holds {
			if !c.Holds[i].Grant.Since.IsZero() {
				c.Holds[i].Grant.Since = time.Unix(0, c.Holds[i].Grant.Since.UnixNano())
			}
		}
		if len(c.Changes) == 0 {
			c.Changes = nil
		}
		if len(c.Holds) == 0 {
			c.Holds = nil
		}
		if len(c.Sessions) == 0 {
			c.Sessions = nil
		}
		return &c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range sampleEntries() {
		b := Encode(e)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("kind %d: %v", e.Kind, err)
		}
		if !equalEntry(e, got) {
			t.Errorf("kind %d: decoded\n%+v\nwant\n%+v", e.Kind, got, e)
		}
		// Every strict prefix is refused: nothing is taken on trust.
		for i := range b {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrBadEntry) {
				t.Fatalf("kind %d: prefix of %d/%d bytes: %v", e.Kind, i, len(b), err)
			}
		}
		if _, err := Decode(append(b, 0)); !errors.Is(err, ErrBadEntry) {
			t.Errorf("kind %d: a trailing byte was accepted", e.Kind)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":         nil,
		"version 2":     {2, 1, 0, 0},
		"unknown kind":  {1, 9, 0},
		"huge count":    {1, byte(KindBatch), 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge key":      {1, byte(KindBatch), 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"grant flag 2":  {1, byte(KindBatch), 0, 1, 2, 0, 0},
		"import count":  {1, byte(KindImport), 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad term":      {1, byte(KindBatch), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"short session": {1, byte(KindOpen), 0, 1, 2, 3},
	} {
		if _, err := Decode(b); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: Decode = %v; want ErrBadEntry", name, err)
		}
	}
}

// FuzzDecode: Decode never panics, and what it accepts encodes to bytes
// that decode to the same entry and encode again to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, e := range sampleEntries() {
		f.Add(Encode(e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("error not wrapping ErrBadEntry: %v", err)
			}
			return
		}
		b2 := Encode(e)
		e2, err := Decode(b2)
		if err != nil {
			t.Fatalf("re-encoded entry refused: %v", err)
		}
		if !equalEntry(e, e2) {
			t.Fatalf("round trip changed the entry:\n%+v\n%+v", e, e2)
		}
		if b3 := Encode(e2); !bytes.Equal(b2, b3) {
			t.Fatalf("encoding is not stable")
		}
	})
}
