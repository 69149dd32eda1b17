package locker

import (
	"errors"
	"testing"
	"time"
)

func TestStateAppliesAndRefuses(t *testing.T) {
	s := NewState(0)
	v1 := Change{Key: "a", Token: 10, Grant: true, Holder: Holder{Source: "svc"}, Since: time.Unix(1, 0)}
	sess := Change{Key: "b", Token: 11, Grant: true, Holder: Holder{Source: "svc", Session: 7, Origin: Origin{OriginLock, 3}}, TTL: time.Minute}
	for _, c := range []Change{v1, sess} {
		if err := s.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() != 2 || s.Sessions() != 1 || s.HighToken() != 11 {
		t.Fatalf("after two grants: %d held, %d sessions, high %d", s.Len(), s.Sessions(), s.HighToken())
	}
	for _, tc := range []struct {
		name string
		c    Change
	}{
		{"grant of a held key", Change{Key: "a", Token: 12, Grant: true}},
		{"the same grant again", v1},
		{"session TTL over 10 min", Change{Key: "c", Token: 12, Grant: true, Holder: Holder{Session: 8}, TTL: 49 * 24 * time.Hour}},
		{"session TTL under 1 s", Change{Key: "c", Token: 12, Grant: true, Holder: Holder{Session: 8}, TTL: time.Millisecond}},
		{"token of 2^63", Change{Key: "c", Token: 1 << 63, Grant: true}},
		{"release of a free key", Change{Key: "c", Token: 5}},
		{"release of another grant", Change{Key: "a", Token: 9}},
	} {
		if err := s.Apply(tc.c); !errors.Is(err, ErrContradiction) {
			t.Errorf("%s: Apply = %v; want ErrContradiction", tc.name, err)
		}
	}
	if s.Len() != 2 || s.HighToken() != 11 {
		t.Fatalf("a refused change changed the state: %d held, high %d", s.Len(), s.HighToken())
	}
	if err := s.Raise(1 << 63); !errors.Is(err, ErrContradiction) {
		t.Errorf("Raise(2^63) = %v", err)
	}
	if err := s.Raise(100); err != nil || s.HighToken() != 100 {
		t.Fatalf("Raise(100) = %v, high %d", err, s.HighToken())
	}
	if err := s.Apply(Change{Key: "b"}); err != nil { // token 0: whatever grant
		t.Fatal(err)
	}
	if err := s.Apply(Change{Key: "a", Token: 10}); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.Sessions() != 0 || s.HighToken() != 100 {
		t.Fatalf("after the releases: %d held, %d sessions, high %d", s.Len(), s.Sessions(), s.HighToken())
	}
}
