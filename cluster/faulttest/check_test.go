package faulttest

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/locking-center/locking-center/walog/crashtest/history"
)

// verdict is what the checks of one run found.
type verdict struct {
	ops, grants, unknown int
	doubleGrants         int
	lostGrants           int
	tokenOrder           int // real-time order across keys broken
	minorityOK           int // '+' from a node cut off from the majority
	sessionsLost         int
	expiry               int // a silent session released before its TTL
	porcupine            string
	problems             []string
}

func (v *verdict) failed() bool {
	return v.doubleGrants+v.lostGrants+v.tokenOrder+v.minorityOK+v.sessionsLost+v.expiry > 0 ||
		v.porcupine != "ok" || len(v.problems) > 0
}

// isGrant reports whether op is a Lock or TryLock answered '+'.
func isGrant(op history.Op) bool {
	return op.Outcome == history.OK && (op.Kind == history.Lock || op.Kind == history.TryLock)
}

// check runs every check over the run's history.
func (r *run) check() verdict {
	ops := r.rec.Ops()
	var v verdict
	rep, err := history.Check(ops, checkTimeout)
	v.ops, v.grants, v.unknown = rep.Ops, rep.Grants, rep.Unknown
	v.porcupine = "ok"
	if err != nil {
		v.porcupine = "FAILED"
		v.problems = append(v.problems, "porcupine: "+err.Error()+"; every operation: "+dumpOps(ops))
	}

	// Double grants: a grant's hold runs at least from its '+' to the
	// call of its holder's next operation (clients are sequential, and
	// nobody but the holder releases a key in this load). Two holds of
	// one key that overlap mean two clients were told '+' while neither
	// had begun to release it.
	type hold struct {
		key, who   string
		from, till time.Time
	}
	next := make(map[int]time.Time) // by index: the holder's next call after it
	lastOf := make(map[int]int)     // client → index of its latest op so far, by call time
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	r.mu.Lock()
	slices.SortStableFunc(order, func(a, b int) int { return ops[a].Call.Compare(ops[b].Call) })
	for _, i := range order {
		op := ops[i]
		if _, ok := r.nodeOf[i]; !ok {
			continue // added by the harness (a grant maybe given back, a lost session): not a call of the client
		}
		if j, ok := lastOf[op.Client]; ok {
			if _, set := next[j]; !set {
				next[j] = op.Call
			}
		}
		lastOf[op.Client] = i
	}
	r.mu.Unlock()
	var holds []hold
	for i, op := range ops {
		if !isGrant(op) {
			continue
		}
		till, ok := next[i]
		if !ok {
			till = time.Now()
		}
		holds = append(holds, hold{key: op.Key, who: op.Who, from: op.Return, till: till})
	}
	slices.SortFunc(holds, func(a, b hold) int {
		return cmp.Or(cmp.Compare(a.key, b.key), a.from.Compare(b.from))
	})
	for i := 1; i < len(holds); i++ {
		for j := i - 1; j >= 0 && holds[j].key == holds[i].key; j-- {
			if holds[i].from.Before(holds[j].till) {
				v.doubleGrants++
				v.problems = append(v.problems, fmt.Sprintf("double grant: %s told '+' to %s at %s while %s held it (told at %s, next call %s)",
					holds[i].key, holds[i].who, holds[i].from.Format(time.StampMicro), holds[j].who,
					holds[j].from.Format(time.StampMicro), holds[j].till.Format(time.StampMicro)))
			}
		}
	}

	// Tokens in real-time order across keys: a grant whose '+' came
	// before another grant's request was sent has the lower token.
	var tokened []history.Op
	for _, op := range ops {
		if isGrant(op) && op.Token != 0 {
			tokened = append(tokened, op)
		}
	}
	byReturn := slices.Clone(tokened)
	slices.SortFunc(byReturn, func(a, b history.Op) int { return a.Return.Compare(b.Return) })
	byCall := slices.Clone(tokened)
	slices.SortFunc(byCall, func(a, b history.Op) int { return a.Call.Compare(b.Call) })
	var high history.Op
	k := 0
	for _, b := range byCall {
		for k < len(byReturn) && byReturn[k].Return.Before(b.Call) {
			if byReturn[k].Token > high.Token {
				high = byReturn[k]
			}
			k++
		}
		if high.Token != 0 && b.Token <= high.Token {
			v.tokenOrder++
			v.problems = append(v.problems, fmt.Sprintf("token order: %s of %s by %s sent at %s got token %d, not above %d of %s by %s told at %s",
				b.Kind, b.Key, b.Who, b.Call.Format(time.StampMicro), b.Token, high.Token, high.Key, high.Who, high.Return.Format(time.StampMicro)))
		}
	}

	// No '+' from a minority.
	r.mu.Lock()
	for i, op := range ops {
		ni, ok := r.nodeOf[i]
		if !ok || op.Outcome != history.OK {
			continue
		}
		for _, w := range r.minority {
			to := w.to
			if to.IsZero() {
				to = time.Now()
			}
			// Sent after the cut and answered before the heal: a request
			// held during the cut may be answered after it, rightly.
			if w.node == ni && op.Call.After(w.from) && op.Return.Before(to) {
				v.minorityOK++
				v.problems = append(v.problems, fmt.Sprintf("'+' from the minority: %s of %s by %s sent to n%d at %s, cut off from %s",
					op.Kind, op.Key, op.Who, ni+1, op.Call.Format(time.StampMicro), w.from.Format(time.StampMicro)))
			}
		}
	}
	v.lostGrants += r.lost["lost"]
	v.sessionsLost += r.lost["session"]
	v.expiry += r.lost["expiry"]
	for _, p := range r.problems {
		v.problems = append(v.problems, p)
	}
	r.mu.Unlock()
	return v
}

// dumpOps writes ops, by key and call time, to a temporary file and
// returns its name, for a reader of a failed check.
func dumpOps(ops []history.Op) string {
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b history.Op) int { return cmp.Or(cmp.Compare(a.Key, b.Key), a.Call.Compare(b.Call)) })
	var b strings.Builder
	start := sorted[0].Call
	for _, op := range sorted {
		if op.Call.Before(start) {
			start = op.Call
		}
	}
	for _, op := range sorted {
		fmt.Fprintf(&b, "%-28s [%10.1f, %10.1f] c%-2d %-12s %-8s tok %d → %s\n", op.Key, float64(op.Call.Sub(start))/1e6,
			float64(op.Return.Sub(start))/1e6, op.Client, op.Kind, op.Who, op.Token, op.Outcome)
	}
	f, err := os.CreateTemp("", "cluster-history-*.txt")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	_, _ = f.WriteString(b.String())
	return f.Name()
}

// checkTimeout bounds porcupine's search of one run's history.
var checkTimeout = time.Minute
