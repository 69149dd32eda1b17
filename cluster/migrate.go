package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/walog"
)

// Moving a single node into a cluster (SPEC §8.7): a node started with
// DATA_PATH, CLUSTER_PEERS naming it alone and an empty RAFT_DIR reads the
// log, bootstraps, and as its first leader writes one import entry (every
// live hold with its token, every session, the floor = the log's highest
// token + 1) before it serves anything; then it renames the log
// DATA_PATH.migrated. The other nodes join with CLUSTER_JOIN.
//
// A crash anywhere in between is safe. RAFT_DIR/migrating (naming the
// log) is written before the bootstrap and removed after the rename: a
// node that finds it with raft state reads the log again and imports it
// unless the FSM already has it (its highest token reached the floor: the
// import is the first entry that raises it, and nothing is served before
// it). A node with raft state and no marker never reads DATA_PATH: if a
// log is there it refuses to start (the log's holds would be silently
// dropped), and if there is none it ignores the variable.

// migratingFile marks an unfinished migration in RAFT_DIR.
const migratingFile = "migrating"

// migratedSuffix is appended to the log's name once it is in the cluster.
const migratedSuffix = ".migrated"

// prepareMigration decides what DATA_PATH means at this start and, when a
// log is to be imported, reads it into n.pending.
func (n *Node) prepareMigration(had bool, peers []Peer) error {
	cfg := n.cfg
	if cfg.DataPath == "" {
		return nil
	}
	marker := filepath.Join(cfg.RaftDir, migratingFile)
	_, merr := os.Stat(marker)
	inFlight := merr == nil
	_, lerr := os.Stat(cfg.DataPath)
	logThere := lerr == nil
	if lerr != nil && !errors.Is(lerr, os.ErrNotExist) {
		return fmt.Errorf("DATA_PATH: %w", lerr)
	}
	switch {
	case had && !inFlight && logThere:
		return fmt.Errorf("DATA_PATH %s: this node has raft state in RAFT_DIR, and a single node's log moves only into a new cluster of one; "+
			"its holds would be dropped: unset DATA_PATH (if the log was moved in already, rename it to %s)", cfg.DataPath, cfg.DataPath+migratedSuffix)
	case had && !inFlight:
		cfg.Logger.Info("cluster: DATA_PATH ignored: this node has raft state, and no log is there to move in", "data_path", cfg.DataPath)
		return nil
	case had && !logThere:
		// Renamed, not yet unmarked: the migration is over.
		return finishMigration(cfg.RaftDir, "", cfg.Logger)
	case !had:
		if len(peers) != 1 || peers[0].ID != cfg.NodeID {
			return errors.New("DATA_PATH: a single node's log moves only into a new cluster of one: set CLUSTER_PEERS to this node alone " +
				"(the others then join with CLUSTER_JOIN), or unset DATA_PATH")
		}
		if !logThere {
			return fmt.Errorf("DATA_PATH %s: no log there to move into the cluster; unset DATA_PATH", cfg.DataPath)
		}
	}
	e, err := ReadLog(cfg.DataPath, cfg.Logger)
	if err != nil {
		return fmt.Errorf("DATA_PATH: %w", err)
	}
	if !had {
		if err := writeFileSynced(cfg.RaftDir, migratingFile, cfg.DataPath+"\n"); err != nil {
			return fmt.Errorf("RAFT_DIR: mark the migration: %w", err)
		}
	}
	cfg.Logger.Info("cluster: moving a single node's log into the cluster", "data_path", cfg.DataPath,
		"holds", len(e.Holds), "sessions", len(e.Sessions), "floor", e.Floor)
	n.pending = e
	return nil
}

