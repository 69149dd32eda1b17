// Package history records what the clients of a lock server were told and
// checks it with porcupine (github.com/anishathalye/porcupine): that some
// order of the operations, each taking effect at one instant between its
// call and its return, is a legal run of one mutex per key.
//
// The model of a key: free, or held by one holder (a v1 source or a
// session) under a fencing token; the highest token seen so far. A grant
// needs a free key and, when its token is known, a token above every token
// granted on that key before it. An operation whose outcome the client
// never learnt (the server died, the client hung up, the session dropped)
// is "applied or not": the checker tries both. Every check failure writes
// porcupine's HTML visualisation of the key's history to a temporary folder
// and names the file in the error.
//
// The package guarantees nothing about the server; it is a test tool, and
// the only code of the module that imports porcupine.
package history

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation asked for.
type Kind uint8

// The kinds of operation.
const (
	Lock        Kind = iota + 1 // Lock: waits for the key
	TryLock                     // TryLock: never waits
	Unlock                      // Unlock; from a session it releases only the session's own grant
	ResetKey                    // ResetByKey: the key becomes free
	ResetSource                 // ResetBySource of Who: every key Who holds becomes free
	EndSession                  // Close or expiry of the session Who: its holds become free
	Absent                      // a refused resume: the session Who holds nothing
)

// String names the kind in a history's printout.
func (k Kind) String() string {
	switch k {
	case Lock:
		return "lock"
	case TryLock:
		return "trylock"
	case Unlock:
		return "unlock"
	case ResetKey:
		return "reset-key"
	case ResetSource:
		return "reset-source"
	case EndSession:
		return "end-session"
	case Absent:
		return "absent"
	}
	return "kind" + strconv.Itoa(int(k))
}

// Outcome is what the client was told.
type Outcome uint8

// The outcomes of an operation.
const (
	Unknown Outcome = iota // no answer: applied or not
	OK                     // '+'
	Fail                   // '-'
	Busy                   // '#' (TryLock only)
)

// String is the answer's byte as the client saw it; "?" when unknown.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "+"
	case Fail:
		return "-"
	case Busy:
		return "#"
	}
	return "?"
}

// AllKeys in an Op's Key stands for every key of the history: a reset by
// source, a session's end or a refused resume concern all of them.
const AllKeys = "\x00all"

// Op is one operation as its client saw it.
type Op struct {
	// Client numbers the client (zero-based) for the visualisation.
	Client int
	Kind   Kind
	// Key is the key, or AllKeys.
	Key string
	// Who is the holder the request acts as: the v1 source, or the
	// session's name. Sessions and v1 clients must not share names.
	Who string
	// Session is set for a request made on a session: its Unlock releases
	// only the session's own grant.
	Session bool
	// Token is the grant's token for a Lock or TryLock answered '+' (0
	// when the client cannot see it: v1), and the request's token for a
	// session's Unlock (0: any grant of the session).
	Token   uint64
	Outcome Outcome
	// Call and Return bound the instant the operation took effect. For an
	// Unknown outcome, Return is the last moment it could have: when the
	// server that had it was replaced, or the client settled it.
	Call, Return time.Time
}

// Recorder collects the operations of a run; it is safe for concurrent
// use.
type Recorder struct {
	mu   sync.Mutex // guards ops and open
	ops  []Op
	open map[int]struct{} // indexes of calls not yet returned
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{open: make(map[int]struct{})} }

// Call records that op was sent now and returns its handle for Return.
func (r *Recorder) Call(op Op) int {
	op.Call, op.Outcome = time.Now(), Unknown
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, op)
	i := len(r.ops) - 1
	r.open[i] = struct{}{}
	return i
}

// Return records the answer to the call h; token is the grant's token for
// a Lock or TryLock answered '+' (0 if unknown).
func (r *Recorder) Return(h int, o Outcome, token uint64) {
	r.ReturnAt(h, o, token, time.Now())
}

// ReturnAt is Return for an outcome learnt at a moment already past: a
// client that learns later what a call did (say, that the server was
// alive when it closed the connection) records it as of then.
func (r *Recorder) ReturnAt(h int, o Outcome, token uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.open[h]; !ok {
		return // settled already
	}
	delete(r.open, h)
	op := &r.ops[h]
	op.Outcome, op.Return = o, now
	if token != 0 && (op.Kind == Lock || op.Kind == TryLock) {
		op.Token = token
	}
}

