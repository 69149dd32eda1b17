// Package wire serves Locking-Center's TCP protocol (docs/protocol.md) on
// top of a locker.Table. A connection is v1 or a session by its first byte:
//
//   - v1: one request frame per connection, answered with one byte, then
//     the connection is closed;
//   - a session (first byte 16): one connection carrying many requests,
//     answered out of order by request id, owning the keys it takes.
//
// The frames themselves are encoded and decoded by the client module's
// package github.com/locking-center/locking-center/client/protocol, so
// that client and server share one codec byte for byte while the client
// module needs nothing of the server's; this file and session.go re-export
// that codec under the names the server has always used (Frame, Decode,
// Open, Answer...), as aliases, not copies.
//
// Guarantees: every size is checked before anything is allocated or read
// past it; a malformed frame is answered '-' and harms nobody else; a grant
// whose answer could not be written is handed on (locker.Table.Release),
// never left held by nobody.
package wire

import "github.com/locking-center/locking-center/client/protocol"

// Action is the first byte of a frame (protocol.Action).
type Action = protocol.Action

// The actions. 1–5 are v1's (and a session's too); 6–8 exist in sessions
// only; SessionOpen is the first byte of a session connection.
const (
	Lock          = protocol.Lock
	Unlock        = protocol.Unlock
	ResetByKey    = protocol.ResetByKey
	ResetBySource = protocol.ResetBySource
	TryLock       = protocol.TryLock
	Cancel        = protocol.Cancel
	Ping          = protocol.Ping
	Close         = protocol.Close
	SessionOpen   = protocol.SessionOpen
)

// The answer bytes.
const (
	AnswerOK     = protocol.AnswerOK
	AnswerFail   = protocol.AnswerFail
	AnswerLocked = protocol.AnswerLocked
)

// MaxField is the longest key or source, in bytes.
const MaxField = protocol.MaxField

// MaxFrame is the longest frame: action, two sizes and two full fields.
const MaxFrame = protocol.MaxFrame

// Errors from Decode and Append, the codec's own values (errors.Is holds
// across both names). ErrShort is not a protocol violation: the frame is
// not complete yet.
var (
	ErrShort         = protocol.ErrShort
	ErrUnknownAction = protocol.ErrUnknownAction
	ErrNegativeSize  = protocol.ErrNegativeSize
	ErrEmptyKey      = protocol.ErrEmptyKey
	ErrFieldTooLong  = protocol.ErrFieldTooLong
)

// Frame is one v1 request (protocol.Frame).
type Frame = protocol.Frame

// Decode parses the frame at the start of b (protocol.Decode).
func Decode(b []byte) (Frame, int, error) { return protocol.Decode(b) }

// DecodeServer is Decode as the server reads v1 frames, accepting the
// original server's frames too (protocol.DecodeServer).
func DecodeServer(b []byte) (Frame, int, error) { return protocol.DecodeServer(b) }
