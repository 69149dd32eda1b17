package locker

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// recJournal is a SessionJournal that records what it was asked, and
// refuses while fail is set.
type recJournal struct {
	mu    sync.Mutex // guards calls and fail
	calls []string
	fail  error
}

func (j *recJournal) rec(s string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.fail != nil {
		return j.fail
	}
	j.calls = append(j.calls, s)
	return nil
}

func (j *recJournal) Commit(batch []Change) error { return j.rec("commit") }
func (j *recJournal) OpenSession(SessionID, string, string, time.Duration) error {
	return j.rec("open")
}
func (j *recJournal) ResumeSession(SessionID, string) error { return j.rec("resume") }
func (j *recJournal) EndSession(_ SessionID, batch []Change) error {
	if len(batch) > 0 {
		return j.rec("end+releases")
	}
	return j.rec("end")
}

func TestSessionJournalRecordsOpenResumeEnd(t *testing.T) {
	j := &recJournal{}
	tbl := New(Options{Journal: j})
	l, err := tbl.OpenSession("svc", "127.0.0.1:1", 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.ResumeSession(l.ID(), "127.0.0.1:2", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.EndSession(l.ID()); err != nil {
		t.Fatal(err)
	}
	l2, err := tbl.OpenSession("svc", "127.0.0.1:1", 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.TryLock("k", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"open", "resume", "end", "open", "commit", "end+releases"}
	if got := j.calls; len(got) != len(want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	for i := range want {
		if j.calls[i] != want[i] {
			t.Fatalf("calls %v, want %v", j.calls, want)
		}
	}
}

func TestSessionJournalRefusedOpenLeavesNoSession(t *testing.T) {
	boom := errors.New("boom")
	j := &recJournal{fail: boom}
	tbl := New(Options{Journal: j, MaxSessions: 1})
	if _, err := tbl.OpenSession("svc", "127.0.0.1:1", 5*time.Second, nil); !errors.Is(err, ErrJournal) || !errors.Is(err, boom) {
		t.Fatalf("open: %v, want ErrJournal wrapping the journal's error", err)
	}
	if n := tbl.Stats().Sessions; n != 0 {
		t.Fatalf("%d sessions after a refused open", n)
	}
	j.fail = nil
	if _, err := tbl.OpenSession("svc", "127.0.0.1:1", 5*time.Second, nil); err != nil {
		t.Fatalf("the refused open kept its place at MaxSessions: %v", err)
	}
}

func TestRestoreSessionRestartsTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	tbl := New(Options{Now: func() time.Time { return now }})
	tbl.RestoreSession(7, "svc", "127.0.0.1:1", 2*time.Second, 500*time.Millisecond)
	info, ok := tbl.SessionInfo(7)
	if !ok || info.ExpiresIn != 2500*time.Millisecond || info.Connected {
		t.Fatalf("restored session %+v ok=%v, want disconnected and expiring in 2.5s", info, ok)
	}
}
