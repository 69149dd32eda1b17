package walog

import (
	"errors"
	"sync/atomic"

	"github.com/locking-center/locking-center/locker"
)

// Journal is the lock table's journal (a locker.Journal) on a log that is
// opened after the table is made: the server builds the table first, so
// that its web port answers during a long replay, then replays the log into
// it. Until Open has succeeded every batch is refused. The zero value is
// ready to use; a nil *Journal is a healthy journal with no log.
type Journal struct {
	log atomic.Pointer[Log]
}

// ErrNotOpen refuses batches that come before Journal.Open has replayed
// the log (a reset from the web during the replay, say).
var ErrNotOpen = errors.New("walog: log not open yet")

// Commit records a batch on the log once it is open.
func (j *Journal) Commit(batch []locker.Change) error {
	l := j.log.Load()
	if l == nil {
		return ErrNotOpen
	}
	return l.Commit(batch)
}

// Open opens and replays the log at path into table, which must be empty
// and not yet served: every live grant is restored under its token (a
// version 1 log's under new ones), and the table's tokens are raised above
// every token the log has seen.
func (j *Journal) Open(path string, opts Options, table *locker.Table) (*Log, error) {
	l, err := Open(path, opts, func(key string, h *Holder) error {
		token, err := table.Restore(key, locker.Holder{Source: h.Source, Remote: h.Remote, Session: locker.SessionID(h.Session),
			Origin: locker.Origin{Action: h.Action, ID: h.ID}},
			h.Token, h.Since, h.TTL)
		h.Token = token
		return err
	})
	if err != nil {
		return nil, err
	}
	table.RaiseTokens(l.HighToken())
	j.log.Store(l)
	return l, nil
}

// Log returns the open log, or nil before Open (or on a nil Journal).
func (j *Journal) Log() *Log {
	if j == nil {
		return nil
	}
	return j.log.Load()
}

// Healthy reports whether the journal can record: open and not failed.
// A nil Journal (no log) is healthy.
func (j *Journal) Healthy() bool {
	if j == nil {
		return true
	}
	l := j.Log()
	return l != nil && l.Err() == nil
}

// Close closes the log, if open.
func (j *Journal) Close() error {
	if l := j.Log(); l != nil {
		return l.Close()
	}
	return nil
}
