package client

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The session frames of SPEC §7 (docs/protocol.md), all integers
// big-endian:
//
//	open    : [16][version=1][ttl_ms:4][resume:8][sourceSize:1][source][authSize:1][auth]
//	opened  : [status:1][ttl_ms:4][session:8]                         13 bytes
//	request : [action:1][id:4][token:8][keySize:1][key]
//	answer  : [id:4][status:1][token:8]                               13 bytes
//
// Sizes are signed bytes: at most 127 bytes of key, source or auth.
const (
	sessionAction  = 16
	sessionVersion = 1
	openedSize     = 13
	answerSize     = 13
	requestHeader  = 14
	maxRequest     = requestHeader + maxField
	maxField       = 127
)

// The actions of a session request. 1 to 5 are v1's numbers.
const (
	actLock          byte = 1
	actUnlock        byte = 2
	actResetByKey    byte = 3
	actResetBySource byte = 4
	actTryLock       byte = 5
	actCancel        byte = 6
	actPing          byte = 7
	actClose         byte = 8
)

// actionName names an action in errors.
func actionName(a byte) string {
	switch a {
	case actLock:
		return "lock"
	case actUnlock:
		return "unlock"
	case actResetByKey:
		return "reset key"
	case actResetBySource:
		return "reset source"
	case actTryLock:
		return "trylock"
	case actCancel:
		return "cancel"
	case actPing:
		return "ping"
	case actClose:
		return "close"
	}
	return fmt.Sprintf("action %d", a)
}

// errFieldTooLong is returned for a source, auth token or key that does
// not fit its one-byte size.
var errFieldTooLong = errors.New("longer than 127 bytes")

// appendOpen appends an open frame. resume 0 opens a new session.
func appendOpen(b []byte, ttlMS uint32, resume uint64, source, auth string) ([]byte, error) {
	if len(source) > maxField {
		return b, fmt.Errorf("source of %d bytes: %w", len(source), errFieldTooLong)
	}
	if len(auth) > maxField {
		return b, fmt.Errorf("auth token of %d bytes: %w", len(auth), errFieldTooLong)
	}
	b = append(b, sessionAction, sessionVersion)
	b = binary.BigEndian.AppendUint32(b, ttlMS)
	b = binary.BigEndian.AppendUint64(b, resume)
	b = append(b, byte(len(source)))
	b = append(b, source...)
	b = append(b, byte(len(auth)))
	b = append(b, auth...)
	return b, nil
}

// opened is the server's answer to an open frame.
type opened struct {
	status  byte
	ttlMS   uint32
	session uint64
}

func decodeOpened(b [openedSize]byte) opened {
	return opened{
		status:  b[0],
		ttlMS:   binary.BigEndian.Uint32(b[1:5]),
		session: binary.BigEndian.Uint64(b[5:13]),
	}
}

// appendRequest appends one request. The key's length is checked by the
// caller (validKey): the size byte must not be negative.
func appendRequest(b []byte, action byte, id uint32, token uint64, key string) []byte {
	b = append(b, action)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint64(b, token)
	b = append(b, byte(len(key)))
	return append(b, key...)
}

// answer is one answer to a request.
type answer struct {
	id     uint32
	status byte
	token  uint64
}

func decodeAnswer(b []byte) answer {
	_ = b[answerSize-1]
	return answer{
		id:     binary.BigEndian.Uint32(b[0:4]),
		status: b[4],
		token:  binary.BigEndian.Uint64(b[5:13]),
	}
}
