package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults and bounds of SPEC §8.6.
const (
	DefaultRaftAddress       = ":22121"
	DefaultHeartbeatTimeout  = 500 * time.Millisecond
	MinHeartbeatTimeout      = 100 * time.Millisecond
	MaxHeartbeatTimeout      = 10 * time.Second
	DefaultSnapshotThreshold = 8192
	MinTokenLen              = 16
	MaxTokenLen              = 127
)

// Config configures a node. Each field is named after the variable that
// sets it (SPEC §8.6), and Validate names that variable when it is wrong.
type Config struct {
	// NodeID is this node's id (NODE_ID), the same across restarts.
	NodeID string
	// RaftAddress is the cluster port's listen address (RAFT_ADDRESS);
	// empty means DefaultRaftAddress.
	RaftAddress string
	// RaftAdvertise is the address the other nodes dial (RAFT_ADVERTISE);
	// empty means this node's address in Peers, else RaftAddress's host,
	// else the host name, with RaftAddress's port.
	RaftAdvertise string
	// Peers is CLUSTER_PEERS, "id=host:port,…": the first voters, which a
	// node with no raft state whose NodeID is listed bootstraps.
	Peers string
	// Token is CLUSTER_TOKEN, 16–127 bytes: every cluster-port connection
	// proves it knows it.
	Token string
	// RaftDir is RAFT_DIR: raft's log, vote and term (raft.db), the node
	// id (node-id) and snapshots/.
	RaftDir string
	// HeartbeatTimeout is RAFT_HEARTBEAT_TIMEOUT (100 ms – 10 s); zero
	// means DefaultHeartbeatTimeout. Heartbeat and election timeouts are
	// it, the leader lease half of it.
	HeartbeatTimeout time.Duration
	// SnapshotThreshold is RAFT_SNAPSHOT_THRESHOLD, the entries between
	// snapshots; zero means DefaultSnapshotThreshold.
	SnapshotThreshold uint64
	// DataPath is DATA_PATH: a single node's log, moved into the cluster
	// by a node of a new cluster of one (migrate.go); "" for none.
	DataPath string
	// TLS, when set, is the cluster port's mutual TLS (RAFT_TLS_*).
	TLS *PeerTLS
	// Logger receives the node's and raft's logs; nil means slog.Default.
	Logger *slog.Logger
	// OnLeadership is called with every change of this node's leadership,
	// in order, from one goroutine (see Leadership). It may be nil.
	OnLeadership func(Leadership)
	// OnForward receives every client connection a follower forwarded to
	// this node over the cluster port, authenticated, with the client's
	// own address from its preamble. It must return quickly (hand the
	// connection to a goroutine of its own); nil refuses them.
	OnForward func(c net.Conn, remote string)
}

// Peer is one voter of CLUSTER_PEERS.
type Peer struct {
	ID      string
	Address string
}

// ParsePeers parses CLUSTER_PEERS: "id=host:port" items separated by
// commas, ids and addresses unique.
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	ids, addrs := map[string]bool{}, map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		id, address, ok := strings.Cut(item, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("CLUSTER_PEERS: %q is not id=host:port", item)
		}
		if err := checkHostPort(address); err != nil {
			return nil, fmt.Errorf("CLUSTER_PEERS: %q: %w", item, err)
		}
		if ids[id] || addrs[address] {
			return nil, fmt.Errorf("CLUSTER_PEERS: %q names an id or an address twice", item)
		}
		ids[id], addrs[address] = true, true
		peers = append(peers, Peer{ID: id, Address: address})
	}
	return peers, nil
}

// checkHostPort accepts a host (name or address) and a port of 1–65535.
func checkHostPort(address string) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("address %q has no host", address)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q: port must be 1–65535", address)
	}
	return nil
}

// validated returns c with its defaults filled in, its peers parsed, or an
// error naming the variable that is wrong.
func (c Config) validated() (Config, []Peer, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.NodeID == "" || strings.ContainsAny(c.NodeID, ",= \t\n") {
		return c, nil, fmt.Errorf("NODE_ID %q: want a non-empty id without commas, '=' or spaces", c.NodeID)
	}
	if c.RaftDir == "" {
		return c, nil, fmt.Errorf("RAFT_DIR is required in a cluster")
	}
	if n := len(c.Token); n < MinTokenLen || n > MaxTokenLen {
		return c, nil, fmt.Errorf("CLUSTER_TOKEN is %d bytes: want %d–%d", n, MinTokenLen, MaxTokenLen)
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if c.HeartbeatTimeout < MinHeartbeatTimeout || c.HeartbeatTimeout > MaxHeartbeatTimeout {
		return c, nil, fmt.Errorf("RAFT_HEARTBEAT_TIMEOUT %v: want %v – %v", c.HeartbeatTimeout, MinHeartbeatTimeout, MaxHeartbeatTimeout)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.RaftAddress == "" {
		c.RaftAddress = DefaultRaftAddress
	}
	host, port, err := net.SplitHostPort(c.RaftAddress)
	if err != nil {
		return c, nil, fmt.Errorf("RAFT_ADDRESS %q: %w", c.RaftAddress, err)
	}
	var peers []Peer
	if c.Peers != "" {
		if peers, err = ParsePeers(c.Peers); err != nil {
			return c, nil, err
		}
	}
	var listed string
	for _, p := range peers {
		if p.ID == c.NodeID {
			listed = p.Address
		}
	}
	switch {
	case c.RaftAdvertise != "":
	case listed != "":
		c.RaftAdvertise = listed
	case host != "" && !net.ParseIP(host).IsUnspecified():
		c.RaftAdvertise = c.RaftAddress
	default:
		name, err := os.Hostname()
		if err != nil {
			return c, nil, fmt.Errorf("RAFT_ADVERTISE is unset and the host name is unknown: %w", err)
		}
		c.RaftAdvertise = net.JoinHostPort(name, port)
	}
	if err := checkHostPort(c.RaftAdvertise); err != nil {
		return c, nil, fmt.Errorf("RAFT_ADVERTISE: %w", err)
	}
	if listed != "" && listed != c.RaftAdvertise {
		// Raft names this node by its advertised address: two names
		// for one node would make it a stranger in its own cluster.
		return c, nil, fmt.Errorf("RAFT_ADVERTISE %q differs from NODE_ID %q's address %q in CLUSTER_PEERS", c.RaftAdvertise, c.NodeID, listed)
	}
	return c, peers, nil
}

// Validate reports what is wrong with c, naming the variable.
func (c Config) Validate() error {
	_, _, err := c.validated()
	return err
}
