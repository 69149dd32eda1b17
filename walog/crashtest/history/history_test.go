package history

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// seq builds a history whose operations follow each other one
// millisecond apart, each taking half of it; overlap makes the next one
// start inside the one before.
type seq struct {
	t   time.Time
	ops []Op
}

func (s *seq) add(op Op, overlap bool) *seq {
	if !overlap {
		s.t = s.t.Add(time.Millisecond)
	}
	op.Call, op.Return = s.t, s.t.Add(500*time.Microsecond)
	s.ops = append(s.ops, op)
	return s
}

func TestLegalHistories(t *testing.T) {
	cases := map[string][]Op{
		"lock unlock lock": {
			{Kind: Lock, Key: "k", Who: "a", Outcome: OK},
			{Kind: TryLock, Key: "k", Who: "b", Outcome: Busy},
			{Kind: Unlock, Key: "k", Who: "b", Outcome: OK}, // v1: no owners
			{Kind: Unlock, Key: "k", Who: "a", Outcome: Fail},
			{Kind: Lock, Key: "k", Who: "s", Session: true, Token: 7, Outcome: OK},
			{Kind: Unlock, Key: "k", Who: "t", Session: true, Outcome: Fail}, // not its grant
			{Kind: Unlock, Key: "k", Who: "s", Session: true, Token: 7, Outcome: OK},
			{Kind: TryLock, Key: "k", Who: "s", Session: true, Token: 9, Outcome: OK},
		},
		"unknown lock applied": {
			{Kind: Lock, Key: "k", Who: "a", Outcome: Unknown},
			{Kind: TryLock, Key: "k", Who: "b", Outcome: Busy},
			{Kind: ResetKey, Key: "k", Who: "c", Outcome: OK},
			{Kind: TryLock, Key: "k", Who: "b", Outcome: OK},
		},
		"unknown lock not applied": {
			{Kind: Lock, Key: "k", Who: "a", Outcome: Unknown},
			{Kind: TryLock, Key: "k", Who: "b", Outcome: OK},
		},
		"session end and absent": {
			{Kind: Lock, Key: "k", Who: "s", Session: true, Token: 3, Outcome: OK},
			{Kind: Lock, Key: "j", Who: "a", Outcome: OK},
			{Kind: EndSession, Key: AllKeys, Who: "s", Outcome: OK},
			{Kind: Absent, Key: AllKeys, Who: "s", Outcome: OK},
			{Kind: TryLock, Key: "k", Who: "b", Outcome: OK},
			{Kind: TryLock, Key: "j", Who: "b", Outcome: Busy},
			{Kind: ResetSource, Key: AllKeys, Who: "a", Outcome: OK},
			{Kind: TryLock, Key: "j", Who: "b", Outcome: OK},
		},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			s := &seq{t: time.Now()}
			for _, op := range ops {
				s.add(op, false)
			}
			rep, err := Check(s.ops, 10*time.Second)
			if err != nil {
				t.Fatalf("%v (report %+v)", err, rep)
			}
			if rep.Ops < len(ops) {
				t.Fatalf("checked %d operations of %d", rep.Ops, len(ops))
			}
		})
	}
}

// TestConcurrentGrantsMayOrderEitherWay: two overlapping Locks and an
// Unlock can be put in an order that is legal.
func TestConcurrentGrantsMayOrderEitherWay(t *testing.T) {
	s := &seq{t: time.Now()}
	s.add(Op{Kind: Lock, Key: "k", Who: "a", Outcome: OK}, false)
	s.add(Op{Kind: Unlock, Key: "k", Who: "a", Outcome: OK}, true)
	s.add(Op{Kind: Lock, Key: "k", Who: "b", Outcome: OK}, true)
	if _, err := Check(s.ops, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestIllegalHistories(t *testing.T) {
	cases := map[string][]Op{
		"double grant": {
			{Kind: Lock, Key: "k", Who: "a", Outcome: OK},
			{Kind: Lock, Key: "k", Who: "b", Outcome: OK},
		},
		"token not above the last": {
			{Kind: Lock, Key: "k", Who: "s", Session: true, Token: 9, Outcome: OK},
			{Kind: Unlock, Key: "k", Who: "s", Session: true, Token: 9, Outcome: OK},
			{Kind: Lock, Key: "k", Who: "t", Session: true, Token: 9, Outcome: OK},
		},
		"a session unlocks another's grant": {
			{Kind: Lock, Key: "k", Who: "s", Session: true, Token: 1, Outcome: OK},
			{Kind: Unlock, Key: "k", Who: "t", Session: true, Outcome: OK},
		},
		"busy on a free key": {
			{Kind: TryLock, Key: "k", Who: "a", Outcome: Busy},
		},
		"held after its session ended": {
			{Kind: Lock, Key: "k", Who: "s", Session: true, Token: 1, Outcome: OK},
			{Kind: EndSession, Key: AllKeys, Who: "s", Outcome: OK},
			{Kind: TryLock, Key: "k", Who: "a", Outcome: Busy},
		},
		"acknowledged grant lost": {
			{Kind: Lock, Key: "k", Who: "a", Outcome: OK},
			{Kind: Lock, Key: "other", Who: "a", Outcome: Unknown},
			{Kind: TryLock, Key: "k", Who: "b", Outcome: OK},
		},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			s := &seq{t: time.Now()}
			for _, op := range ops {
				s.add(op, false)
			}
			rep, err := Check(s.ops, 10*time.Second)
			if !errors.Is(err, ErrIllegal) {
				t.Fatalf("Check = %v, want ErrIllegal", err)
			}
			if rep.Visualisation == "" || !strings.Contains(err.Error(), rep.Visualisation) {
				t.Fatalf("error %q does not name the visualisation %q", err, rep.Visualisation)
			}
			b, rerr := os.ReadFile(rep.Visualisation)
			if rerr != nil || !strings.Contains(string(b), "<html") {
				t.Fatalf("visualisation %s: %v, %d bytes", rep.Visualisation, rerr, len(b))
			}
			os.RemoveAll(strings.TrimSuffix(rep.Visualisation, "/history.html"))
		})
	}
}

// TestRecorderSettle: calls left open are settled as unknown at the
// given moment, and a settled call's late answer changes nothing.
func TestRecorderSettle(t *testing.T) {
	r := NewRecorder()
	h := r.Call(Op{Client: 0, Kind: Lock, Key: "k", Who: "a"})
	r.Return(r.Call(Op{Client: 1, Kind: TryLock, Key: "k", Who: "b"}), Busy, 0)
	at := time.Now()
	r.Settle(at, func(c int) bool { return c == 0 })
	r.Return(h, OK, 5)
	ops := r.Ops()
	if ops[0].Outcome != Unknown || !ops[0].Return.Equal(at) || ops[0].Token != 0 {
		t.Fatalf("settled call: %+v", ops[0])
	}
	rep, err := r.Check(10 * time.Second)
	if err != nil || rep.Unknown != 1 || rep.Ops != 2 {
		t.Fatalf("Check = %+v, %v", rep, err)
	}
}
