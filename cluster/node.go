package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Leadership is a change of this node's leadership, reported to
// Config.OnLeadership. Every report first means "tear down what the last
// one built"; one with Leading set then means "this node leads, and every
// entry of earlier terms is applied".
type Leadership struct {
	// Leading is true from the barrier of a term this node leads until the
	// next report.
	Leading bool
	// Term is the term led (or, when not leading, the term last led).
	Term uint64
	// HighToken is the FSM's highest token after the barrier: the
	// engine's TokenFloor (see FirstToken).
	HighToken uint64
	// Journal proposes entries planned in Term; nil when not leading.
	Journal *Journal
}

// FirstToken is SPEC §8.2's first token of a new leader: the larger of the
// FSM's highest token + 1 and now in Unix microseconds, as a single node's
// start. (locker.Options.TokenFloor = high gives the same.)
func FirstToken(high uint64, now time.Time) uint64 {
	return max(high+1, uint64(max(now.UnixMicro(), 0)))
}

// Node is one node of the cluster: raft with its bolt store, snapshots
// and authenticated transport, and the FSM.
type Node struct {
	cfg    Config
	raft   *raft.Raft
	fsm    *FSM
	store  *raftboltdb.BoltStore
	trans  *transport
	stream *streamLayer
	notify chan bool
	done   chan struct{} // closed by Close: the watcher ends
	wg     sync.WaitGroup
	once   sync.Once
	verify verifier
	// members is the membership changes' state (members.go).
	members members
	// hadState: raft state was on disk at the start.
	hadState bool
	// importDone: no import is pending (or it is in the FSM); only the
	// watcher reads and writes it after Start.
	importDone bool
	// started is set once raft is: calls on the cluster port, which
	// opens first, are answered only then.
	started atomic.Bool
	// pending is the import of DATA_PATH's log still to be proposed
	// (migrate.go); nil without one.
	pending *Entry
	// startedAt is when Start began: the last contact of a node that
	// never heard from a leader.
	startedAt time.Time
}

// logCacheSize is the entries the leader keeps in memory for replication
// (Consul keeps 512): enough for every entry in flight to the followers.
const logCacheSize = 512

// nodeIDFile keeps the id a RAFT_DIR was first started with.
const nodeIDFile = "node-id"

// Start starts a node. A node with no raft state whose NodeID is in Peers
// bootstraps them; a node with state ignores Peers. Start refuses a
// RAFT_DIR that another process (or node) has open, or that was started
// with another NODE_ID.
func Start(c Config) (*Node, error) {
	cfg, peers, err := c.validated()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if err := os.MkdirAll(cfg.RaftDir, 0o700); err != nil {
		return nil, fmt.Errorf("RAFT_DIR: %w", err)
	}
	// bbolt locks raft.db; a second opener would wait for ever without
	// the timeout.
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.RaftDir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("RAFT_DIR %s is in use: another node has its raft.db open", cfg.RaftDir)
	}
	if err != nil {
		return nil, fmt.Errorf("RAFT_DIR %s: open raft.db: %w", cfg.RaftDir, err)
	}
	n := &Node{cfg: cfg, store: store, fsm: NewFSM(log), notify: make(chan bool, 8), done: make(chan struct{}),
		startedAt: time.Now()}
	n.verify.node = n
	n.members.info = map[string]probed{}
	if err := n.start(peers); err != nil {
		if n.trans != nil {
			n.trans.Close()
		}
		store.Close()
		return nil, err
	}
	n.wg.Add(2)
	go n.watch()
	go n.promote()
	return n, nil
}

func (n *Node) start(peers []Peer) error {
	cfg := n.cfg
	if err := claimNodeID(cfg.RaftDir, cfg.NodeID); err != nil {
		return err
	}
	hlog := newHCLog(cfg.Logger)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.RaftDir, 2, hlog.Named("snapshots"))
	if err != nil {
		return fmt.Errorf("RAFT_DIR %s: snapshots: %w", cfg.RaftDir, err)
	}
	stream, err := newStreamLayer(cfg.RaftAddress, cfg.RaftAdvertise, []byte(cfg.Token), cfg.Logger, cfg.OnForward, n.serveCall, cfg.TLS, cfg.OnWeb)
	if err != nil {
		return err
	}
	n.stream = stream
	n.trans = newTransport(raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: hlog.Named("net"),
	}))
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.HeartbeatTimeout
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.NotifyCh = n.notify
	rc.Logger = hlog
	had, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return fmt.Errorf("RAFT_DIR %s: %w", cfg.RaftDir, err)
	}
	n.hadState = had
	if err := n.prepareMigration(had, peers); err != nil {
		return err
	}
	n.importDone = n.pending == nil
	if had {
		if err := recoverPeers(rc, n, snaps); err != nil {
			return err
		}
	}
	if !had && len(peers) > 0 {
		var servers []raft.Server
		listed := false
		for _, p := range peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address)})
			listed = listed || p.ID == cfg.NodeID
		}
		if !listed {
			return fmt.Errorf("NODE_ID %q is not in CLUSTER_PEERS, and this node has no raft state to start from", cfg.NodeID)
		}
		if err := raft.BootstrapCluster(rc, n.store, n.store, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("bootstrap CLUSTER_PEERS: %w", err)
		}
		cfg.Logger.Info("cluster: bootstrapped", "node", cfg.NodeID, "peers", len(servers))
	}
	if !had && len(peers) == 0 {
		cfg.Logger.Info("cluster: no raft state and no CLUSTER_PEERS: waiting to be added by the leader", "node", cfg.NodeID, "address", cfg.RaftAdvertise)
	}
	// Replication reads each entry back to send it; the cache serves it
	// from memory instead of a bbolt read and a msgpack decode (it keeps
	// only entries the store has already written: durability is the
	// store's).
	logs, err := raft.NewLogCache(logCacheSize, failingLogs(n.store))
	if err != nil {
		return fmt.Errorf("raft log cache: %w", err)
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, n.store, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	n.started.Store(true)
	return nil
}

