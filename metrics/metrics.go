// Package metrics keeps Locking-Center's Prometheus metrics (the README's
// Metrics section) and writes their exposition. The lock table, the TCP
// server and the write-ahead log count into one Metrics value through
// methods that do not allocate and are safe for concurrent use; gauges
// are read from a source at scrape time. It knows nothing of HTTP routes
// or pages: the web port serves WritePrometheus on /metrics.
package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/locking-center/locking-center/client/protocol"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/locking-center/locking-center/wire"
)

// Metrics are Locking-Center's Prometheus metrics. One value is created
// at start and shared: the lock table feeds it through ObserveWait and
// ObserveHold (locker.Options.OnGrant / OnRelease), the TCP server through
// the wire.Observer methods, the write-ahead log through ObserveFsync, and
// the gauges come from the source given to SetSource.
type Metrics struct {
	set *vm.Set
	wal bool

	requests    [len(actionNames)][wire.Results]*vm.Counter
	resetKey    *vm.Counter
	resetSource *vm.Counter
	rejected    *vm.Counter
	wait, hold  *vm.PrometheusHistogram
	fsync       *vm.PrometheusHistogram // nil without a log

	// Gauges and the log's figures are read from the source when scraped,
	// by refresh.
	held, waiters, stuck, oldest, conns *vm.Gauge
	sessions                            *vm.Gauge
	sessionExpirations                  *vm.Counter
	walSize                             *vm.Gauge
	walCompactions, walErrors           *vm.Counter

	// A cluster node's metrics (Options.Cluster); nil otherwise.
	cluster *clusterMetrics

	// mu guards source and clusterSource and makes refresh and the write
	// that follows it one step, so that concurrent scrapes do not
	// interleave.
	mu            sync.Mutex
	source        func() Gauges
	clusterSource func() ClusterGauges
}

// Options configures New.
type Options struct {
	// WAL adds the write-ahead log's metrics (wal_*): set it when
	// DATA_PATH is set.
	WAL bool
	// Cluster adds a cluster node's metrics (raft_*,
	// forwarded_connections, ambiguous_total, session_ttl_restarts_total;
	// SPEC §8.8); a single node's exposition stays as it is without it.
	Cluster bool
}

// Gauges are the figures read at scrape time.
type Gauges struct {
	Held, Waiting int
	// Stuck counts the keys held for STUCK_AFTER or longer; OldestAge is
	// how long the longest-held key has been held (0 when none is).
	Stuck     int
	OldestAge time.Duration
	Sessions  int
	// SessionExpirations counts the sessions ended by their TTL.
	SessionExpirations uint64
	// Connections is the lock port's connections being served; -1 when
	// not known.
	Connections int
	// WALSize, WALCompactions and WALErrors are the log's figures (with
	// Options.WAL).
	WALSize                   int64
	WALCompactions, WALErrors uint64
}

// The label values of requests_total, indexed by actionIndex. An action
// byte the protocol does not know is counted as "unknown" so that bad
// clients cannot grow the series.
var (
	actionNames = [...]string{"unknown", "lock", "unlock", "reset_key", "reset_source", "trylock", "cancel", "ping", "close", "open"}
)

// Bucket bounds, in seconds. Waits and holds range from a millisecond to
// hours (a stuck key); an fsync from a tenth of a millisecond to a second.
var (
	durationBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
	fsyncBuckets    = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
)

// family describes one metric family for the exposition's HELP and TYPE
// lines. The library writes samples only; the words are ours.
type family struct {
	name, typ, help string
}

const prefix = "locking_center_"

