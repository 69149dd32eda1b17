// Package api holds the types of the web port's JSON API (docs: the
// README's "JSON API"): what the server writes and what lc-cli reads, one
// definition for both, so that the two cannot drift. It has no
// dependencies beyond the standard library.
package api

import "time"

// HeldKey is one held key in the JSON list (GET /api/v1/keys).
type HeldKey struct {
	// Key is the held key; Source and Remote name its holder.
	Key    string `json:"key"`
	Source string `json:"source"`
	Remote string `json:"remote"`
	// KeyBase64 and SourceBase64 carry the raw bytes (standard base64)
	// of a key or source that is not UTF-8, which Key and Source can
	// only show with U+FFFD in place of the bytes; absent otherwise.
	KeyBase64    string `json:"key_base64,omitempty"`
	SourceBase64 string `json:"source_base64,omitempty"`
	// Since is when the holder was granted the key (RFC 3339, UTC).
	Since time.Time `json:"since"`
	// Waiters is the number of requests queued for the key.
	Waiters int `json:"waiters"`
	// Token is the fencing token of the holder's grant.
	Token uint64 `json:"token"`
	// Session is the holding session's id (16 hex digits), null for a
	// v1 hold.
	Session *string `json:"session"`
}

// KeyDetail is one held key with its wait queue (GET /api/v1/keys/{key}).
type KeyDetail struct {
	HeldKey
	// Queue is the wait queue in order, [] when nobody waits.
	Queue []Waiter `json:"queue"`
}

// Waiter is one queued request in the JSON API.
type Waiter struct {
	// Source and Remote name the waiting requester.
	Source string `json:"source"`
	Remote string `json:"remote"`
	// SourceBase64 is the raw source in base64 when it is not UTF-8.
	SourceBase64 string `json:"source_base64,omitempty"`
	// Since is when it joined the queue (RFC 3339, UTC).
	Since time.Time `json:"since"`
}

// ResetResult is the answer to POST /api/v1/reset/key and /reset/source.
type ResetResult struct {
	// Released is the number of keys whose holder was dropped.
	Released int `json:"released"`
	// Refused is the number of waiters that were answered '-'.
	Refused int `json:"refused"`
}

// Session is one session in GET /api/v1/sessions.
type Session struct {
	// Session is the session's id, 16 hex digits.
	Session string `json:"session"`
	// Source names its client; Remote is the address of its connection
	// (the last one while disconnected).
	Source string `json:"source"`
	Remote string `json:"remote"`
	// Connected says whether a connection carries the session now.
	Connected bool `json:"connected"`
	// TTLMillis is its TTL; ExpiresInMillis the time left before it
	// expires, counting down while the session is silent.
	TTLMillis       int64 `json:"ttl_ms"`
	ExpiresInMillis int64 `json:"expires_in_ms"`
	// Holds counts the keys it holds; Waiting its pending Locks.
	Holds   int `json:"holds"`
	Waiting int `json:"waiting"`
}

// JoinHeader carries a joining node's proof that it knows CLUSTER_TOKEN
// on POST /api/v1/cluster/nodes, in place of WEB_PASSWORD:
// "t=<unix seconds>,mac=<hex HMAC-SHA256(CLUSTER_TOKEN, "join\n" t "\n" body)>",
// accepted within 5 minutes of the server's clock.
const JoinHeader = "X-LC-Cluster-Join"

// ClusterNode is the body of POST /api/v1/cluster/nodes (a node to add)
// and its answer.
type ClusterNode struct {
	// ID is the node's NODE_ID; Address its cluster port
	// (RAFT_ADVERTISE), host:port.
	ID      string `json:"id"`
	Address string `json:"address,omitempty"`
}

// TransferResult is the answer to POST /api/v1/cluster/transfer: the
// leader after the hand-over ("" if not known yet).
type TransferResult struct {
	Leader string `json:"leader"`
}
