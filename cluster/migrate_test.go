package cluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/walog"
)

// writeLog writes a single node's log holding key under token.
func writeLog(t *testing.T, path, key string, token uint64) {
	t.Helper()
	l, err := walog.Open(path, walog.Options{Logger: quietLog()}, func(string, *walog.Holder) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit([]locker.Change{{Key: key, Token: token, Grant: true,
		Holder: locker.Holder{Source: "src", Remote: "10.0.0.1:1"}, Since: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func startOne(t *testing.T, dir, addr, dataPath string) *Node {
	t.Helper()
	n, err := Start(Config{NodeID: "n1", RaftAddress: addr, Peers: "n1=" + addr, Token: testToken,
		RaftDir: dir, DataPath: dataPath, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A node that crashed after its bootstrap, before the import committed,
// finds the migration mark at its next start and imports the log then.
func TestMigrationResumesAfterACrash(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	wal := filepath.Join(t.TempDir(), "locks.wal")
	// The bootstrap happened; the import did not.
	n := startOne(t, dir, addr, "")
	waitFor(t, 10*time.Second, "n1 leads", n.IsLeader)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	writeLog(t, wal, "k", 1_800_000_000_000_000)
	if err := os.WriteFile(filepath.Join(dir, migratingFile), []byte(wal+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = startOne(t, dir, addr, wal)
	defer n.Close()
	waitFor(t, 10*time.Second, "the import", func() bool {
		_, err := os.Stat(filepath.Join(dir, migratingFile))
		return os.IsNotExist(err)
	})
	var got locker.Grant
	var ok bool
	n.FSM().View(func(s *locker.State, _ uint64) { got, ok = s.Held("k") })
	if !ok || got.Token != 1_800_000_000_000_000 {
		t.Fatalf("after the resumed import: %+v %v", got, ok)
	}
	if h := n.FSM().HighToken(); h != 1_800_000_000_000_001 {
		t.Fatalf("floor %d", h)
	}
	if _, err := os.Stat(wal + migratedSuffix); err != nil {
		t.Fatalf("the log was not renamed: %v", err)
	}
}

// A node with raft state and no mark refuses a log at DATA_PATH, and
// ignores DATA_PATH when no log is there.
func TestDataPathWithStateRefused(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	wal := filepath.Join(t.TempDir(), "locks.wal")
	n := startOne(t, dir, addr, "")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	writeLog(t, wal, "k", 5)
	if _, err := Start(Config{NodeID: "n1", RaftAddress: addr, Peers: "n1=" + addr, Token: testToken,
		RaftDir: dir, DataPath: wal, Logger: quietLog()}); err == nil {
		t.Fatal("a log at DATA_PATH beside raft state was taken")
	}
	if err := os.Remove(wal); err != nil {
		t.Fatal(err)
	}
	n = startOne(t, dir, addr, wal)
	n.Close()
	// A new node of several is refused a log.
	if _, err := Start(Config{NodeID: "n1", RaftAddress: addr, Peers: "n1=" + addr + ",n2=127.0.0.1:1", Token: testToken,
		RaftDir: t.TempDir(), DataPath: wal, Logger: quietLog()}); err == nil {
		t.Fatal("a log moved into a new cluster of two")
	}
}