// families lists every metric the README lists; the HELP text says what one
// sample counts and in which unit, as Prometheus' conventions ask.
var families = []family{
	{"held_keys", "gauge", "Keys held right now."},
	{"waiters", "gauge", "Lock requests queued behind a holder right now."},
	{"stuck_keys", "gauge", "Keys held for STUCK_AFTER or longer."},
	{"oldest_hold_age_seconds", "gauge", "Seconds since the longest-held key was granted; 0 when no key is held."},
	{"requests_total", "counter", "TCP requests served, v1 and in sessions, by action and result (ok, fail, locked, invalid, hangup)."},
	{"resets_total", "counter", "Resets done over TCP or the web, by key or by source."},
	{"connections", "gauge", "TCP connections being served, waiters included."},
	{"connections_rejected_total", "counter", "TCP connections refused because MAX_CONNECTIONS was reached."},
	{"wait_duration_seconds", "histogram", "Seconds a lock request waited before it was granted."},
	{"hold_duration_seconds", "histogram", "Seconds a key was held, from grant to release."},
	{"sessions", "gauge", "Open sessions, connected or not."},
	{"session_expirations_total", "counter", "Sessions ended by their TTL since start."},
	{"wal_fsync_duration_seconds", "histogram", "Seconds one fsync of the write-ahead log took."},
	{"wal_size_bytes", "gauge", "Size of the write-ahead log file in bytes."},
	{"wal_compactions_total", "counter", "Compactions of the write-ahead log since start."},
	{"wal_errors_total", "counter", "Write-ahead log write, fsync or compaction errors since start."},
	{"raft_is_leader", "gauge", "1 while this node leads the cluster, else 0."},
	{"raft_term", "gauge", "This node's current raft term."},
	{"raft_commit_index", "gauge", "The last raft log index this node knows to be committed."},
	{"raft_applied_index", "gauge", "The last raft log index this node has applied."},
	{"raft_leader_changes_total", "counter", "Times the leader this node knows of changed to another node since start."},
	{"raft_apply_duration_seconds", "histogram", "Seconds from proposing an entry (raft.Apply) to its commit on a majority and its apply on this leader: what a grant pays for consensus."},
	{"raft_last_contact_seconds", "gauge", "Seconds since this node last heard from a leader; 0 on the leader, the time since start if it never has."},
	{"raft_peers", "gauge", "Members of the cluster's configuration, by suffrage (voter, nonvoter)."},
	{"forwarded_connections", "gauge", "Client connections this follower forwards to the leader right now."},
	{"ambiguous_total", "counter", "Requests left without an answer because the outcome of their change was not known (the connection was closed), by action."},
	{"session_ttl_restarts_total", "counter", "Session TTLs restarted by this node at its takeovers since start."},
}

// applyBuckets bound raft_apply_duration_seconds: a commit costs a
// round trip and an fsync on a majority, from a tenth of a millisecond on
// a fast LAN to seconds on an overloaded one.
var applyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// clusterMetrics are a cluster node's metrics.
type clusterMetrics struct {
	isLeader, term, commit, applied, lastContact *vm.Gauge
	voters, nonvoters, forwarded                 *vm.Gauge
	leaderChanges, ttlRestarts                   *vm.Counter
	apply                                        *vm.PrometheusHistogram
	ambiguous                                    [len(actionNames)]*vm.Counter
}

// ClusterGauges are a cluster node's figures read at scrape time.
type ClusterGauges struct {
	Leader                          bool
	Term, CommitIndex, AppliedIndex uint64
	// LastContact is how long ago this node last heard from a leader.
	LastContact       time.Duration
	Voters, Nonvoters int
	// Forwarded counts the client connections this node forwards now.
	Forwarded int
	// LeaderChanges and SessionTTLRestarts are counts since start.
	LeaderChanges, SessionTTLRestarts uint64
}