// ReadLog reads a single node's log (locked against its server while it
// is read, as that server locks it) into an import entry: every live hold
// with the token the single node would restore it under, the sessions that
// hold them, and the floor, the log's highest token + 1.
func ReadLog(path string, log *slog.Logger) (*Entry, error) {
	t := locker.New(locker.Options{})
	e := &Entry{Kind: KindImport}
	sessions := map[locker.SessionID]bool{}
	l, err := walog.Open(path, walog.Options{Logger: log}, func(key string, h *walog.Holder) error {
		holder := locker.Holder{Source: h.Source, Remote: h.Remote, Session: locker.SessionID(h.Session),
			Origin: locker.Origin{Action: h.Action, ID: h.ID}}
		token, err := t.Restore(key, holder, h.Token, h.Since, h.TTL)
		if err != nil {
			return err
		}
		h.Token = token
		e.Holds = append(e.Holds, ImportHold{Key: key, Grant: locker.Grant{Token: token, Holder: holder, Since: h.Since, TTL: h.TTL}})
		if id := holder.Session; id != 0 && !sessions[id] {
			sessions[id] = true
			e.Sessions = append(e.Sessions, ImportSession{ID: id, Source: h.Source, Remote: h.Remote, TTL: h.TTL})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	high := max(l.HighToken(), t.LastToken())
	if err := l.Close(); err != nil {
		return nil, fmt.Errorf("close %s: %w", path, err)
	}
	e.Floor = high + 1
	return e, nil
}

// importState proposes the pending import in term t, unless the FSM has it
// already, then renames the log and clears the marker.
func (n *Node) importState(t uint64) error {
	e := n.pending
	if n.fsm.HighToken() < e.Floor {
		if err := NewJournal(n.raft, t, changeTimeout).Propose(e); err != nil {
			return fmt.Errorf("propose the import: %w", err)
		}
		n.cfg.Logger.Info("cluster: DATA_PATH's log is in the cluster", "holds", len(e.Holds), "sessions", len(e.Sessions), "floor", e.Floor)
	}
	to := n.cfg.DataPath + migratedSuffix
	if err := os.Rename(n.cfg.DataPath, to); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rename DATA_PATH to %s: %w", to, err)
	}
	if err := syncDir(filepath.Dir(n.cfg.DataPath)); err != nil {
		return fmt.Errorf("rename DATA_PATH to %s: %w", to, err)
	}
	n.pending = nil
	return finishMigration(n.cfg.RaftDir, to, n.cfg.Logger)
}

// finishMigration removes the marker.
func finishMigration(dir, renamed string, log *slog.Logger) error {
	if err := os.Remove(filepath.Join(dir, migratingFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("RAFT_DIR: clear the migration mark: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("RAFT_DIR: %w", err)
	}
	if renamed != "" {
		log.Info("cluster: migration done; the single node's log is kept as "+renamed+" and no longer read", "path", renamed)
	}
	return nil
}

// writeFileSynced writes dir/name through a temporary file, synced, and
// syncs dir.
func writeFileSynced(dir, name, content string) error {
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(content)
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
	return err
}

// peersFile is raft's recovery file: RAFT_DIR/peers.json.
const peersFile = "peers.json"

// recoverPeers recovers a cluster that lost its quorum, as Consul does:
// when RAFT_DIR/peers.json exists ([{"id","address","non_voter"}], raft's
// ReadConfigJSON), the node's configuration is replaced by it
// (raft.RecoverCluster) and the file is removed. Every surviving node is
// stopped, given the same file, and started again.
func recoverPeers(rc *raft.Config, n *Node, snaps raft.SnapshotStore) error {
	p := filepath.Join(n.cfg.RaftDir, peersFile)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	conf, err := raft.ReadConfigJSON(p)
	if err != nil {
		return fmt.Errorf("RAFT_DIR %s: %w", p, err)
	}
	var ids []string
	for _, s := range conf.Servers {
		ids = append(ids, string(s.ID)+"="+string(s.Address))
	}
	n.cfg.Logger.Warn("cluster: recovering from peers.json: the configuration is replaced", "peers", strings.Join(ids, ","))
	// The FSM raft restores into here is thrown away (RecoverCluster's
	// contract); the node's own is filled by NewRaft.
	if err := raft.RecoverCluster(rc, NewFSM(n.cfg.Logger), n.store, n.store, snaps, n.trans, conf); err != nil {
		return fmt.Errorf("RAFT_DIR %s: recover the cluster: %w", p, err)
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("RAFT_DIR %s: remove after the recovery: %w", p, err)
	}
	n.cfg.Logger.Info("cluster: recovered from peers.json; the file is removed", "peers", len(conf.Servers))
	return nil
}
