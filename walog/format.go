package walog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// The file is a header followed by records, all integers big-endian.
//
// Header (16 bytes), written once when the file is made:
//
//	0                8          12         16
//	+----------------+----------+----------+
//	| magic          | version  | crc32c   |
//	| "LCWALOG\n"    | uint32   | of 0..12 |
//	+----------------+----------+----------+
//
// Record, version 2 (12-byte frame + payload):
//
//	0          4          8          12
//	+----------+----------+----------+----------------------------+
//	| crc32c   | length   | ^length  | payload (length bytes)     |
//	| of 4..end| uint32   | uint32   |                            |
//	+----------+----------+----------+----------------------------+
//
// The checksum covers the length fields and the payload, so no byte of a
// record is unchecked. The complemented copy of the length lets replay tell
// a torn tail (the length is intact and points past the end of the file)
// from a damaged length (the two copies disagree): the first is cut off, the
// second refuses to start. Without it a flipped bit in a length near the end
// could make whole acknowledged records look torn and be silently dropped.
//
// A payload is one or more operations, each starting with its type byte (0
// is never valid, so zeroed space is recognisable). A record is the unit of
// atomicity: one engine batch (a handover's release and grant, a session
// end's releases) is one record, so a crash keeps all of it or none.
//
//	grant   (3): | 3 | since: int64 Unix ns | token: uint64 | session: uint64 |
//	             | ttl: uint32 ms | key | source | remote |
//	grant   (6): | 6 | since | token | session | ttl | action: uint8 | id: uint32 |
//	             | key | source | remote |      a session's grant, with the request
//	                                            that made it (action 1 Lock, 5 TryLock)
//	release (4): | 4 | token: uint64 | key |          token 0: whatever grant of key
//	mark    (5): | 5 | token: uint64 |                every token ever given is <= this
//
// where each string is | length: uint16 | bytes |. Session 0 is a v1 hold.
//
// Version 1 files (written before fencing tokens) have an 8-byte frame
// (crc32c, uint16 length, uint16 ^length) and one operation per record:
//
//	acquire (1): | 1 | since: int64 Unix ns | key | source | remote |
//	release (2): | 2 | key |
//
// They are still read; their holds get new tokens, and the file is then
// rewritten in version 2 before anything is appended. Readers refuse
// versions and operation types they do not know rather than guess.
const (
	headerSize  = 16
	frameSize   = 12 // version 2
	frameSizeV1 = 8
	version1    = 1
	version2    = 2

	// MaxFieldLen bounds a key, source or remote address. The protocol
	// allows 127 bytes; the format leaves room.
	MaxFieldLen = 1024
	// maxPayload is the largest payload of a record; longer declared
	// lengths are corruption, checked before anything is read. A batch
	// larger than this is written as several records in one write.
	maxPayload = 16 << 20
	// maxPayloadV1 is the largest payload of a version 1 record.
	maxPayloadV1 = 1 + 8 + 3*(2+MaxFieldLen)
	// maxOp is the largest encoded operation.
	maxOp = 1 + 8 + 8 + 8 + 4 + 1 + 4 + 3*(2+MaxFieldLen)
)

var magic = [8]byte{'L', 'C', 'W', 'A', 'L', 'O', 'G', '\n'}

// castagnoli is the one CRC32C table of the package.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Operation types. Zero is invalid on purpose.
const (
	typeAcquireV1 byte = 1
	typeReleaseV1 byte = 2
	typeGrant     byte = 3
	typeRelease   byte = 4
	typeMark      byte = 5
	// typeGrantOrigin is a grant that names the session request that made
	// it, so that the request sent again finds it after a restart. Written
	// for every session grant; typeGrant for v1 grants.
	typeGrantOrigin byte = 6
)

// ErrCorrupt is wrapped by every error that reports a log which cannot be
// trusted: a bad checksum in a whole record, an unknown version or record
// type, a malformed header. Replay never skips such a record.
var ErrCorrupt = errors.New("walog: corrupt log")