// CallTime returns when the call h was made.
func (r *Recorder) CallTime(h int) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[h].Call
}

// Settle gives every call still open, of any client whose number keep
// accepts (nil: all), the outcome Unknown with Return at: none of them can
// take effect after at (the server that had them is gone, or their client
// has settled the keys since).
func (r *Recorder) Settle(at time.Time, keep func(client int) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.open {
		if keep != nil && !keep(r.ops[i].Client) {
			continue
		}
		delete(r.open, i)
		r.ops[i].Outcome, r.ops[i].Return = Unknown, at
	}
}

// Add records an operation that is already complete.
func (r *Recorder) Add(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Len returns the number of operations recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Ops returns a copy of the operations recorded; calls still open are
// given Return now, outcome Unknown.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := slices.Clone(r.ops)
	now := time.Now()
	for i := range r.open {
		ops[i].Return = now
	}
	return ops
}

// ErrIllegal is returned by Check when no legal order exists.
var ErrIllegal = errors.New("history is not linearizable as one mutex per key")

// Report says what Check looked at.
type Report struct {
	Ops     int // operations checked, after AllKeys were expanded
	Keys    int
	Grants  int // Lock and TryLock answered '+'
	Tokens  int // of those, with a known token
	Unknown int // operations checked as "applied or not"
	// Visualisation is the HTML file written on failure ("" otherwise).
	Visualisation string
}

// Check checks every operation recorded so far within timeout (0: no
// limit). A history porcupine cannot decide within the timeout is an
// error too, so a check that proves nothing never passes.
func (r *Recorder) Check(timeout time.Duration) (Report, error) {
	return Check(r.Ops(), timeout)
}

