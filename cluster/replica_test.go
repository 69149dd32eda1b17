package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// TestReplica: a follower's table shows the FSM's holds with their tokens
// and sessions, says which index it shows (raft's, when no command came
// after the table's), and is rebuilt when entries were applied.
func TestReplica(t *testing.T) {
	f := NewFSM(quietLog())
	var raftIndex uint64
	r := &Replica{fsm: f, raftApplied: func() uint64 { return raftIndex }}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(applyAt(f, 3, 2, &Entry{Kind: KindOpen, Term: 2, Session: 7, Source: "svc", Remote: "r", TTL: 30 * time.Second}))
	must(applyAt(f, 4, 2, &Entry{Kind: KindBatch, Term: 2, Changes: []locker.Change{grant("a", 100, 0), grant("b", 101, 7)}}))
	raftIndex = 6 // a barrier and a configuration after the commands: no state changes

	tb, index := r.Table()
	if index != 6 {
		t.Fatalf("index %d, want raft's 6", index)
	}
	ki, ok := tb.Key("b")
	if !ok || ki.Token != 101 || ki.Holder.Session != 7 || ki.Holder.Source != "svc" {
		t.Fatalf("b: %+v %v", ki, ok)
	}
	if st := tb.Stats(); st.Held != 2 || st.Sessions != 1 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
	if again, _ := r.Table(); again != tb {
		t.Fatal("rebuilt with nothing applied since")
	}
	raftIndex = 7
	if _, index := r.Table(); index != 7 {
		t.Fatalf("index %d after a barrier, want 7", index)
	}

	must(applyAt(f, 8, 2, &Entry{Kind: KindBatch, Term: 2, Changes: []locker.Change{{Key: "a", Token: 100}}}))
	raftIndex = 8
	r.built = time.Time{} // as if the last build were old enough
	tb2, index := r.Table()
	if tb2 == tb || index != 8 {
		t.Fatalf("not rebuilt after an entry: index %d", index)
	}
	if _, held := tb2.Key("a"); held {
		t.Fatal("a released at 8 still shown")
	}
	// A table kept while entries arrive (rebuilds are rate-limited) shows
	// the index of its own last command, not raft's.
	r.took = time.Hour
	r.built = time.Now()
	must(applyAt(f, 9, 2, &Entry{Kind: KindBatch, Term: 2, Changes: []locker.Change{grant("c", 102, 0)}}))
	raftIndex = 9
	if tb3, index := r.Table(); tb3 != tb2 || index != 8 {
		t.Fatalf("a rate-limited replica says index %d (rebuilt: %v), want 8", index, tb3 != tb2)
	}
}

// BenchmarkReplicaBuild100k is what a follower pays to rebuild its table
// of 100,000 holds after entries were applied.
func BenchmarkReplicaBuild100k(b *testing.B) {
	f := NewFSM(quietLog())
	var batch []locker.Change
	for i := range 100_000 {
		batch = append(batch, grant(fmt.Sprintf("key/%06d", i), uint64(1000+i), 0))
	}
	if err := applyAt(f, 2, 1, &Entry{Kind: KindBatch, Term: 1, Changes: batch}); err != nil {
		b.Fatal(err)
	}
	r := &Replica{fsm: f, raftApplied: func() uint64 { return 2 }}
	b.ReportAllocs()
	for b.Loop() {
		r.table, r.built = nil, time.Time{}
		if t, _ := r.Table(); t.Stats().Held != 100_000 {
			b.Fatal("not every hold")
		}
	}
}
