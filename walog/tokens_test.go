package walog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// fileRecord is one record of a log file, as scanRecords finds it.
type fileRecord struct {
	off int64
	ops []op
}

// scanRecords reads the log at path without replaying it: its version and
// every record with its operations.
func scanRecords(t *testing.T, path string) (uint32, []fileRecord) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	version, reason := checkHeader(data[:headerSize])
	if reason != "" {
		t.Fatalf("%s: %s", path, reason)
	}
	fsize := int64(frameSize)
	if version == version1 {
		fsize = frameSizeV1
	}
	var recs []fileRecord
	for off := int64(headerSize); off < int64(len(data)); {
		var n int64
		if version == version1 {
			n = int64(binary.BigEndian.Uint16(data[off+4:]))
		} else {
			n = int64(binary.BigEndian.Uint32(data[off+4:]))
		}
		rec := fileRecord{off: off}
		if reason := decodePayload(version, data[off+fsize:off+fsize+n], func(o op) string { rec.ops = append(rec.ops, o); return "" }); reason != "" {
			t.Fatalf("%s at %d: %s", path, off, reason)
		}
		recs = append(recs, rec)
		off += fsize + n
	}
	return version, recs
}

// restoreInto opens the log at path and replays it into a new table, as
// main.go does.
func restoreInto(t *testing.T, path string, opts Options) (*locker.Table, *Log) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	j := &Journal{}
	table := locker.New(locker.Options{Journal: j})
	l, err := j.Open(path, opts, table)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return table, l
}

func tableHolds(table *locker.Table) map[string]locker.KeyInfo {
	held := make(map[string]locker.KeyInfo)
	table.Each(func(ki locker.KeyInfo) bool {
		held[ki.Key] = ki
		return true
	})
	return held
}

// TestUpgradeFromVersion1: a log written before fencing tokens replays
// with its held keys kept (a released one stays free), each gets a token,
// the file is rewritten in version 2, and the next start keeps the same
// tokens.
func TestUpgradeFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	b := appendHeaderV1(nil)
	since := time.Unix(1764500000, 0)
	want := make(map[string]Holder)
	for i := range 30 {
		k := fmt.Sprintf("old/%d", i)
		h := Holder{Source: fmt.Sprintf("svc-%d", i), Remote: fmt.Sprintf("10.0.0.%d:4000", i), Since: since.Add(time.Duration(i) * time.Second)}
		b = appendAcquireV1(b, k, h)
		want[k] = h
	}
	for i := 0; i < 30; i += 5 {
		k := fmt.Sprintf("old/%d", i)
		b = appendReleaseV1(b, k, 0)
		delete(want, k)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}

	table, l := restoreInto(t, path, Options{})
	held := tableHolds(table)
	if len(held) != len(want) {
		t.Fatalf("restored %d keys, want the %d held in the version 1 log", len(held), len(want))
	}
	tokens := make(map[string]uint64)
	seen := make(map[uint64]bool)
	for k, w := range want {
		ki, ok := held[k]
		if !ok || ki.Holder.Source != w.Source || ki.Holder.Remote != w.Remote || !ki.Since.Equal(w.Since) || ki.Holder.Session != 0 {
			t.Fatalf("%q restored as %+v (held %v), want %+v", k, ki, ok, w)
		}
		if ki.Token == 0 || seen[ki.Token] {
			t.Fatalf("%q restored with token %d: want a fresh one of its own", k, ki.Token)
		}
		seen[ki.Token] = true
		tokens[k] = ki.Token
		if ki.Token > l.HighToken() {
			t.Fatalf("token %d of %q above HighToken %d", ki.Token, k, l.HighToken())
		}
	}
	version, recs := scanRecords(t, path)
	if version != version2 {
		t.Fatalf("after the upgrade the file is version %d, want %d", version, version2)
	}
	grants := 0
	for _, r := range recs {
		for _, o := range r.ops {
			if o.typ == typeGrant {
				grants++
				if o.h.Token != tokens[o.key] {
					t.Fatalf("rewritten grant of %q has token %d, the table gave %d", o.key, o.h.Token, tokens[o.key])
				}
			}
		}
	}
	if grants != len(want) {
		t.Fatalf("the rewritten file has %d grants, want %d", grants, len(want))
	}
	// The next grant's token is above every upgraded one.
	next, err := table.TryLock("new", locker.Holder{Source: "s", Remote: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if next <= maxOf(tokens) {
		t.Fatalf("new grant token %d not above the upgraded ones (max %d)", next, maxOf(tokens))
	}
	tokens["new"] = next
	l.Close()

	table, _ = restoreInto(t, path, Options{})
	held = tableHolds(table)
	if len(held) != len(tokens) {
		t.Fatalf("second start restored %d keys, want %d", len(held), len(tokens))
	}
	for k, tok := range tokens {
		if held[k].Token != tok {
			t.Fatalf("%q: token %d after the second start, %d after the first", k, held[k].Token, tok)
		}
	}
}

func maxOf(m map[string]uint64) uint64 {
	var top uint64
	for _, v := range m {
		top = max(top, v)
	}
	return top
}

// TestUpgradeCorruptVersion1: the version 1 reader keeps the rules: a
// flipped byte refuses to start, a torn tail is cut.
func TestUpgradeCorruptVersion1(t *testing.T) {
	b := appendHeaderV1(nil)
	b = appendAcquireV1(b, "a", holder(1))
	mid := len(b)
	b = appendAcquireV1(b, "b", holder(2))
	t.Run("flipped byte", func(t *testing.T) {
		bad := append([]byte(nil), b...)
		bad[mid+frameSizeV1+3] ^= 0x10
		wantCorrupt(t, openErr(t, bad), int64(mid))
	})
	t.Run("torn tail", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "locks.wal")
		if err := os.WriteFile(path, b[:len(b)-4], 0o600); err != nil {
			t.Fatal(err)
		}
		_, got := open(t, path, Options{})
		if len(got) != 1 || got["a"].Source != holder(1).Source {
			t.Fatalf("replayed %v, want only a", got)
		}
	})
}

