package cluster

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/locking-center/locking-center/locker"
)

// table is a State's contents, comparable across nodes.
type table struct {
	Holds    map[string]locker.Grant
	Sessions map[locker.SessionID]locker.SessionRecord
	High     uint64
}

func dump(f *FSM) (t table, applied uint64) {
	t = table{Holds: map[string]locker.Grant{}, Sessions: map[locker.SessionID]locker.SessionRecord{}}
	f.View(func(s *locker.State, a uint64) {
		s.Each(func(k string, g locker.Grant) bool {
			g.Since = time.Unix(0, g.Since.UnixNano()) // drop the monotonic reading
			t.Holds[k] = g
			return true
		})
		s.EachSession(func(id locker.SessionID, r locker.SessionRecord) bool { t.Sessions[id] = r; return true })
		t.High = s.HighToken()
		applied = a
	})
	return t, applied
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// applyAt applies e as raft would: stored at index under term.
func applyAt(f *FSM, index, term uint64, e *Entry) error {
	r := f.Apply(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: Encode(e)})
	if r == nil {
		return nil
	}
	return r.(error)
}

func grant(key string, token uint64, sess locker.SessionID) locker.Change {
	c := locker.Change{Key: key, Token: token, Grant: true, Holder: locker.Holder{Source: "svc", Remote: "10.0.0.1:1", Session: sess},
		Since: time.Unix(1_700_000_000, int64(token%1000))}
	if sess != 0 {
		c.TTL = 30 * time.Second
		c.Holder.Origin = locker.Origin{Action: locker.OriginLock, ID: uint32(token)}
	}
	return c
}

func TestFSMAppliesSkipsAndRefuses(t *testing.T) {
	f := NewFSM(quietLog())
	steps := []struct {
		name string
		term uint64
		e    *Entry
		want error // nil, ErrStaleTerm or locker.ErrContradiction
	}{
		{"open", 2, &Entry{Kind: KindOpen, Term: 2, Session: 7, Source: "svc", Remote: "r", TTL: 30 * time.Second}, nil},
		{"grants", 2, &Entry{Kind: KindBatch, Term: 2, Changes: []locker.Change{grant("a", 100, 0), grant("b", 101, 7)}}, nil},
		{"planned in an earlier term", 3, &Entry{Kind: KindBatch, Term: 2, Changes: []locker.Change{grant("c", 102, 0)}}, ErrStaleTerm},
		{"grant of a held key", 3, &Entry{Kind: KindBatch, Term: 3, Changes: []locker.Change{grant("c", 103, 0), grant("a", 104, 0)}}, locker.ErrContradiction},
		{"release naming no token", 3, &Entry{Kind: KindBatch, Term: 3, Changes: []locker.Change{{Key: "a"}}}, locker.ErrContradiction},
		{"grant to a session never opened", 3, &Entry{Kind: KindBatch, Term: 3, Changes: []locker.Change{grant("d", 105, 8)}}, locker.ErrContradiction},
		{"end with a hold left", 3, &Entry{Kind: KindEnd, Term: 3, Session: 7}, locker.ErrContradiction},
		{"import into a full table", 3, &Entry{Kind: KindImport, Term: 3}, locker.ErrContradiction},
		{"handover", 3, &Entry{Kind: KindBatch, Term: 3, Changes: []locker.Change{{Key: "a", Token: 100}, grant("a", 106, 0)}}, nil},
		{"resume", 3, &Entry{Kind: KindResume, Term: 3, Session: 7, Remote: "r2"}, nil},
		{"end with its release", 3, &Entry{Kind: KindEnd, Term: 3, Session: 7, Changes: []locker.Change{{Key: "b", Token: 101}}}, nil},
	}
	for i, st := range steps {
		before, _ := dump(f)
		err := applyAt(f, uint64(i+1), st.term, st.e)
		switch {
		case st.want == nil && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.want != nil && (!errors.Is(err, st.want) || !errors.Is(err, ErrNotApplied)):
			t.Fatalf("%s: Apply = %v; want %v (and ErrNotApplied)", st.name, err, st.want)
		case st.want != nil:
			if after, _ := dump(f); !reflect.DeepEqual(before, after) {
				t.Fatalf("%s: a refused entry changed the state:\n%+v\n%+v", st.name, before, after)
			}
		}
	}
	got, applied := dump(f)
	if applied != uint64(len(steps)) || len(got.Holds) != 1 || got.Holds["a"].Token != 106 || len(got.Sessions) != 0 || got.High != 106 {
		t.Fatalf("final state at %d: %+v", applied, got)
	}
	if r := f.Apply(&raft.Log{Index: 99, Term: 3, Type: raft.LogCommand, Data: []byte{1, 2, 3}}); !errors.Is(r.(error), ErrNotApplied) {
		t.Fatalf("garbage entry: %v", r)
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.canceled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

func TestFSMSnapshotRestore(t *testing.T) {
	f := NewFSM(quietLog())
	imp := &Entry{Kind: KindImport, Term: 1, Floor: 5000,
		Sessions: []ImportSession{{ID: 7, Source: "svc", Remote: "r", TTL: time.Minute}, {ID: 8, Source: "idle", Remote: "r8", TTL: time.Second}},
		Holds:    []ImportHold{{Key: "a", Grant: locker.Grant{Token: 10, Holder: locker.Holder{Source: "v1"}}}, {Key: "b", Grant: locker.Grant{Token: 11, Holder: locker.Holder{Session: 7}, TTL: time.Minute}}}}
	if err := applyAt(f, 1, 1, imp); err != nil {
		t.Fatal(err)
	}
	if err := applyAt(f, 2, 1, &Entry{Kind: KindBatch, Term: 1, Changes: []locker.Change{grant("c", 5001, 7)}}); err != nil {
		t.Fatal(err)
	}
	want, _ := dump(f)
	if want.High != 5001 || len(want.Sessions) != 2 || want.Sessions[7].Holds != 2 {
		t.Fatalf("after the import: %+v", want)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot is taken at once: what is applied after it is not in it.
	if err := applyAt(f, 3, 1, &Entry{Kind: KindBatch, Term: 1, Changes: []locker.Change{grant("d", 5002, 0)}}); err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("Persist: %v, closed %v", err, sink.closed)
	}
	snap.Release()
	g := NewFSM(quietLog())
	if err := applyAt(g, 1, 1, &Entry{Kind: KindBatch, Term: 1, Changes: []locker.Change{grant("old", 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	got, applied := dump(g)
	if !reflect.DeepEqual(got, want) || applied != 2 {
		t.Fatalf("restored at %d:\n%+v\nwant\n%+v", applied, got, want)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()[:sink.Len()-1]))); err == nil {
		t.Fatal("a cut snapshot was restored")
	}
	if after, _ := dump(g); !reflect.DeepEqual(after, want) {
		t.Fatal("a refused snapshot changed the state")
	}
}
