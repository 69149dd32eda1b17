package faulttest

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// What the planned changes of the members need: the membership routes,
// a node caught up, the grants' longest pause.

// adminc waits for a membership change, which the leader carries out
// before it answers.
var adminc = http.Client{Timeout: 15 * time.Second}

// webDo asks nd's web port method path with body (the harness sets no
// WEB_PASSWORD: the routes ask for none) and returns the status and the
// answer's body.
func (nd *node) webDo(method, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, "http://"+nd.web()+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := adminc.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s %s on %s: %w", method, path, nd.id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("%s %s on %s: reading the answer: %w", method, path, nd.id, err)
	}
	return resp.StatusCode, string(b), nil
}

// awaitCaughtUp waits until nd is a voter of the leader's configuration,
// the configuration has voters voters, and nd has applied what the
// leader had committed when the wait began; then until every node agrees
// on a leader. A failure fails the run.
func (f *faultRun) awaitCaughtUp(nd *node, voters int, within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	var target uint64
	var last string
	for {
		if l, err := f.c.leaderWithin(f.c.nodes, time.Until(deadline)); err == nil {
			lst, lerr := l.status()
			st, err := nd.status()
			if lerr == nil && err == nil {
				if target == 0 {
					target = lst.CommitIndex
				}
				n, isVoter := lst.voters(nd.id)
				last = fmt.Sprintf("%d voters (%s one: %v), applied %d of %d", n, nd.id, isVoter, st.AppliedIndex, target)
				if n == voters && isVoter && st.AppliedIndex >= target {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s not a caught-up voter of %d within %v: %s\n%s", nd.id, voters, within, last, tail(nd.log.String(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.awaitLeaderOf(f.c.nodes, time.Until(deadline)+time.Second)
}

// grantGap returns the longest time between two grants of the load, one
// after the other, that overlaps [from, to]: from the last grant before
// from to the first after to (now if none came yet).
func grantGap(r *run, from, to time.Time) time.Duration {
	var at []time.Time
	for _, op := range r.rec.Ops() {
		if isGrant(op) {
			at = append(at, op.Return)
		}
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	prev := from
	for _, t := range at {
		if t.Before(from) {
			prev = t
		}
	}
	var gap time.Duration
	for _, t := range at {
		if !t.After(prev) {
			continue
		}
		gap = max(gap, t.Sub(prev))
		prev = t
		if t.After(to) {
			return gap
		}
	}
	return max(gap, time.Since(prev))
}