// TestMarkKeepsTheHighToken: the highest token ever logged survives
// compactions although the key that had it was released (the snapshot's
// mark record), and the next start raises the table above it.
func TestMarkKeepsTheHighToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{CompactFloor: 1024})
	const top = 1 << 40
	if err := l.Acquire("kept", Holder{Source: "s", Remote: "r", Token: 5}); err != nil {
		t.Fatal(err)
	}
	if err := l.Acquire("top", Holder{Source: "s", Remote: "r", Token: top}); err != nil {
		t.Fatal(err)
	}
	if err := l.Commit([]locker.Change{{Key: "top", Token: top}}); err != nil {
		t.Fatal(err)
	}
	// Churn with lower tokens until two compactions have run: the second
	// snapshot must carry the first one's mark.
	for i := 0; l.Stats().Compactions < 2; i++ {
		k := fmt.Sprintf("churn/%d", i%4)
		if err := l.Acquire(k, Holder{Source: "s", Remote: "r", Token: uint64(10 + i)}); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(k); err != nil {
			t.Fatal(err)
		}
		if i > 100000 {
			t.Fatal("no compaction")
		}
	}
	if l.HighToken() != top {
		t.Fatalf("HighToken %d, want %d", l.HighToken(), top)
	}
	l.Close()
	_, recs := scanRecords(t, path)
	marked := false
	for _, r := range recs {
		for _, o := range r.ops {
			if o.typ == typeGrant && o.key == "top" {
				t.Fatal("the released grant of top is still in the compacted file")
			}
			marked = marked || o.typ == typeMark && o.token == top
		}
	}
	if !marked {
		t.Fatalf("no mark record of token %d in the compacted file", uint64(top))
	}

	table, l2 := restoreInto(t, path, Options{})
	if l2.HighToken() != top {
		t.Fatalf("after restart HighToken %d, want %d", l2.HighToken(), top)
	}
	token, err := table.TryLock("next", locker.Holder{Source: "s", Remote: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if token <= top {
		t.Fatalf("first token after restart %d, want above the mark %d", token, uint64(top))
	}
}

// TestSessionHoldsRoundTrip: a session hold keeps its session and TTL
// through replay and compaction, and comes back in the table as a
// disconnected session that expires one TTL after the start.
func TestSessionHoldsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{CompactFloor: 1024})
	want := make(map[string]Holder)
	for i := range 6 {
		k := fmt.Sprintf("s/%d", i)
		h := holder(i)
		h.Session = 0xabcdef0000000000 + uint64(i%2)
		h.TTL = time.Duration(3+i%2) * time.Second
		if err := l.Acquire(k, h); err != nil {
			t.Fatal(err)
		}
		want[k] = h
	}
	want["v1"] = holder(50)
	if err := l.Acquire("v1", holder(50)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, got := open(t, path, Options{})
	equalHolders(t, got, want)
	l.Close()

	// Again after compactions.
	l, _ = open(t, path, Options{CompactFloor: 1024})
	for i := 0; l.Stats().Compactions == 0; i++ {
		if err := l.Acquire("churn", holder(100+i)); err != nil {
			t.Fatal(err)
		}
		if err := l.Release("churn"); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	l, got = open(t, path, Options{})
	equalHolders(t, got, want)
	l.Close()

	table, _ := restoreInto(t, path, Options{})
	held := tableHolds(table)
	for k, w := range want {
		if ki := held[k]; uint64(ki.Holder.Session) != w.Session || ki.Token != w.Token {
			t.Fatalf("%q restored as %+v, want session %x token %d", k, ki, w.Session, w.Token)
		}
	}
	if n := table.Stats().Sessions; n != 2 {
		t.Fatalf("%d sessions restored, want 2", n)
	}
	for _, id := range []uint64{0xabcdef0000000000, 0xabcdef0000000001} {
		si, ok := table.SessionInfo(locker.SessionID(id))
		if !ok || si.Connected || si.Holds != 3 || si.TTL != time.Duration(3+id%2)*time.Second {
			t.Fatalf("session %x restored as %+v (%v): want disconnected, 3 holds, its TTL", id, si, ok)
		}
	}
}

// TestBatchIsOneRecord: a batch of many changes is one record, so a crash
// keeps all of it or none.
func TestBatchIsOneRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	var batch []locker.Change
	for i := range 100 {
		batch = append(batch, locker.Change{Key: fmt.Sprintf("k%d", i), Token: uint64(i + 1), Grant: true,
			Holder: locker.Holder{Source: "s", Remote: "r", Session: 7}, Since: time.Unix(1, 0), TTL: time.Second})
	}
	for i := range 50 {
		batch = append(batch, locker.Change{Key: fmt.Sprintf("k%d", i), Token: uint64(i + 1)})
	}
	if err := l.Commit(batch); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Records != 1 || st.Fsyncs != 1 {
		t.Fatalf("stats %+v, want one record and one fsync", st)
	}
	l.Close()
	_, recs := scanRecords(t, path)
	if len(recs) != 1 || len(recs[0].ops) != 150 {
		t.Fatalf("file has %d records (%v ops in the first), want 1 of 150 ops", len(recs), len(recs[0].ops))
	}
	_, got := open(t, path, Options{})
	if len(got) != 50 {
		t.Fatalf("replayed %d holders, want 50", len(got))
	}
}