// CorruptError says where a log is corrupt. It wraps ErrCorrupt.
type CorruptError struct {
	Path   string
	Offset int64 // byte offset of the record (or header) that fails
	Reason string
}

// Error names the file, the byte offset and what is wrong there.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("walog: %s: corrupt at byte offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Holder is what the log keeps of a grant: its token, who took the key and
// when, and for a session hold the session and its TTL.
type Holder struct {
	Source string
	Remote string
	Since  time.Time
	// Token is the grant's fencing token; 0 in a version 1 log, until the
	// restore callback sets the token the table gave it.
	Token uint64
	// Session is the owning session (0 for a v1 hold) and TTL its TTL.
	Session uint64
	TTL     time.Duration
	// Action and ID name the session request that made the grant (Action
	// 1 Lock, 5 TryLock); 0 for a v1 hold and in logs written before they
	// were kept.
	Action byte
	ID     uint32
}

// grantOp is the operation that records the grant of key to h.
func grantOp(key string, h Holder) op {
	typ := typeGrant
	if h.Action != 0 {
		typ = typeGrantOrigin
	}
	return op{typ: typ, key: key, token: h.Token, h: h}
}

func appendHeader(b []byte) []byte {
	start := len(b)
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint32(b, version2)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// checkHeader returns the version of h (headerSize bytes), or a reason
// when it is not a header this build can read.
func checkHeader(h []byte) (uint32, string) {
	if [8]byte(h[:8]) != magic {
		return 0, "not a Locking-Center log (bad magic)"
	}
	if crc32.Checksum(h[:12], castagnoli) != binary.BigEndian.Uint32(h[12:]) {
		return 0, "header checksum mismatch"
	}
	v := binary.BigEndian.Uint32(h[8:12])
	if v != version1 && v != version2 {
		return 0, fmt.Sprintf("unknown format version %d (this build reads versions %d and %d)", v, version1, version2)
	}
	return v, ""
}

func checkField(what, s string) error {
	if len(s) > MaxFieldLen {
		return fmt.Errorf("walog: %s is %d bytes, more than %d", what, len(s), MaxFieldLen)
	}
	return nil
}

// grantSize is the encoded size of a grant operation.
func grantSize(key string, h Holder) int {
	n := 1 + 8 + 8 + 8 + 4 + 2 + len(key) + 2 + len(h.Source) + 2 + len(h.Remote)
	if h.Action != 0 {
		n += 1 + 4
	}
	return n
}

// op is one decoded or queued operation.
type op struct {
	typ   byte
	key   string
	token uint64 // grant, release, mark
	h     Holder // grant, acquire
}

func appendOp(b []byte, o op) []byte {
	b = append(b, o.typ)
	switch o.typ {
	case typeGrant, typeGrantOrigin:
		b = binary.BigEndian.AppendUint64(b, uint64(o.h.Since.UnixNano()))
		b = binary.BigEndian.AppendUint64(b, o.h.Token)
		b = binary.BigEndian.AppendUint64(b, o.h.Session)
		b = binary.BigEndian.AppendUint32(b, uint32(o.h.TTL/time.Millisecond))
		if o.typ == typeGrantOrigin {
			b = append(b, o.h.Action)
			b = binary.BigEndian.AppendUint32(b, o.h.ID)
		}
		b = appendString(b, o.key)
		b = appendString(b, o.h.Source)
		b = appendString(b, o.h.Remote)
	case typeRelease:
		b = binary.BigEndian.AppendUint64(b, o.token)
		b = appendString(b, o.key)
	case typeMark:
		b = binary.BigEndian.AppendUint64(b, o.token)
	}
	return b
}

// appendRecords encodes ops as version 2 records: as few as the payload
// bound allows (one, for any batch the engine makes in practice). It
// returns the records' count beside the buffer.
func appendRecords(b []byte, ops []op) ([]byte, int) {
	records := 0
	for len(ops) > 0 {
		records++
		start := len(b)
		b = append(b, make([]byte, frameSize)...)
		n := 0
		for n < len(ops) && len(b)-start-frameSize+maxOp <= maxPayload {
			b = appendOp(b, ops[n])
			n++
		}
		b = sealFrame(b, start)
		ops = ops[n:]
	}
	return b, records
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// sealFrame fills in the version 2 frame of the record that starts at
// b[start].
func sealFrame(b []byte, start int) []byte {
	n := uint32(len(b) - start - frameSize)
	binary.BigEndian.PutUint32(b[start+4:], n)
	binary.BigEndian.PutUint32(b[start+8:], ^n)
	binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// decodePayload decodes the operations of a payload whose checksum already
// matched, calling fn for each. A failure here is a record this build does
// not understand: corruption, not a tear.
// fn's non-empty answer (an operation that contradicts what came before)
// stops the decoding with that reason.
func decodePayload(version uint32, p []byte, fn func(op) string) string {
	if len(p) == 0 {
		return "empty record"
	}
	for len(p) > 0 {
		var o op
		var reason string
		o, p, reason = decodeOp(version, p)
		if reason != "" {
			return reason
		}
		if reason := fn(o); reason != "" {
			return reason
		}
		if version == version1 && len(p) != 0 {
			return fmt.Sprintf("%d stray bytes after the record's fields", len(p))
		}
	}
	return ""
}

func decodeOp(version uint32, p []byte) (op, []byte, string) {
	var o op
	o.typ = p[0]
	p = p[1:]
	var ok bool
	known := version == version1 && (o.typ == typeAcquireV1 || o.typ == typeReleaseV1) ||
		version == version2 && (o.typ == typeGrant || o.typ == typeGrantOrigin || o.typ == typeRelease || o.typ == typeMark)
	if !known {
		return o, p, fmt.Sprintf("unknown record type %d", o.typ)
	}
	u64 := func() (uint64, bool) {
		if len(p) < 8 {
			return 0, false
		}
		v := binary.BigEndian.Uint64(p)
		p = p[8:]
		return v, true
	}
	switch o.typ {
	case typeAcquireV1, typeGrant, typeGrantOrigin:
		since, ok1 := u64()
		if !ok1 {
			return o, p, "grant record too short"
		}
		o.h.Since = time.Unix(0, int64(since))
		if o.typ != typeAcquireV1 {
			var ok2, ok3 bool
			o.h.Token, ok1 = u64()
			o.h.Session, ok2 = u64()
			ok3 = len(p) >= 4
			if !ok1 || !ok2 || !ok3 {
				return o, p, "grant record too short"
			}
			o.h.TTL = time.Duration(binary.BigEndian.Uint32(p)) * time.Millisecond
			p = p[4:]
			o.token = o.h.Token
			if o.typ == typeGrantOrigin {
				if len(p) < 5 {
					return o, p, "grant record too short"
				}
				o.h.Action, o.h.ID = p[0], binary.BigEndian.Uint32(p[1:])
				p = p[5:]
				if o.h.Action != locker.OriginLock && o.h.Action != locker.OriginTryLock || o.h.Session == 0 {
					return o, p, fmt.Sprintf("grant record: request action %d of session %d", o.h.Action, o.h.Session)
				}
			}
		}
		if o.key, p, ok = readString(p); !ok {
			return o, p, "grant record: bad key"
		}
		if o.h.Source, p, ok = readString(p); !ok {
			return o, p, "grant record: bad source"
		}
		if o.h.Remote, p, ok = readString(p); !ok {
			return o, p, "grant record: bad remote"
		}
	case typeRelease, typeReleaseV1:
		if o.typ == typeRelease {
			if o.token, ok = u64(); !ok {
				return o, p, "release record too short"
			}
		}
		if o.key, p, ok = readString(p); !ok {
			return o, p, "release record: bad key"
		}
	case typeMark:
		if o.token, ok = u64(); !ok {
			return o, p, "mark record too short"
		}
	}
	return o, p, ""
}

func readString(p []byte) (string, []byte, bool) {
	if len(p) < 2 {
		return "", p, false
	}
	n := int(binary.BigEndian.Uint16(p))
	if n > MaxFieldLen || len(p) < 2+n {
		return "", p, false
	}
	return string(p[2 : 2+n]), p[2+n:], true
}
