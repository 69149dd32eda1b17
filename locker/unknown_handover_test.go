package locker

import (
	"errors"
	"fmt"
	"testing"
)

// unknownJournal records every batch until fail is set, then answers each
// with an outcome not known: a cluster's leader that lost its leadership
// mid-commit, whose batch a later leader may still commit.
type unknownJournal struct {
	recordingJournal
}

func (j *unknownJournal) Commit(b []Change) error {
	if j.fail.Load() {
		return fmt.Errorf("leadership lost: %w", ErrOutcomeUnknown)
	}
	return j.recordingJournal.Commit(b)
}

// TestHandoverOfUnknownOutcomeIsNeverRefused: a release whose batch (the
// release and the grant to the next waiter) ends with an outcome not known
// may have handed the key over. The waiter must then be told that outcome
// — and leave the queue, so that a later Cancel cannot answer it '-' — and
// the release's caller too. The cluster's fault harness found the '-'
// under SIGSTOP of the leader: the grant was committed by the next leader
// while the deposed one answered the Cancel '-'.
func TestHandoverOfUnknownOutcomeIsNeverRefused(t *testing.T) {
	for _, via := range []string{"unlock", "reset-source"} {
		t.Run(via, func(t *testing.T) {
			j := &unknownJournal{}
			tb := New(Options{Journal: j})
			if _, err := tb.Lock(t.Context(), "k", Holder{Source: "a"}); err != nil {
				t.Fatal(err)
			}
			type outcome struct {
				token uint64
				err   error
			}
			got := make(chan outcome, 1)
			p, err := tb.LockFunc("k", Holder{Source: "b"}, func(token uint64, err error) { got <- outcome{token, err} })
			if err != nil {
				t.Fatal(err)
			}
			j.fail.Store(true)
			switch via {
			case "unlock":
				_, err = tb.Unlock("k")
			default:
				_, err = tb.ResetBySource("a")
			}
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("%s with its batch's outcome not known: %v, want ErrOutcomeUnknown", via, err)
			}
			select {
			case o := <-got:
				if !errors.Is(o.err, ErrOutcomeUnknown) {
					t.Fatalf("the waiter was told %d, %v; want an error wrapping ErrOutcomeUnknown", o.token, o.err)
				}
			default:
				t.Fatal("the waiter whose grant may exist is still waiting: a Cancel would answer it '-'")
			}
			if p.Cancel() {
				t.Fatal("Cancel withdrew a waiter whose grant may exist")
			}
			if n := tb.Stats().Waiting; n != 0 {
				t.Fatalf("%d waiting after the handover of unknown outcome", n)
			}
		})
	}
}
