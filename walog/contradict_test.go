package walog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// writeLog writes a version 2 log of one record per batch of ops and
// returns its path and the offset of each record.
func writeLog(t *testing.T, batches ...[]op) (string, []int64) {
	t.Helper()
	b := appendHeader(nil)
	var offs []int64
	for _, ops := range batches {
		offs = append(offs, int64(len(b)))
		b, _ = appendRecords(b, ops)
	}
	path := filepath.Join(t.TempDir(), "locks.wal")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, offs
}

func testGrant(key string, token, session uint64, ttl time.Duration) op {
	return op{typ: typeGrant, key: key, token: token,
		h: Holder{Source: "svc", Remote: "10.0.0.1:5", Since: time.Unix(1700000000, 0), Token: token, Session: session, TTL: ttl}}
}

func releaseOp(key string, token uint64) op { return op{typ: typeRelease, key: key, token: token} }

// TestContradictingRecordsAreRefused replays logs whose records are each
// whole and checksummed but contradict the table before them: each must
// stop the start naming the file, the record's offset and what is wrong,
// instead of starting with a table that breaks its promises (the next
// grants wrapping to tokens 0 and 1, two holders of one key, a session
// that never expires).
func TestContradictingRecordsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  []op
		want string
	}{
		{"highest token 2^64-1", []op{testGrant("b", 1<<64-1, 0, 0)}, "2^63 or more"},
		{"a mark of 2^63", []op{{typ: typeMark, token: 1 << 63}}, "2^63 or more"},
		{"grant of a held key", []op{testGrant("a", 20, 0, 0)}, "held under token 10"},
		{"session TTL of 49 days", []op{testGrant("b", 20, 7, 49*24*time.Hour)}, "outside 1s"},
		{"session TTL under a second", []op{testGrant("b", 20, 7, 500*time.Millisecond)}, "outside 1s"},
		{"release of another grant", []op{releaseOp("a", 9)}, "current grant is token 10"},
		{"release of a free key", []op{releaseOp("b", 10)}, "not held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, offs := writeLog(t, []op{testGrant("a", 10, 0, 0)}, tc.bad)
			_, err := Open(path, Options{Logger: quiet()}, func(string, *Holder) error { return nil })
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v; want a CorruptError", err)
			}
			if ce.Path != path || ce.Offset != offs[1] || !strings.Contains(ce.Reason, tc.want) {
				t.Fatalf("refused as %v; want %s at offset %d, reason containing %q", err, path, offs[1], tc.want)
			}
		})
	}
}

// TestConsistentRecordsReplay is the other side: a grant, its release and
// a new grant, a session's hold with a TTL at each bound and a token just
// under 2^63 all start.
func TestConsistentRecordsReplay(t *testing.T) {
	path, _ := writeLog(t,
		[]op{testGrant("a", 10, 0, 0)},
		[]op{releaseOp("a", 10), testGrant("a", 11, 0, 0)},
		[]op{testGrant("s1", 12, 7, time.Second), testGrant("s2", 13, 7, 10*time.Minute)},
		[]op{{typ: typeMark, token: 1<<63 - 2}},
	)
	var got []string
	l, err := Open(path, Options{Logger: quiet()}, func(key string, h *Holder) error {
		got = append(got, fmt.Sprintf("%s=%d", key, h.Token))
		return nil
	})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer l.Close()
	if len(got) != 3 || l.HighToken() != 1<<63-2 {
		t.Fatalf("restored %v, high token %d", got, l.HighToken())
	}
}

// TestGrantKeepsItsRequest records a session grant with the request that
// made it, replays it, compacts the log and replays it again: the request
// survives both, so that it finds its grant after a restart (Reissue),
// and a v1 grant is written in the older form that has none.
func TestGrantKeepsItsRequest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	if err := l.Commit([]locker.Change{{Key: "s", Token: 50, Grant: true, Since: time.Now(), TTL: time.Minute,
		Holder: locker.Holder{Source: "svc", Remote: "10.0.0.1:5", Session: 99, Origin: locker.Origin{Action: locker.OriginTryLock, ID: 77}}}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire("v", Holder{Source: "v1", Token: 51, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, recs := scanRecords(t, path)
	if len(recs) != 2 || recs[0].ops[0].typ != typeGrantOrigin || recs[1].ops[0].typ != typeGrant {
		t.Fatalf("records %+v; want a grant with its request, then a v1 grant", recs)
	}
	check := func(when string) {
		t.Helper()
		got := map[string]Holder{}
		l2, err := Open(path, Options{Logger: quiet()}, func(key string, h *Holder) error { got[key] = *h; return nil })
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		defer l2.Close()
		if h := got["s"]; h.Action != locker.OriginTryLock || h.ID != 77 || h.Session != 99 || h.Token != 50 {
			t.Fatalf("%s: the session grant came back as %+v", when, h)
		}
		if h := got["v"]; h.Action != 0 || h.ID != 0 {
			t.Fatalf("%s: the v1 grant came back as %+v", when, h)
		}
	}
	check("replay")
	// Churn on another key until the log is compacted: what is left of
	// the two grants is then the compaction's snapshot.
	l3, _ := open(t, path, Options{CompactFloor: 512})
	for i := uint64(100); l3.Stats().Compactions == 0; i++ {
		if i > 10000 {
			t.Fatal("no compaction")
		}
		if err := l3.Acquire("x", Holder{Source: "churn", Token: i, Since: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := l3.Release("x"); err != nil {
			t.Fatal(err)
		}
	}
	l3.Close()
	check("replay after compaction")
}