// claimNodeID records id in dir at the first start and refuses another id
// later: raft's vote and log belong to one node, and a node that comes back
// under a new name beside its old one could vote twice.
func claimNodeID(dir, id string) error {
	p := filepath.Join(dir, nodeIDFile)
	b, err := os.ReadFile(p)
	if err == nil {
		if old := strings.TrimSpace(string(b)); old != id {
			return fmt.Errorf("NODE_ID %q: RAFT_DIR %s belongs to node %q", id, dir, old)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("RAFT_DIR: %w", err)
	}
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("RAFT_DIR: %w", err)
	}
	_, err = f.WriteString(id + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("RAFT_DIR: record the node id: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// journal returns the Journal of an engine planning in term on this node.
func (n *Node) journal(term uint64) *Journal {
	j := NewJournal(n.raft, term, n.cfg.HeartbeatTimeout)
	j.applied = n.cfg.OnApply
	return j
}

// Raft returns the node's raft.
func (n *Node) Raft() *raft.Raft { return n.raft }

// FSM returns the node's state machine.
func (n *Node) FSM() *FSM { return n.fsm }

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Address returns the address the other nodes dial.
func (n *Node) Address() string { return n.cfg.RaftAdvertise }

// Close stops the node: raft (and its transport), the watcher (which
// reports the end of a leadership it had reported), then the store.
func (n *Node) Close() error {
	var err error
	n.once.Do(func() {
		// Raft's shutdown waits for its replication goroutines; one in an
		// RPC to a peer that went silent (its packets lost) would hold it
		// until the transport's timeout, one wedged in a pipeline for good
		// (transport.go). Closing raft's connections and pipelines once
		// the shutdown has begun ends them at once.
		shut := n.raft.Shutdown()
		n.stream.closeDials()
		n.trans.closePipelines()
		err = shut.Error()
		close(n.done)
		n.wg.Wait()
		// Raft closes the transport but not its pool of connections to
		// the others, whose readers there would wait on them.
		n.trans.CloseStreams()
		n.trans.Close()
		if cerr := n.store.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// watch turns raft's leadership notifications into Leadership reports. It
// trusts no notification's value: NotifyCh drops the older of two values
// when its buffer is full, so false→true can arrive as true alone. Every
// notification tears down, then re-reads raft's state, and a leader is
// reported only after a barrier in the term it read.
func (n *Node) watch() {
	defer n.wg.Done()
	var leading bool
	var term uint64
	report := func(l Leadership) {
		if f := n.cfg.OnLeadership; f != nil {
			f(l)
		}
	}
	for {
		select {
		case <-n.done:
			if leading {
				report(Leadership{Term: term})
			}
			return
		case <-n.notify:
		}
		if leading {
			leading = false
			n.cfg.Logger.Info("cluster: no longer leading", "node", n.cfg.NodeID, "term", term)
			report(Leadership{Term: term})
		}
		for n.raft.State() == raft.Leader {
			t := n.raft.CurrentTerm()
			start := time.Now()
			if err := n.raft.Barrier(n.cfg.HeartbeatTimeout).Error(); err != nil {
				n.cfg.Logger.Warn("cluster: takeover barrier failed", "node", n.cfg.NodeID, "term", t, "err", err)
				select {
				case <-n.done:
					return
				case <-time.After(n.cfg.HeartbeatTimeout / 10):
				}
				continue
			}
			if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != t {
				continue
			}
			if !n.importDone {
				if err := n.importState(t); err != nil {
					n.cfg.Logger.Error("cluster: the import of DATA_PATH's log failed; tried again", "node", n.cfg.NodeID, "term", t, "err", err)
					select {
					case <-n.done:
						return
					case <-time.After(n.cfg.HeartbeatTimeout):
					}
					continue
				}
				n.importDone = true
			}
			leading, term = true, t
			high := n.fsm.HighToken()
			n.cfg.Logger.Info("cluster: leading", "node", n.cfg.NodeID, "term", t, "high_token", high, "barrier", time.Since(start))
			report(Leadership{Leading: true, Term: t, HighToken: high, Journal: n.journal(t)})
			break
		}
	}
}

// newHCLog returns an hclog.Logger that writes into log: raft logs through
// hclog, at DEBUG to stderr if left alone.
func newHCLog(log *slog.Logger) hclog.Logger {
	level := hclog.Info
	if log.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name: "raft", Level: level, JSONFormat: true, Output: &hclogWriter{log: log},
		DisableTime: true,
	})
}

// hclogWriter receives hclog's JSON lines, one per Write, and logs each
// through slog with its level, message and fields.
type hclogWriter struct {
	log *slog.Logger
}

func (w *hclogWriter) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimSpace(string(p)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			w.log.Info("raft: " + line)
			continue
		}
		level := slog.LevelInfo
		switch m["@level"] {
		case "trace", "debug":
			level = slog.LevelDebug
		case "warn":
			level = slog.LevelWarn
		case "error":
			level = slog.LevelError
		}
		msg, _ := m["@message"].(string)
		module, _ := m["@module"].(string)
		attrs := []any{"module", module}
		for k, v := range m {
			if !strings.HasPrefix(k, "@") {
				attrs = append(attrs, k, v)
			}
		}
		w.log.Log(context.Background(), level, "raft: "+msg, attrs...)
	}
	return len(p), nil
}
