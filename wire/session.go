package wire

import "github.com/locking-center/locking-center/client/protocol"

// The session frames (docs/protocol.md, "Sessions"), re-exported from
// protocol; sessionconn.go serves them.

// SessionVersion is the session protocol version this package speaks.
const SessionVersion = protocol.SessionVersion

// Sizes of the fixed parts of the session frames.
const (
	OpenAnswerSize    = protocol.OpenAnswerSize
	RequestHeaderSize = protocol.RequestHeaderSize
	AnswerSize        = protocol.AnswerSize
	// openHeaderSize is the open frame up to and including sourceSize.
	openHeaderSize = protocol.OpenHeaderSize
)

// Open is the first frame of a session connection (protocol.Open).
type Open = protocol.Open

// DecodeOpen parses the open frame at the start of b (protocol.DecodeOpen).
func DecodeOpen(b []byte) (Open, int, error) { return protocol.DecodeOpen(b) }

// OpenAnswer is the server's answer to Open (protocol.OpenAnswer).
type OpenAnswer = protocol.OpenAnswer

// DecodeOpenAnswer parses a 13-byte open answer (protocol.DecodeOpenAnswer).
func DecodeOpenAnswer(b []byte) (OpenAnswer, error) { return protocol.DecodeOpenAnswer(b) }

// Request is one request of a session (protocol.Request).
type Request = protocol.Request

// RequestSize returns the size of the request whose header starts hdr
// (protocol.RequestSize).
func RequestSize(hdr []byte) int { return protocol.RequestSize(hdr) }

// DecodeRequest parses the request at the start of b (protocol.DecodeRequest).
func DecodeRequest(b []byte) (Request, int, error) { return protocol.DecodeRequest(b) }

// Answer is the server's answer to one session request (protocol.Answer).
type Answer = protocol.Answer

// DecodeAnswer parses a 13-byte answer (protocol.DecodeAnswer).
func DecodeAnswer(b []byte) (Answer, error) { return protocol.DecodeAnswer(b) }