// New creates the metrics, each once, in a set of their own.
func New(o Options) *Metrics {
	s := vm.NewSet()
	m := &Metrics{set: s, wal: o.WAL}
	for a, an := range actionNames {
		for r := range wire.Results {
			m.requests[a][r] = s.NewCounter(fmt.Sprintf(`%srequests_total{action=%q,result=%q}`, prefix, an, r))
		}
	}
	m.resetKey = s.NewCounter(prefix + `resets_total{by="key"}`)
	m.resetSource = s.NewCounter(prefix + `resets_total{by="source"}`)
	m.rejected = s.NewCounter(prefix + "connections_rejected_total")
	m.wait = s.NewPrometheusHistogramExt(prefix+"wait_duration_seconds", durationBuckets)
	m.hold = s.NewPrometheusHistogramExt(prefix+"hold_duration_seconds", durationBuckets)
	m.held = s.NewGauge(prefix+"held_keys", nil)
	m.waiters = s.NewGauge(prefix+"waiters", nil)
	m.stuck = s.NewGauge(prefix+"stuck_keys", nil)
	m.oldest = s.NewGauge(prefix+"oldest_hold_age_seconds", nil)
	m.conns = s.NewGauge(prefix+"connections", nil)
	m.sessions = s.NewGauge(prefix+"sessions", nil)
	m.sessionExpirations = s.NewCounter(prefix + "session_expirations_total")
	if o.WAL {
		m.fsync = s.NewPrometheusHistogramExt(prefix+"wal_fsync_duration_seconds", fsyncBuckets)
		m.walSize = s.NewGauge(prefix+"wal_size_bytes", nil)
		m.walCompactions = s.NewCounter(prefix + "wal_compactions_total")
		m.walErrors = s.NewCounter(prefix + "wal_errors_total")
	}
	if o.Cluster {
		c := &clusterMetrics{
			isLeader:      s.NewGauge(prefix+"raft_is_leader", nil),
			term:          s.NewGauge(prefix+"raft_term", nil),
			commit:        s.NewGauge(prefix+"raft_commit_index", nil),
			applied:       s.NewGauge(prefix+"raft_applied_index", nil),
			leaderChanges: s.NewCounter(prefix + "raft_leader_changes_total"),
			apply:         s.NewPrometheusHistogramExt(prefix+"raft_apply_duration_seconds", applyBuckets),
			lastContact:   s.NewGauge(prefix+"raft_last_contact_seconds", nil),
			voters:        s.NewGauge(prefix+`raft_peers{suffrage="voter"}`, nil),
			nonvoters:     s.NewGauge(prefix+`raft_peers{suffrage="nonvoter"}`, nil),
			forwarded:     s.NewGauge(prefix+"forwarded_connections", nil),
			ttlRestarts:   s.NewCounter(prefix + "session_ttl_restarts_total"),
		}
		for a, an := range actionNames {
			c.ambiguous[a] = s.NewCounter(fmt.Sprintf(`%sambiguous_total{action=%q}`, prefix, an))
		}
		m.cluster = c
	}
	return m
}

// ObserveApply records how long one entry this leader proposed took to be
// committed and applied (cluster.Config.OnApply). It does nothing when
// the metrics were made without Cluster.
func (m *Metrics) ObserveApply(d time.Duration) {
	if m.cluster != nil {
		m.cluster.apply.Update(d.Seconds())
	}
}

// Ambiguous counts one request left without an answer because the outcome
// of its change is not known (wire.AmbiguityObserver). It does nothing
// when the metrics were made without Cluster.
func (m *Metrics) Ambiguous(a protocol.Action) {
	if m.cluster != nil {
		m.cluster.ambiguous[actionIndex(a)].Inc()
	}
}

// SetClusterSource makes fn the source of a cluster node's figures, read
// at scrape time.
func (m *Metrics) SetClusterSource(fn func() ClusterGauges) {
	m.mu.Lock()
	m.clusterSource = fn
	m.mu.Unlock()
}

// Request counts one TCP request (wire.Observer). A successful TCP reset
// also counts in resets_total, as a web reset does.
func (m *Metrics) Request(a protocol.Action, r wire.Result) {
	if r >= wire.Results {
		return // no such result: nothing to count it as
	}
	m.requests[actionIndex(a)][r].Inc()
	if r == wire.ResultOK {
		switch a {
		case protocol.ResetByKey:
			m.resetKey.Inc()
		case protocol.ResetBySource:
			m.resetSource.Inc()
		}
	}
}

// ResetByKey counts one reset by key done from the web (a TCP one is
// counted by Request).
func (m *Metrics) ResetByKey() { m.resetKey.Inc() }

// ResetBySource counts one reset by source done from the web.
func (m *Metrics) ResetBySource() { m.resetSource.Inc() }

// actionIndex is a's position in actionNames: actions 1 to 8 in order,
// then the session's open frame; 0 for any other byte.
func actionIndex(a protocol.Action) int {
	switch {
	case a >= protocol.Lock && a <= protocol.Close:
		return int(a)
	case a == protocol.SessionOpen:
		return len(actionNames) - 1
	}
	return 0
}

