package protocol

import (
	"encoding/binary"
	"fmt"
)

// The session frames (docs/protocol.md, "Sessions"), all integers
// big-endian, sizes signed bytes as in v1:
//
//	open    : | 16 | version=1 | ttl_ms:4 | resume:8 | sourceSize | source | authSize | auth |
//	answer  : | status | ttl_ms:4 | session:8 |                               (13 bytes)
//	request : | action | id:4 | token:8 | keySize | key |
//	answer  : | id:4 | status | token:8 |                                    (13 bytes)

// SessionVersion is the session protocol version this package speaks.
const SessionVersion = 1

// MaxPending bounds the requests pending (arrived, not yet answered) on one
// session connection: the server drops a connection that has one more.
// Cancel is never pending.
const MaxPending = 1024

// Sizes of the fixed parts of the session frames.
const (
	OpenAnswerSize    = 13
	RequestHeaderSize = 14 // action, id, token, keySize
	AnswerSize        = 13
	// OpenHeaderSize is the open frame up to and including sourceSize.
	OpenHeaderSize = 1 + 1 + 4 + 8 + 1
)

// Open is the first frame of a session connection.
type Open struct {
	Version byte
	// TTLMillis is the TTL asked for; 0 asks for the server's default.
	TTLMillis uint32
	// Resume names the session to take back; 0 opens a new one.
	Resume uint64
	Source string
	Auth   string
}

// Append appends the encoded open frame to b; it fails when a field is too
// long for its one-byte size.
func (o Open) Append(b []byte) ([]byte, error) {
	if len(o.Source) > MaxField {
		return b, fmt.Errorf("source of %d bytes: %w", len(o.Source), ErrFieldTooLong)
	}
	if len(o.Auth) > MaxField {
		return b, fmt.Errorf("auth token of %d bytes: %w", len(o.Auth), ErrFieldTooLong)
	}
	b = append(b, byte(SessionOpen), o.Version)
	b = binary.BigEndian.AppendUint32(b, o.TTLMillis)
	b = binary.BigEndian.AppendUint64(b, o.Resume)
	b = append(b, byte(len(o.Source)))
	b = append(b, o.Source...)
	b = append(b, byte(len(o.Auth)))
	return append(b, o.Auth...), nil
}

// DecodeOpen parses the open frame at the start of b (its first byte is
// 16) and returns it with the number of bytes it took, ErrShort when b
// holds only part of it, or ErrNegativeSize. It does not check the version.
func DecodeOpen(b []byte) (Open, int, error) {
	var o Open
	if len(b) < 2 {
		return o, 0, ErrShort
	}
	o.Version = b[1]
	if len(b) < OpenHeaderSize {
		return o, 0, ErrShort
	}
	o.TTLMillis = binary.BigEndian.Uint32(b[2:])
	o.Resume = binary.BigEndian.Uint64(b[6:])
	ss := int8(b[14])
	if ss < 0 {
		return o, 0, fmt.Errorf("source size %d: %w", ss, ErrNegativeSize)
	}
	at := OpenHeaderSize + int(ss)
	if len(b) < at+1 {
		return o, 0, ErrShort
	}
	as := int8(b[at])
	if as < 0 {
		return o, 0, fmt.Errorf("auth size %d: %w", as, ErrNegativeSize)
	}
	end := at + 1 + int(as)
	if len(b) < end {
		return o, 0, ErrShort
	}
	o.Source = string(b[OpenHeaderSize:at])
	o.Auth = string(b[at+1 : end])
	return o, end, nil
}

// OpenAnswer is the server's answer to Open.
type OpenAnswer struct {
	Status    byte // AnswerOK or AnswerFail
	TTLMillis uint32
	Session   uint64
}

// Append appends the 13-byte answer to b.
func (a OpenAnswer) Append(b []byte) []byte {
	b = append(b, a.Status)
	b = binary.BigEndian.AppendUint32(b, a.TTLMillis)
	return binary.BigEndian.AppendUint64(b, a.Session)
}

// DecodeOpenAnswer parses a 13-byte open answer.
func DecodeOpenAnswer(b []byte) (OpenAnswer, error) {
	if len(b) < OpenAnswerSize {
		return OpenAnswer{}, ErrShort
	}
	return OpenAnswer{Status: b[0], TTLMillis: binary.BigEndian.Uint32(b[1:]), Session: binary.BigEndian.Uint64(b[5:])}, nil
}

// Request is one request of a session.
type Request struct {
	Action Action
	ID     uint32
	// Token names a grant for Unlock (0: whichever this session holds on
	// the key); 0 for every other action.
	Token uint64
	// Key is the key, or the source for ResetBySource; empty for Ping,
	// Close and Cancel.
	Key string
	// BadSize is set by DecodeRequest when keySize was negative: no key
	// bytes followed, and the request must be answered '-'.
	BadSize bool
}

// Append appends the encoded request to b; it fails when the key is too
// long for its one-byte size.
func (r Request) Append(b []byte) ([]byte, error) {
	if len(r.Key) > MaxField {
		return b, fmt.Errorf("key of %d bytes: %w", len(r.Key), ErrFieldTooLong)
	}
	b = append(b, byte(r.Action))
	b = binary.BigEndian.AppendUint32(b, r.ID)
	b = binary.BigEndian.AppendUint64(b, r.Token)
	b = append(b, byte(len(r.Key)))
	return append(b, r.Key...), nil
}

// RequestSize returns the size of the request whose header starts b
// (at least RequestHeaderSize bytes).
func RequestSize(hdr []byte) int {
	ks := int8(hdr[13])
	if ks < 0 {
		return RequestHeaderSize
	}
	return RequestHeaderSize + int(ks)
}

// DecodeRequest parses the request at the start of b and returns it with
// the number of bytes it took, or ErrShort when b holds only part of it. A
// negative key size is not an error here: it sets BadSize (the session
// goes on).
func DecodeRequest(b []byte) (Request, int, error) {
	if len(b) < RequestHeaderSize {
		return Request{}, 0, ErrShort
	}
	r := Request{Action: Action(b[0]), ID: binary.BigEndian.Uint32(b[1:]), Token: binary.BigEndian.Uint64(b[5:])}
	n := RequestSize(b)
	if int8(b[13]) < 0 {
		r.BadSize = true
		return r, n, nil
	}
	if len(b) < n {
		return Request{}, 0, ErrShort
	}
	r.Key = string(b[RequestHeaderSize:n])
	return r, n, nil
}

// Answer is the server's answer to one session request.
type Answer struct {
	ID     uint32
	Status byte // AnswerOK, AnswerFail or AnswerLocked
	// Token is the grant's token in a '+' to Lock and TryLock, the
	// released grant's token in a '+' to Unlock, 0 otherwise.
	Token uint64
}

// Append appends the 13-byte answer to b.
func (a Answer) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, a.ID)
	b = append(b, a.Status)
	return binary.BigEndian.AppendUint64(b, a.Token)
}

// DecodeAnswer parses a 13-byte answer.
func DecodeAnswer(b []byte) (Answer, error) {
	if len(b) < AnswerSize {
		return Answer{}, ErrShort
	}
	return Answer{ID: binary.BigEndian.Uint32(b), Status: b[4], Token: binary.BigEndian.Uint64(b[5:])}, nil
}
