// Package protocol is the codec of Locking-Center's TCP protocol
// (docs/protocol.md in the server's repository): the v1 frame, the answer
// bytes and the session frames, encoded and decoded, nothing more. It
// opens no socket and holds no state, so the client and the server share
// it byte for byte (the server's package wire re-exports it).
//
// A connection is v1 or a session by its first byte:
//
//   - v1: one request frame per connection, answered with one byte, then
//     the connection is closed;
//   - a session (first byte 16): one connection carrying many requests,
//     answered out of order by request id (session.go has its frames).
//
// The v1 frame, every field one byte unless said otherwise:
//
//	+--------+---------+-----------------+------------+---------------------+
//	| action | keySize | key (keySize B) | sourceSize | source (sourceSize) |
//	+--------+---------+-----------------+------------+---------------------+
//
// Sizes are signed bytes (0..127). The answer is '+' (success), '-' (failure)
// or '#' (a TryLock that did not win). Frames of the original Locking-Center
// server, whose Unlock and ResetByKey carry no source field and whose
// ResetBySource carries no key field, are accepted too (DecodeServer).
//
// Guarantees: every decoder checks each size before it allocates or reads
// past it, never reads beyond its input, and reports an incomplete frame
// (ErrShort) apart from a malformed one; every encoder refuses a field too
// long for its one-byte size rather than truncating it.
package protocol

import (
	"errors"
	"fmt"
)

// Action is the first byte of a frame.
type Action byte

// The actions. 1–5 are v1's (and a session's too); 6–8 exist in sessions
// only; SessionOpen is the first byte of a session connection.
const (
	Lock          Action = 1
	Unlock        Action = 2
	ResetByKey    Action = 3
	ResetBySource Action = 4
	TryLock       Action = 5
	Cancel        Action = 6
	Ping          Action = 7
	Close         Action = 8
	SessionOpen   Action = 16
)

// String returns the action's name as used in logs and metrics.
func (a Action) String() string {
	switch a {
	case Lock:
		return "lock"
	case Unlock:
		return "unlock"
	case ResetByKey:
		return "reset_key"
	case ResetBySource:
		return "reset_source"
	case TryLock:
		return "trylock"
	case Cancel:
		return "cancel"
	case Ping:
		return "ping"
	case Close:
		return "close"
	case SessionOpen:
		return "open"
	}
	return fmt.Sprintf("unknown(%d)", byte(a))
}

// The answer bytes.
const (
	AnswerOK     byte = '+'
	AnswerFail   byte = '-'
	AnswerLocked byte = '#'
)

// MaxField is the longest key or source, in bytes.
const MaxField = 127

// MaxFrame is the longest frame: action, two sizes and two full fields.
const MaxFrame = 3 + 2*MaxField

// Errors from Decode and Append. ErrShort is not a protocol violation: the
// frame is not complete yet.
var (
	ErrShort         = errors.New("frame incomplete")
	ErrUnknownAction = errors.New("unknown action")
	ErrNegativeSize  = errors.New("negative size")
	ErrEmptyKey      = errors.New("empty key")
	ErrFieldTooLong  = errors.New("field longer than 127 bytes")
)

// Frame is one request.
type Frame struct {
	Action Action
	Key    string
	Source string
}

// Valid reports whether the frame may be sent or served: a known action,
// fields of at most 127 bytes, and a key for every action but ResetBySource.
func (f Frame) Valid() error {
	switch f.Action {
	case Lock, Unlock, ResetByKey, TryLock:
		if f.Key == "" {
			return fmt.Errorf("%s: %w", f.Action, ErrEmptyKey)
		}
	case ResetBySource:
	default:
		return fmt.Errorf("action %d: %w", byte(f.Action), ErrUnknownAction)
	}
	return f.checkSizes()
}

// checkSizes fails when a field is too long for its one-byte size.
func (f Frame) checkSizes() error {
	if len(f.Key) > MaxField {
		return fmt.Errorf("key of %d bytes: %w", len(f.Key), ErrFieldTooLong)
	}
	if len(f.Source) > MaxField {
		return fmt.Errorf("source of %d bytes: %w", len(f.Source), ErrFieldTooLong)
	}
	return nil
}

// Append appends the encoded frame to b. It does not check the action; it
// fails only when a field is too long to encode.
func (f Frame) Append(b []byte) ([]byte, error) {
	if err := f.checkSizes(); err != nil {
		return b, err
	}
	b = append(b, byte(f.Action), byte(len(f.Key)))
	b = append(b, f.Key...)
	b = append(b, byte(len(f.Source)))
	b = append(b, f.Source...)
	return b, nil
}

// Decode parses the frame at the start of b and returns it with the number
// of bytes it took. It returns ErrShort when b holds only part of a frame,
// and ErrNegativeSize as soon as a size byte is negative, so a server can
// answer without waiting for bytes that will never make sense. Decode only
// parses: the caller checks the frame with Valid.
func Decode(b []byte) (Frame, int, error) {
	if len(b) < 2 {
		return Frame{}, 0, ErrShort
	}
	keySize := int8(b[1])
	if keySize < 0 {
		return Frame{}, 0, fmt.Errorf("key size %d: %w", keySize, ErrNegativeSize)
	}
	srcAt := 2 + int(keySize)
	if len(b) < srcAt+1 {
		return Frame{}, 0, ErrShort
	}
	srcSize := int8(b[srcAt])
	if srcSize < 0 {
		return Frame{}, 0, fmt.Errorf("source size %d: %w", srcSize, ErrNegativeSize)
	}
	end := srcAt + 1 + int(srcSize)
	if len(b) < end {
		return Frame{}, 0, ErrShort
	}
	return Frame{
		Action: Action(b[0]),
		Key:    string(b[2:srcAt]),
		Source: string(b[srcAt+1 : end]),
	}, end, nil
}

// DecodeServer is Decode as the server reads v1 frames: it also accepts the
// original server's frames. Unlock and ResetByKey are complete once the key
// has arrived (a source field after it is the caller's to discard), and a
// ResetBySource whose first size byte is not 0 takes that field as the
// source. The returned Frame has an empty Source for the first two.
func DecodeServer(b []byte) (Frame, int, error) {
	if len(b) < 2 {
		return Frame{}, 0, ErrShort
	}
	a := Action(b[0])
	size := int8(b[1])
	if (a == Unlock || a == ResetByKey || a == ResetBySource && size != 0) && size >= 0 {
		end := 2 + int(size)
		if len(b) < end {
			return Frame{}, 0, ErrShort
		}
		f := Frame{Action: a}
		if a == ResetBySource {
			f.Source = string(b[2:end])
		} else {
			f.Key = string(b[2:end])
		}
		return f, end, nil
	}
	return Decode(b)
}