// TestLargeBatchIsSplit: a batch over maxPayload becomes several records,
// still in one write and one fsync, and replays whole.
func TestLargeBatchIsSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 20 MB")
	}
	path := filepath.Join(t.TempDir(), "locks.wal")
	fsys := &FaultFS{}
	l, _ := open(t, path, Options{FS: fsys})
	writes := 0
	fsys.SetFault(func(op, name string) error {
		if op == "write" && name == path {
			writes++ // the writer goroutine only
		}
		return nil
	})
	long := strings.Repeat("x", MaxFieldLen-8)
	var batch []locker.Change
	size := 0
	for i := 0; size <= maxPayload+maxPayload/4; i++ {
		c := locker.Change{Key: fmt.Sprintf("%s%08d", long, i), Token: uint64(i + 1), Grant: true,
			Holder: locker.Holder{Source: long, Remote: long}, Since: time.Unix(1, 0)}
		batch = append(batch, c)
		size += grantSize(c.Key, Holder{Source: long, Remote: long})
	}
	if err := l.Commit(batch); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	fsys.SetFault(nil)
	if writes != 1 || st.Fsyncs != 1 || st.Records < 2 {
		t.Fatalf("%d writes, stats %+v: want one write, one fsync, several records", writes, st)
	}
	l.Close()
	_, recs := scanRecords(t, path)
	ops := 0
	for _, r := range recs {
		ops += len(r.ops)
		if n := recordPayload(t, path, r.off); n > maxPayload {
			t.Fatalf("record at %d has a payload of %d bytes, over %d", r.off, n, maxPayload)
		}
	}
	if len(recs) < 2 || ops != len(batch) {
		t.Fatalf("%d records holding %d operations, want several holding %d", len(recs), ops, len(batch))
	}
	_, got := open(t, path, Options{})
	if len(got) != len(batch) {
		t.Fatalf("replayed %d holders, want %d", len(got), len(batch))
	}
}

