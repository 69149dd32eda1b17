package locker

import (
	"context"
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

func TestStateBatchIsAllOrNothing(t *testing.T) {
	s := NewState(0)
	if err := s.OpenSession(7, "svc", "10.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	a := Change{Key: "a", Token: 10, Grant: true, Holder: Holder{Source: "svc", Session: 7}, TTL: time.Minute}
	if err := s.ApplyBatch([]Change{a}, 0); err != nil {
		t.Fatal(err)
	}
	// A handover of a followed by a release of a free key: the second is
	// refused, and the handover is taken back with it.
	bad := []Change{{Key: "a", Token: 10}, {Key: "a", Token: 11, Grant: true, Holder: Holder{Source: "v1"}}, {Key: "zz", Token: 3}}
	if err := s.ApplyBatch(bad, 0); !errors.Is(err, ErrContradiction) {
		t.Fatalf("ApplyBatch = %v; want ErrContradiction", err)
	}
	if g, ok := s.Held("a"); !ok || g.Token != 10 || g.Holder.Session != 7 || s.HighToken() != 10 {
		t.Fatalf("after a refused batch: a = %+v %v, high %d", g, ok, s.HighToken())
	}
	if r, _ := s.Session(7); r.Holds != 1 || !r.Open {
		t.Fatalf("session after a refused batch: %+v", r)
	}
	// An end while the session still holds a is refused, and so is the
	// release before it.
	if err := s.ApplyBatch([]Change{{Key: "a", Token: 10}, a}, 7); !errors.Is(err, ErrContradiction) {
		t.Fatalf("end with a hold left = %v", err)
	}
	if r, ok := s.Session(7); !ok || r.Holds != 1 {
		t.Fatalf("session after a refused end: %+v %v", r, ok)
	}
	if err := s.ResumeSession(7, "10.0.0.2:2"); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Session(7); r.Remote != "10.0.0.2:2" {
		t.Fatalf("resume did not move the session: %+v", r)
	}
	if err := s.ApplyBatch([]Change{{Key: "a", Token: 10}}, 7); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.Sessions() != 0 {
		t.Fatalf("after the end: %d held, %d sessions", s.Len(), s.Sessions())
	}
}

func TestStateSessionsRefuse(t *testing.T) {
	s := NewState(0)
	if err := s.OpenSession(1, "svc", "r", time.Minute); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"open of 0":           s.OpenSession(0, "svc", "r", time.Minute),
		"open twice":          s.OpenSession(1, "svc", "r", time.Minute),
		"open with a TTL 0":   s.OpenSession(2, "svc", "r", 0),
		"resume of unknown":   s.ResumeSession(3, "r"),
		"end of unknown":      s.EndSession(3),
		"open with TTL 1 day": s.OpenSession(4, "svc", "r", 24*time.Hour),
	} {
		if !errors.Is(err, ErrContradiction) {
			t.Errorf("%s: %v; want ErrContradiction", name, err)
		}
	}
	if s.Sessions() != 1 {
		t.Fatalf("refused opens changed the state: %d sessions", s.Sessions())
	}
	// An opened session stays without holds; one known by its holds only
	// leaves with its last.
	g := Change{Key: "k", Token: 5, Grant: true, Holder: Holder{Session: 9}, TTL: time.Minute}
	if err := s.Apply(g); err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Session(9); !ok || r.Open || r.Holds != 1 {
		t.Fatalf("session known by its hold: %+v %v", r, ok)
	}
	if err := s.Apply(Change{Key: "k", Token: 5}); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Session(9); ok || s.Sessions() != 1 {
		t.Fatalf("a session known by its hold outlived it: %d sessions", s.Sessions())
	}
}

// TestMemoryTableFoldsIntoState: a table kept in memory changes only by
// batches its own State accepts, so after grants, handovers, a session's
// end and a reset the State holds exactly the table's holds.
func TestMemoryTableFoldsIntoState(t *testing.T) {
	tb := New(Options{})
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := tb.Lock(ctx, k, Holder{Source: "v1"}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := tb.OpenSession("svc", "127.0.0.1:1", time.Minute, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock("d", 1); err != nil {
		t.Fatal(err)
	}
	handed := make(chan uint64, 1)
	if _, err := l.Lock("a", 2, func(tok uint64, err error) { handed <- tok }); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Unlock("a"); err != nil { // hands a over to the session
		t.Fatal(err)
	}
	tokA := <-handed
	if _, err := tb.ResetByKey("b"); err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]uint64) {
		t.Helper()
		got := map[string]uint64{}
		tb.Each(func(ki KeyInfo) bool { got[ki.Key] = ki.Token; return true })
		var state map[string]uint64
		if !tb.State(func(s *State) {
			state = map[string]uint64{}
			s.Each(func(key string, g Grant) bool { state[key] = g.Token; return true })
		}) {
			t.Fatal("a table in memory has no State")
		}
		if len(got) != len(want) || len(state) != len(want) {
			t.Fatalf("table %v, its State %v; want the keys of %v", got, state, want)
		}
		for k := range want {
			if got[k] != state[k] || (want[k] != 0 && got[k] != want[k]) {
				t.Fatalf("key %s: table token %d, State token %d, want %d", k, got[k], state[k], want[k])
			}
		}
	}
	check(map[string]uint64{"a": tokA, "c": 0, "d": 0})
	if _, err := l.Close(); err != nil { // releases a and d
		t.Fatal(err)
	}
	check(map[string]uint64{"c": 0})
}
