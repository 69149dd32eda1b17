//go:build failpoints

package cluster

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// In the failpoint build, LC_RAFT_FAIL_WRITES=path makes every write of
// raft's log store (StoreLog, StoreLogs) fail with an I/O error, writing
// nothing, while the file path exists: a disk whose writes or fsyncs fail,
// switched on and off by the cluster's fault tests. A leader whose log
// cannot be written must step down and acknowledge nothing it could not
// make durable; a follower's failed append is refused to its leader. The
// first failure after the file appears writes "failpoint raft-fail-writes:
// a log write failed" to standard error.

// errWriteFailed is the failpoint's error.
var errWriteFailed = errors.New("failpoint raft-fail-writes: input/output error")

// failingLogs wraps s when LC_RAFT_FAIL_WRITES is set.
func failingLogs(s raft.LogStore) raft.LogStore {
	flag := os.Getenv("LC_RAFT_FAIL_WRITES")
	if flag == "" {
		return s
	}
	return &failingLogStore{LogStore: s, flag: flag}
}

type failingLogStore struct {
	raft.LogStore
	flag    string
	failing atomic.Bool // a write failed since the file last appeared
}

func (s *failingLogStore) fail() bool {
	if _, err := os.Stat(s.flag); err != nil {
		s.failing.Store(false)
		return false
	}
	if !s.failing.Swap(true) {
		fmt.Fprintln(os.Stderr, "failpoint raft-fail-writes: a log write failed")
	}
	return true
}

// StoreLog fails while the file exists.
func (s *failingLogStore) StoreLog(l *raft.Log) error {
	if s.fail() {
		return errWriteFailed
	}
	return s.LogStore.StoreLog(l)
}

// StoreLogs fails while the file exists.
func (s *failingLogStore) StoreLogs(ls []*raft.Log) error {
	if s.fail() {
		return errWriteFailed
	}
	return s.LogStore.StoreLogs(ls)
}
