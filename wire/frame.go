// Package wire speaks Locking-Center's TCP protocol: one request frame per
// connection, answered with one byte, then the connection is closed.
//
// The frame, every field one byte unless said otherwise:
//
//	+--------+---------+-----------------+------------+---------------------+
//	| action | keySize | key (keySize B) | sourceSize | source (sourceSize) |
//	+--------+---------+-----------------+------------+---------------------+
//
// Sizes are signed bytes (0..127). The answer is '+' (success), '-' (failure)
// or '#' (a TryLock that did not win). Server serves it on top of a
// locker.Table; the codec (Frame, Decode, Append) is shared with the client.
package wire

import (
	"errors"
	"fmt"
)

// Action is the first byte of a frame.
type Action byte

// The actions of SPEC §1. Extensions use numbers from 16 up.
const (
	Lock          Action = 1
	Unlock        Action = 2
	ResetByKey    Action = 3
	ResetBySource Action = 4
	TryLock       Action = 5
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
