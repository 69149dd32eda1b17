package walog

// Replay: reading the file back, record by record, telling a torn tail
// from corruption, and applying each operation to the live set.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// replay reads the whole file into l.live, cuts a torn tail, and returns
// the size of the file afterwards and its format version.
func (l *Log) replay() (int64, uint32, error) {
	fi, err := l.f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("walog: stat: %w", err)
	}
	fileSize := fi.Size()
	// Size the live set for a log that compaction keeps near twice its
	// live records (about 80 bytes each): growing a map of a million keys
	// step by step costs more than reading the file.
	l.live = make(map[string]Holder, min(fileSize/160, 1<<24))
	if fileSize == 0 {
		// An empty file (made by the operator, say) is a new log.
		if err := writeSync(l.f, appendHeader(nil), l.path); err != nil {
			return 0, 0, fmt.Errorf("walog: initialise: %w", err)
		}
		return headerSize, version2, nil
	}
	corrupt := func(off int64, reason string) error {
		return &CorruptError{Path: l.path, Offset: off, Reason: reason}
	}
	r := bufio.NewReaderSize(l.f, 1<<20)
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, corrupt(0, fmt.Sprintf("file of %d bytes is shorter than the %d-byte header", fileSize, headerSize))
		}
		return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
	}
	version, reason := checkHeader(hdr[:])
	if reason != "" {
		return 0, 0, corrupt(0, reason)
	}
	fsize, limit := frameSize, maxPayload
	if version == version1 {
		fsize, limit = frameSizeV1, maxPayloadV1
	}

	off := int64(headerSize)
	frame := make([]byte, fsize)
	var payload []byte
	torn := ""
	for {
		n, err := io.ReadFull(r, frame)
		if err == io.EOF {
			break
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// Fewer than a frame's bytes cannot be checked at all: the
			// write that would have completed them never happened.
			torn = fmt.Sprintf("file ends %d bytes into a record's frame", n)
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
		}
		var length, check uint64
		if version == version1 {
			length = uint64(binary.BigEndian.Uint16(frame[4:]))
			check = uint64(^binary.BigEndian.Uint16(frame[6:]))
		} else {
			length = uint64(binary.BigEndian.Uint32(frame[4:]))
			check = uint64(^binary.BigEndian.Uint32(frame[8:]))
		}
		if check != length {
			// A frame that is zeros from its start, or from a sector
			// boundary inside it, to the end of the file is the start of
			// a write whose later sectors never reached the disk (or
			// zeroed space the file was extended by).
			if frameCut(off, frame) {
				zero, err := restIsZero(r)
				if err != nil {
					return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
				}
				if zero {
					torn = "zeroed space after the last record"
					if !allZero(frame) {
						torn = "the last record's frame is zeros from a sector boundary on"
					}
					break
				}
			}
			return 0, 0, corrupt(off, "record length fails its check")
		}
		if length == 0 || length > uint64(limit) {
			return 0, 0, corrupt(off, fmt.Sprintf("record length %d out of range", length))
		}
		if off+int64(fsize)+int64(length) > fileSize {
			// Checked before allocating: the length is intact (its copy
			// agrees) and points past the end, so the write was torn.
			torn = "file ends inside a record"
			break
		}
		if uint64(cap(payload)) < length {
			payload = make([]byte, length)
		}
		p := payload[:length]
		if _, err := io.ReadFull(r, p); err != nil {
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				torn = "file ends inside a record"
				break
			}
			return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
		}
		crc := crc32.Update(crc32.Checksum(frame[4:], castagnoli), castagnoli, p)
		if crc != binary.BigEndian.Uint32(frame[:4]) {
			// The last record of the file, with a whole sector of it
			// zeros: a write that the power loss cut short, whose
			// sectors reached the disk in part. Anything else is damage
			// to data that was fsynced, and stops the start.
			if zeroSector(off, frame, p) {
				zero, err := restIsZero(r)
				if err != nil {
					return 0, 0, fmt.Errorf("walog: read %s: %w", l.path, err)
				}
				if zero {
					torn = "the last record fails its checksum and has a sector of zeros (a write cut short)"
					break
				}
			}
			return 0, 0, corrupt(off, "checksum mismatch")
		}
		if reason := decodePayload(version, p, l.apply); reason != "" {
			return 0, 0, corrupt(off, reason)
		}
		off += int64(fsize) + int64(length)
	}
	if torn != "" {
		l.logger.Warn("walog: cut a torn final record; the start goes on",
			"file", l.path, "offset", off, "bytes_dropped", fileSize-off, "reason", torn)
		if err := l.f.Truncate(off); err != nil {
			return 0, 0, fmt.Errorf("walog: cut torn tail of %s at %d: %w", l.path, off, err)
		}
		if err := l.f.Sync(); err != nil {
			return 0, 0, fmt.Errorf("walog: fsync %s after cutting its tail: %w", l.path, err)
		}
	}
	return off, version, nil
}