// Check checks ops; see Recorder.Check.
func Check(ops []Op, timeout time.Duration) (Report, error) {
	var rep Report
	if len(ops) == 0 {
		return rep, nil
	}
	keys := make(map[string]bool)
	for _, op := range ops {
		if op.Key != AllKeys {
			keys[op.Key] = true
		}
	}
	rep.Keys = len(keys)
	start := ops[0].Call
	for _, op := range ops {
		if op.Call.Before(start) {
			start = op.Call
		}
	}
	at := func(t time.Time) int64 { return int64(t.Sub(start)) }
	var hist []porcupine.Operation
	for _, op := range ops {
		targets := []string{op.Key}
		if op.Key == AllKeys {
			targets = targets[:0]
			for k := range keys {
				targets = append(targets, k)
			}
			slices.Sort(targets)
		}
		for _, k := range targets {
			in := op
			in.Key = k
			ret := op.Return
			if ret.Before(op.Call) {
				ret = op.Call // a settle time before the call: it took effect at once or never
			}
			hist = append(hist, porcupine.Operation{ClientId: op.Client, Input: in, Call: at(op.Call), Output: op.Outcome, Return: at(ret)})
			rep.Ops++
			switch {
			case op.Outcome == Unknown:
				rep.Unknown++
			case op.Outcome == OK && (op.Kind == Lock || op.Kind == TryLock):
				rep.Grants++
				if op.Token != 0 {
					rep.Tokens++
				}
			}
		}
	}
	m := Model()
	res, info := porcupine.CheckOperationsVerbose(m, hist, timeout)
	if res == porcupine.Ok {
		return rep, nil
	}
	dir, err := os.MkdirTemp("", "lock-history-")
	if err == nil {
		rep.Visualisation = filepath.Join(dir, "history.html")
		err = porcupine.VisualizePath(m, info, rep.Visualisation)
	}
	if err != nil {
		rep.Visualisation = ""
		err = fmt.Errorf("visualisation not written: %w", err)
	}
	if res == porcupine.Unknown {
		return rep, errors.Join(fmt.Errorf("porcupine could not decide %d operations within %v (visualisation %s)", rep.Ops, timeout, rep.Visualisation), err)
	}
	// Name the keys that fail alone, and list their operations in a
	// text file beside the visualisation, for a reader without a browser.
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range hist {
		k := op.Input.(Op).Key
		byKey[k] = append(byKey[k], op)
	}
	var bad []string
	var text strings.Builder
	for k, ops := range byKey {
		if porcupine.CheckOperationsTimeout(m, ops, timeout) != porcupine.Illegal {
			continue
		}
		bad = append(bad, strconv.Quote(k))
		slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		fmt.Fprintf(&text, "key %q (times in µs from the first call):\n", k)
		for _, op := range ops {
			fmt.Fprintf(&text, "  [%10.1f, %10.1f] client %2d  %s\n", float64(op.Call)/1e3, float64(op.Return)/1e3,
				op.ClientId, m.DescribeOperation(op.Input, op.Output))
		}
	}
	slices.Sort(bad)
	fmt.Fprintf(&text, "every operation:\n")
	all := slices.Clone(hist)
	slices.SortFunc(all, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	for _, op := range all {
		fmt.Fprintf(&text, "  [%10.1f, %10.1f] client %2d  %s\n", float64(op.Call)/1e3, float64(op.Return)/1e3,
			op.ClientId, m.DescribeOperation(op.Input, op.Output))
	}
	listing := ""
	if dir != "" && text.Len() > 0 {
		listing = filepath.Join(dir, "history.txt")
		if werr := os.WriteFile(listing, []byte(text.String()), 0o644); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return rep, errors.Join(fmt.Errorf("%w: keys %s; visualisation %s, listing %s", ErrIllegal, strings.Join(bad, ", "), rep.Visualisation, listing), err)
}

// state is one key: its holder ("" when free), the holder's token (0 when
// unknown) and the highest token granted on the key.
type state struct {
	holder string
	token  uint64
	high   uint64
}

// step returns the states a key in s can be in after op with outcome o;
// none when o is impossible.
func step(s state, op Op, o Outcome) []state {
	if o == Unknown {
		// Applied or not: not applied leaves s; applied is any outcome
		// that could have changed something.
		out := []state{s}
		switch op.Kind {
		case Lock, TryLock:
			if s.holder == "" {
				out = append(out, state{holder: op.Who, high: s.high})
			}
		default:
			for _, n := range step(s, op, OK) {
				if n != s {
					out = append(out, n)
				}
			}
		}
		return out
	}
	free := state{high: s.high}
	switch op.Kind {
	case Lock, TryLock:
		switch o {
		case OK:
			if s.holder != "" || op.Token != 0 && op.Token <= s.high {
				return nil
			}
			return []state{{holder: op.Who, token: op.Token, high: max(s.high, op.Token)}}
		case Busy:
			if op.Kind != TryLock || s.holder == "" {
				return nil
			}
			return []state{s}
		}
		return []state{s} // '-': reset while waiting, or refused
	case Unlock:
		mine := s.holder != "" && (!op.Session || s.holder == op.Who && (op.Token == 0 || s.token == 0 || s.token == op.Token))
		switch {
		case o == OK && mine:
			return []state{free}
		case o == Fail && !mine:
			return []state{s}
		case o == Fail && op.Session && s.token == 0 && op.Token != 0:
			return []state{s} // the holder's token is unknown: it may be another grant
		}
		return nil
	case ResetKey:
		return []state{free}
	case ResetSource, EndSession:
		if s.holder == op.Who {
			return []state{free}
		}
		return []state{s}
	case Absent:
		if s.holder == op.Who {
			return nil
		}
		return []state{s}
	}
	return nil
}

// Model is the porcupine model of one mutex per key, partitioned by key.
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := make(map[string][]porcupine.Operation)
			var order []string
			for _, op := range h {
				k := op.Input.(Op).Key
				if _, ok := byKey[k]; !ok {
					order = append(order, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, k := range order {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []any { return []any{state{}} },
		Step: func(st, in, out any) []any {
			var next []any
			for _, n := range step(st.(state), in.(Op), out.(Outcome)) {
				next = append(next, n)
			}
			return next
		},
		DescribeOperation: func(in, out any) string {
			op := in.(Op)
			s := fmt.Sprintf("%s %q by %s", op.Kind, op.Key, op.Who)
			if op.Token != 0 {
				s += " token " + strconv.FormatUint(op.Token, 10)
			}
			return s + " → " + out.(Outcome).String()
		},
		DescribeState: func(st any) string {
			s := st.(state)
			if s.holder == "" {
				return fmt.Sprintf("free (high token %d)", s.high)
			}
			return fmt.Sprintf("held by %s token %d (high %d)", s.holder, s.token, s.high)
		},
	}
	return nm.ToModel()
}