func recordPayload(t *testing.T, path string, off int64) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var frame [frameSize]byte
	if _, err := f.ReadAt(frame[:], off); err != nil {
		t.Fatal(err)
	}
	return int64(binary.BigEndian.Uint32(frame[4:]))
}

// TestSecondOpenIsRefused: while a log is open, a second Open of the same
// path fails with ErrInUse naming the lock file; after Close it works.
func TestSecondOpenIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	l, _ := open(t, path, Options{})
	if err := l.Acquire("a", holder(1)); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(path, Options{Logger: quiet()}, func(string, *Holder) error { return nil })
	if err == nil {
		l2.Close()
		t.Fatal("a second Open of an open log succeeded")
	}
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), path+".lock") {
		t.Fatalf("second Open: %v, want ErrInUse naming %s.lock", err, path)
	}
	// The refused Open left the log alone: it still takes records.
	if err := l.Acquire("b", holder(2)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, got := open(t, path, Options{})
	equalHolders(t, got, map[string]Holder{"a": holder(1), "b": holder(2)})
}

// TestJournalRefusesBeforeOpen: a batch that comes before the replay (a
// reset from the web, say) is refused, and the table keeps its state.
func TestJournalRefusesBeforeOpen(t *testing.T) {
	j := &Journal{}
	table := locker.New(locker.Options{Journal: j})
	if _, err := table.TryLock("k", locker.Holder{Source: "s"}); !errors.Is(err, ErrNotOpen) {
		t.Fatalf("TryLock before Open: %v, want ErrNotOpen", err)
	}
	if _, held := table.Key("k"); held {
		t.Fatal("a refused grant took effect")
	}
	if j.Healthy() {
		t.Fatal("a journal not open yet reports healthy")
	}
	var none *Journal
	if !none.Healthy() || none.Log() != nil {
		t.Fatal("a nil Journal (no log) must be healthy and have no log")
	}
}

// TestPathThatIsNoFileIsRefused: a folder given as the log's path (with
// or without a trailing slash), a folder that does not exist and a "folder"
// that is a file are each refused with a message saying which, and nothing
// is made anywhere.
func TestPathThatIsNoFileIsRefused(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(parent, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{dir, "is a folder; the log is a file, for instance " + filepath.Join(dir, "locks.wal")},
		{filepath.Join(parent, "new") + "/", "is a folder"},
		{filepath.Join(parent, "missing", "locks.wal"), "folder " + filepath.Join(parent, "missing") + " does not exist"},
		{filepath.Join(file, "locks.wal"), "folder " + file + " is not a folder"},
	} {
		l, err := Open(c.path, Options{Logger: quiet()}, func(string, *Holder) error { return nil })
		if err == nil {
			l.Close()
			t.Fatalf("Open(%s) succeeded", c.path)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): %v, want it to say %q", c.path, err, c.want)
		}
	}
	for _, f := range []struct {
		dir  string
		want int // entries: parent holds only data and file
	}{{parent, 2}, {dir, 0}} {
		entries, err := os.ReadDir(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != f.want {
			t.Errorf("the refused Opens left %d entries in %s, want %d", len(entries), f.dir, f.want)
		}
	}
}
