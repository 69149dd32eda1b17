package walog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
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
// Record (8-byte frame + payload):
//
//	0          4        6        8
//	+----------+--------+--------+----------------------------+
//	| crc32c   | length | ^length| payload (length bytes)     |
//	| of 4..end| uint16 | uint16 |                            |
//	+----------+--------+--------+----------------------------+
//
// The checksum covers the length fields and the payload, so no byte of a
// record is unchecked. The complemented copy of the length lets replay tell
// a torn tail (the length is intact and points past the end of the file)
// from a damaged length (the two copies disagree): the first is cut off, the
// second refuses to start. Without it a flipped bit in a length near the end
// could make whole acknowledged records look torn and be silently dropped.
//
// Payload, by its first byte, the record type (0 is never valid, so zeroed
// space is recognisable):
//
//	acquire (1): | 1 | since: int64 Unix ns | key | source | remote |
//	release (2): | 2 | key |
//
// where each string is | length: uint16 | bytes |.
//
// A new field (a fencing token, say) means a new version number: readers
// refuse versions and record types they do not know rather than guess.
const (
	headerSize = 16
	frameSize  = 8
	version1   = 1

	// MaxFieldLen bounds a key, source or remote address. The protocol
	// allows 127 bytes; the format leaves room.
	MaxFieldLen = 1024
	// maxPayload is the largest payload a valid record can have; longer
	// declared lengths are corruption, checked before anything is read.
	maxPayload = 1 + 8 + 3*(2+MaxFieldLen)
)

var magic = [8]byte{'L', 'C', 'W', 'A', 'L', 'O', 'G', '\n'}

// castagnoli is the one CRC32C table of the package.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record types. Zero is invalid on purpose.
const (
	typeAcquire byte = 1
	typeRelease byte = 2
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

func (e *CorruptError) Error() string {
	return fmt.Sprintf("walog: %s: corrupt at byte offset %d: %s", e.Path, e.Offset, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Holder is what the log keeps of an acquire: who took the key and when.
type Holder struct {
	Source string
	Remote string
	Since  time.Time
}

func appendHeader(b []byte) []byte {
	start := len(b)
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint32(b, version1)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// checkHeader returns a reason when h (headerSize bytes) is not a header
// this version can read.
func checkHeader(h []byte) string {
	if [8]byte(h[:8]) != magic {
		return "not a Locking-Center log (bad magic)"
	}
	if crc32.Checksum(h[:12], castagnoli) != binary.BigEndian.Uint32(h[12:]) {
		return "header checksum mismatch"
	}
	if v := binary.BigEndian.Uint32(h[8:12]); v != version1 {
		return fmt.Sprintf("unknown format version %d (this build reads version %d)", v, version1)
	}
	return ""
}

func checkField(what, s string) error {
	if len(s) > MaxFieldLen {
		return fmt.Errorf("walog: %s is %d bytes, more than %d", what, len(s), MaxFieldLen)
	}
	return nil
}

// acquireSize is the encoded size of an acquire record, frame included.
func acquireSize(key string, h Holder) int {
	return frameSize + 1 + 8 + 2 + len(key) + 2 + len(h.Source) + 2 + len(h.Remote)
}

func appendAcquire(b []byte, key string, h Holder) []byte {
	start := len(b)
	b = append(b, make([]byte, frameSize)...)
	b = append(b, typeAcquire)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Since.UnixNano()))
	b = appendString(b, key)
	b = appendString(b, h.Source)
	b = appendString(b, h.Remote)
	return sealFrame(b, start)
}

func appendRelease(b []byte, key string) []byte {
	start := len(b)
	b = append(b, make([]byte, frameSize)...)
	b = append(b, typeRelease)
	b = appendString(b, key)
	return sealFrame(b, start)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// sealFrame fills in the frame of the record that starts at b[start].
func sealFrame(b []byte, start int) []byte {
	n := uint16(len(b) - start - frameSize)
	binary.BigEndian.PutUint16(b[start+4:], n)
	binary.BigEndian.PutUint16(b[start+6:], ^n)
	binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// record is one decoded record.
type record struct {
	typ byte
	key string
	h   Holder
}

// decodePayload decodes a payload whose checksum already matched. A failure
// here is a record this build does not understand: corruption, not a tear.
func decodePayload(p []byte) (record, string) {
	var r record
	if len(p) == 0 {
		return r, "empty record"
	}
	r.typ = p[0]
	p = p[1:]
	var ok bool
	switch r.typ {
	case typeAcquire:
		if len(p) < 8 {
			return r, "acquire record too short"
		}
		r.h.Since = time.Unix(0, int64(binary.BigEndian.Uint64(p)))
		p = p[8:]
		if r.key, p, ok = readString(p); !ok {
			return r, "acquire record: bad key"
		}
		if r.h.Source, p, ok = readString(p); !ok {
			return r, "acquire record: bad source"
		}
		if r.h.Remote, p, ok = readString(p); !ok {
			return r, "acquire record: bad remote"
		}
	case typeRelease:
		if r.key, p, ok = readString(p); !ok {
			return r, "release record: bad key"
		}
	default:
		return r, fmt.Sprintf("unknown record type %d", r.typ)
	}
	if len(p) != 0 {
		return r, fmt.Sprintf("%d stray bytes after the record's fields", len(p))
	}
	return r, ""
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