// ConnectionRejected counts one TCP connection refused at the limit
// (wire.Observer).
func (m *Metrics) ConnectionRejected() { m.rejected.Inc() }

// ObserveWait records how long a granted request waited
// (locker.Options.OnGrant).
func (m *Metrics) ObserveWait(d time.Duration) { m.wait.Update(d.Seconds()) }

// ObserveHold records how long a released key was held
// (locker.Options.OnRelease).
func (m *Metrics) ObserveHold(d time.Duration) { m.hold.Update(d.Seconds()) }

// ObserveFsync records one fsync of the write-ahead log. It does nothing
// when the metrics were made without WAL.
func (m *Metrics) ObserveFsync(d time.Duration) {
	if m.fsync != nil {
		m.fsync.Update(d.Seconds())
	}
}

var (
	_ wire.Observer          = (*Metrics)(nil)
	_ wire.AmbiguityObserver = (*Metrics)(nil)
)

// SetSource makes fn the source of the gauges read at scrape time (the
// web port's view of the table: what the dashboard shows, the metrics
// show).
func (m *Metrics) SetSource(fn func() Gauges) {
	m.mu.Lock()
	m.source = fn
	m.mu.Unlock()
}

// refresh reads the gauges from their sources. Called with mu held.
func (m *Metrics) refresh() {
	if c := m.cluster; c != nil && m.clusterSource != nil {
		g := m.clusterSource()
		c.isLeader.Set(0)
		if g.Leader {
			c.isLeader.Set(1)
		}
		c.term.Set(float64(g.Term))
		c.commit.Set(float64(g.CommitIndex))
		c.applied.Set(float64(g.AppliedIndex))
		c.lastContact.Set(max(g.LastContact.Seconds(), 0))
		c.voters.Set(float64(g.Voters))
		c.nonvoters.Set(float64(g.Nonvoters))
		c.forwarded.Set(float64(g.Forwarded))
		c.leaderChanges.Set(g.LeaderChanges)
		c.ttlRestarts.Set(g.SessionTTLRestarts)
	}
	if m.source == nil {
		return
	}
	g := m.source()
	m.sessions.Set(float64(g.Sessions))
	m.sessionExpirations.Set(g.SessionExpirations)
	m.held.Set(float64(g.Held))
	m.waiters.Set(float64(g.Waiting))
	m.stuck.Set(float64(g.Stuck))
	m.oldest.Set(max(g.OldestAge.Seconds(), 0))
	if g.Connections >= 0 {
		m.conns.Set(float64(g.Connections))
	}
	if m.wal {
		m.walSize.Set(float64(g.WALSize))
		m.walCompactions.Set(g.WALCompactions)
		m.walErrors.Set(g.WALErrors)
	}
}

// WritePrometheus writes the exposition: the set's samples, each family
// preceded by its HELP and TYPE lines.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	m.mu.Lock()
	m.refresh()
	var raw bytes.Buffer
	m.set.WritePrometheus(&raw)
	m.mu.Unlock()
	var out bytes.Buffer
	annotate(&out, raw.Bytes())
	_, err := w.Write(out.Bytes())
	return err
}

// ServeHTTP serves GET /metrics.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = m.WritePrometheus(w) // a write error means the scraper left
}

var familyByName = func() map[string]family {
	byName := make(map[string]family, len(families))
	for _, f := range families {
		byName[prefix+f.name] = f
	}
	return byName
}()

// annotate copies the samples in raw to w, writing HELP and TYPE before the
// first sample of each family. The set writes a family's samples together.
func annotate(w *bytes.Buffer, raw []byte) {
	sc := bufio.NewScanner(bytes.NewReader(raw))
	last := ""
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		f, ok := familyByName[name]
		if !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(name, suffix); cut {
					if f, ok = familyByName[base]; ok && f.typ == "histogram" {
						break
					}
					ok = false
				}
			}
		}
		if ok && prefix+f.name != last {
			last = prefix + f.name
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", last, f.help, last, f.typ)
		}
		w.WriteString(line)
		w.WriteByte('\n')
	}
}
