package metrics

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/locking-center/locking-center/wire"
)

// value reads one sample from an exposition; -1 when absent.
func value(exposition, series string) float64 {
	for line := range strings.Lines(exposition) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}

func TestCountsByActionAndResult(t *testing.T) {
	m := New(Options{})
	m.Request(200, wire.ResultInvalid) // a byte no protocol knows
	m.Request(protocol.TryLock, wire.ResultLocked)
	m.Request(protocol.ResetByKey, wire.ResultOK)
	m.Request(protocol.Lock, wire.Results) // no such result: not counted
	m.ConnectionRejected()
	m.SetSource(func() Gauges { return Gauges{Held: 3, OldestAge: 2 * time.Second, Connections: -1} })
	var buf bytes.Buffer
	if err := m.WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for series, want := range map[string]float64{
		`locking_center_requests_total{action="unknown",result="invalid"}`: 1,
		`locking_center_requests_total{action="trylock",result="locked"}`:  1,
		`locking_center_requests_total{action="reset_key",result="ok"}`:    1,
		`locking_center_resets_total{by="key"}`:                            1,
		`locking_center_connections_rejected_total`:                        1,
		`locking_center_held_keys`:                                         3,
		`locking_center_oldest_hold_age_seconds`:                           2,
	} {
		if got := value(out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	problems, err := promlint.New(strings.NewReader(out)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func BenchmarkCountRequest(b *testing.B) {
	m := New(Options{})
	b.ReportAllocs()
	for b.Loop() {
		m.Request(protocol.Lock, wire.ResultOK)
		m.ObserveWait(time.Millisecond)
	}
}

// TestLintSeesMissingHelp shows that the HELP lines are ours to write: the
// library's bare samples fail promlint.
func TestLintSeesMissingHelp(t *testing.T) {
	m := New(Options{})
	var raw bytes.Buffer
	m.set.WritePrometheus(&raw)
	problems, err := promlint.New(&raw).Lint()
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Fatal("promlint found nothing in an exposition without HELP lines; is it really linting?")
	}
}

// TestClusterMetrics: a cluster node's metrics, under their SPEC §8.8
// names and types, pass promlint; a single node has none of them.
func TestClusterMetrics(t *testing.T) {
	m := New(Options{Cluster: true})
	m.SetSource(func() Gauges { return Gauges{Connections: 4} })
	m.SetClusterSource(func() ClusterGauges {
		return ClusterGauges{Leader: true, Term: 7, CommitIndex: 120, AppliedIndex: 119, LastContact: 0,
			Voters: 3, Nonvoters: 1, Forwarded: 2, LeaderChanges: 5, SessionTTLRestarts: 9}
	})
	m.ObserveApply(3 * time.Millisecond)
	m.Ambiguous(protocol.Lock)
	m.Ambiguous(protocol.SessionOpen)
	var buf bytes.Buffer
	if err := m.WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for series, want := range map[string]float64{
		`locking_center_raft_is_leader`:                                 1,
		`locking_center_raft_term`:                                      7,
		`locking_center_raft_commit_index`:                              120,
		`locking_center_raft_applied_index`:                             119,
		`locking_center_raft_leader_changes_total`:                      5,
		`locking_center_raft_apply_duration_seconds_count`:              1,
		`locking_center_raft_apply_duration_seconds_bucket{le="0.005"}`: 1,
		`locking_center_raft_last_contact_seconds`:                      0,
		`locking_center_raft_peers{suffrage="voter"}`:                   3,
		`locking_center_raft_peers{suffrage="nonvoter"}`:                1,
		`locking_center_forwarded_connections`:                          2,
		`locking_center_ambiguous_total{action="lock"}`:                 1,
		`locking_center_ambiguous_total{action="open"}`:                 1,
		`locking_center_ambiguous_total{action="unlock"}`:               0,
		`locking_center_session_ttl_restarts_total`:                     9,
		`locking_center_connections`:                                    4,
	} {
		if got := value(out, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	for name, typ := range map[string]string{"raft_is_leader": "gauge", "raft_leader_changes_total": "counter",
		"raft_apply_duration_seconds": "histogram", "raft_peers": "gauge", "ambiguous_total": "counter",
		"session_ttl_restarts_total": "counter", "forwarded_connections": "gauge"} {
		if !strings.Contains(out, "# TYPE locking_center_"+name+" "+typ+"\n") {
			t.Errorf("no TYPE line %s %s", name, typ)
		}
	}
	problems, err := promlint.New(strings.NewReader(out)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	single := New(Options{})
	single.ObserveApply(time.Millisecond) // no-ops without Cluster
	single.Ambiguous(protocol.Lock)
	buf.Reset()
	if err := single.WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "raft_") || strings.Contains(buf.String(), "ambiguous") {
		t.Fatalf("a single node shows cluster metrics:\n%s", buf.String())
	}
}
