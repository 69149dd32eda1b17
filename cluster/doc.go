// Package cluster is the core of the replicated mode (SPEC §8): the lock
// table's durable state kept by hashicorp/raft on 3 or 5 nodes.
//
// What it guarantees:
//
//   - The FSM is locker.State, the function a single node's log is folded
//     with: every node that applied the same entries holds the same holds,
//     sessions and highest token. Apply reads no clock and draws no random
//     number; ids, tokens, since and TTLs travel in the entries.
//   - An entry is applied whole or not at all. One that contradicts the
//     state (a grant of a held key, a release of a grant that is not
//     current, a grant to a session that is not open, …) is refused on
//     every node alike, logged at ERROR, and changes nothing.
//   - Every entry carries the term its engine planned it in, and an entry
//     raft stored under another term is skipped: an engine of an earlier
//     term, on a node deposed and elected again, gets nothing into a later
//     one. Releases name the grant's token.
//   - Journal.Commit returns nil only once the batch is committed on a
//     majority and applied on this node. Its errors say what is known: one
//     wrapping ErrNotApplied (ErrNotLeader, ErrStaleTerm, a contradiction)
//     means nothing changed anywhere; one wrapping ErrOutcomeUnknown means
//     the entry may still commit, and the caller must not say otherwise.
//   - A node reports it leads (Config.OnLeadership) only after a barrier
//     in the term it leads, so the FSM's highest token then covers every
//     token acknowledged before; every report first ends the last one.
//   - Every connection on the cluster port proves both ways that it knows
//     CLUSTER_TOKEN (HMAC-SHA256 over two fresh nonces) before anything
//     else is read from it; one that cannot never reaches raft.
//   - Raft's log, vote and term are on disk (bbolt in RAFT_DIR, locked
//     against a second opener, which is refused); RAFT_DIR belongs to the
//     NODE_ID it was first started with.
//
// An entry is a version byte (1), a kind, the planned term, then what the
// kind carries (entry.go); a snapshot is the applied index and the state
// as an import entry. Decode checks every length and count against the
// bytes left before it allocates.
//
// Frontend (frontend.go) serves the client port on top of them: the
// leader's engine, a locker.Table restored from the FSM after the takeover
// barrier (tokens from the FSM's highest, holds with their tokens, every
// session with its TTL restarted), served by a wire.Server of its own that
// is shut down, with every connection it serves, when the leadership ends
// or a proposal fails while still leading (then rebuilt); forwarding of a
// follower's connections to the leader over the cluster port, after the
// handshake, with the client's address in a preamble; and VerifyLeader
// rounds, shared, before answers that change nothing.
//
// Membership (members.go): changes run on the leader one at a time; a
// follower forwards them over the cluster port (a call, calls.go). A node
// is added as a non-voter, only once the leader has reached it on its
// cluster port and it answered with the id it claimed, and promoted to
// voter once caught up; a removal that would leave fewer than 2 voters is
// refused. A join (join.go) proves CLUSTER_TOKEN with an HMAC over its
// body and time.
//
// Migration (migrate.go): a new cluster of one imports a single node's log
// in one entry before it serves anything, then renames the log; a crash in
// between imports it at the next start unless the FSM has it. A node with
// raft state refuses a log at DATA_PATH rather than drop its holds.
// RAFT_DIR/peers.json, when present, replaces the configuration
// (raft.RecoverCluster) and is removed.
//
// With PeerTLS (tls.go) every cluster-port connection is mutual TLS before
// the token handshake.
//
// Not here yet: follower reads on the web port, the cluster's metrics.
package cluster