// sectorSize is the unit a disk writes whole or not at all: the smallest
// in use, so that every real sector boundary is one of these.
const sectorSize = 512

// frameCut reports whether frame, read at file offset off, is zeros from
// its start or from a sector boundary inside it to its end.
func frameCut(off int64, frame []byte) bool {
	for i := range frame {
		if (i == 0 || (off+int64(i))%sectorSize == 0) && allZero(frame[i:]) {
			return true
		}
	}
	return false
}

// zeroSector reports whether the record at file offset off, made of the
// bytes of parts in order, has a piece that is all zeros where the pieces
// are the record cut at every sector boundary (as etcd's WAL decides a
// torn entry): a sector of the write that never reached the disk.
func zeroSector(off int64, parts ...[]byte) bool {
	zero, empty := true, true
	pos := off
	for _, part := range parts {
		for _, c := range part {
			if pos%sectorSize == 0 && pos != off {
				if zero && !empty {
					return true
				}
				zero, empty = true, true
			}
			zero = zero && c == 0
			empty = false
			pos++
		}
	}
	return zero && !empty
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func restIsZero(r *bufio.Reader) (bool, error) {
	for {
		c, err := r.ReadByte()
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if c != 0 {
			return false, nil
		}
	}
}

// apply updates the live set with a durable operation.
func (l *Log) apply(o op) string {
	if reason := l.contradiction(o); reason != "" {
		return reason
	}
	switch o.typ {
	case typeAcquireV1, typeGrant, typeGrantOrigin:
		if old, had := l.live[o.key]; had {
			l.liveBytes -= int64(grantSize(o.key, old))
		}
		l.live[o.key] = o.h
		l.liveBytes += int64(grantSize(o.key, o.h))
	case typeReleaseV1, typeRelease:
		old, had := l.live[o.key]
		if had && (o.token == 0 || o.token == old.Token) {
			l.liveBytes -= int64(grantSize(o.key, old))
			delete(l.live, o.key)
		}
	}
	if o.token > l.high {
		l.high = o.token
		l.highToken.Store(o.token)
	}
	return ""
}

// MaxToken bounds the fencing tokens a log may hold: a log with a token
// of 2^63 or more is refused, so that tokens never wrap (and stay
// positive where a client keeps them in a signed integer).
const MaxToken = 1<<63 - 1

// contradiction says what is wrong with a version 2 operation that cannot
// follow the ones applied before it: a log the engine wrote never holds
// one, so it is damage or a bug, refused like a bad checksum rather than
// replayed into a table that would break its promises (two grants of one
// key, a token that wraps, a TTL no session can have).
func (l *Log) contradiction(o op) string {
	if o.token > MaxToken {
		return fmt.Sprintf("token %d is 2^63 or more: tokens would wrap", o.token)
	}
	switch o.typ {
	case typeGrant, typeGrantOrigin:
		if old, had := l.live[o.key]; had && old.Token != o.token {
			return fmt.Sprintf("grant of key %q under token %d while it is held under token %d, with no release between", o.key, o.token, old.Token)
		}
		if o.h.Session != 0 && (o.h.TTL < time.Second || o.h.TTL > 10*time.Minute) {
			return fmt.Sprintf("grant of key %q to a session with a TTL of %v, outside 1s … 10m", o.key, o.h.TTL)
		}
	case typeRelease:
		old, had := l.live[o.key]
		if !had {
			return fmt.Sprintf("release of key %q under token %d, which is not held", o.key, o.token)
		}
		if o.token != 0 && o.token != old.Token {
			return fmt.Sprintf("release of key %q under token %d, while its current grant is token %d", o.key, o.token, old.Token)
		}
	}
	return ""
}
