package faulttest

import (
	"testing"
	"time"

	"github.com/locking-center/locking-center/walog/crashtest/history"
)

// synthetic builds a run from ops given with times in milliseconds from
// t0, each sent to node 0 unless nodes says otherwise.
func synthetic(t0 time.Time, ops []history.Op, calls, returns []int, nodes map[int]int) *run {
	r := newRun(&cluster{}, "x")
	for i, op := range ops {
		op.Call = t0.Add(time.Duration(calls[i]) * time.Millisecond)
		op.Return = t0.Add(time.Duration(returns[i]) * time.Millisecond)
		r.rec.Add(op)
		r.nodeOf[i] = nodes[i]
	}
	return r
}

// The checks find what they are for: each synthetic history breaks one
// rule, and a legal one passes.
func TestChecksFindViolations(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	lock := func(who string, tok uint64, key string) history.Op {
		return history.Op{Kind: history.Lock, Key: key, Who: who, Session: true, Token: tok, Outcome: history.OK, Client: int(who[1] - '0')}
	}
	unlock := func(who string, tok uint64, key string) history.Op {
		return history.Op{Kind: history.Unlock, Key: key, Who: who, Session: true, Token: tok, Outcome: history.OK, Client: int(who[1] - '0')}
	}

	legal := synthetic(t0, []history.Op{lock("s1", 10, "k"), unlock("s1", 10, "k"), lock("s2", 11, "k"), unlock("s2", 11, "k")},
		[]int{0, 2, 1, 6}, []int{1, 3, 5, 7}, nil)
	if v := legal.check(); v.failed() {
		t.Fatalf("a legal history failed: %+v", v)
	}

	double := synthetic(t0, []history.Op{lock("s1", 10, "k"), lock("s2", 11, "k"), unlock("s1", 10, "k"), unlock("s2", 11, "k")},
		[]int{0, 1, 4, 6}, []int{1, 3, 5, 7}, nil)
	if v := double.check(); v.doubleGrants != 1 || v.porcupine == "ok" {
		t.Errorf("two holders at once: %d double grants, porcupine %s; want 1 and a failure", v.doubleGrants, v.porcupine)
	}

	order := synthetic(t0, []history.Op{lock("s1", 20, "a"), unlock("s1", 20, "a"), lock("s2", 15, "b"), unlock("s2", 15, "b")},
		[]int{0, 2, 4, 6}, []int{1, 3, 5, 7}, nil)
	if v := order.check(); v.tokenOrder != 1 {
		t.Errorf("a later grant with a lower token on another key: %d token-order violations, want 1", v.tokenOrder)
	}

	minority := synthetic(t0, []history.Op{lock("s1", 10, "k"), unlock("s1", 10, "k")}, []int{10, 12}, []int{11, 13}, map[int]int{0: 1, 1: 1})
	minority.minority = []window{{node: 1, from: t0.Add(5 * time.Millisecond), to: t0.Add(20 * time.Millisecond)}}
	if v := minority.check(); v.minorityOK != 2 {
		t.Errorf("'+' from a node cut off: %d found, want 2", v.minorityOK)
	}
	// Answered after the heal: a request held through the cut, rightly.
	minority.minority[0].to = t0.Add(10500 * time.Microsecond)
	if v := minority.check(); v.minorityOK != 0 {
		t.Errorf("'+' answered after the heal counted as from the minority: %d", v.minorityOK)
	}
}
