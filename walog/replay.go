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

	"github.com/locking-center/locking-center/locker"
)

// replay reads the whole file into l.state, cuts a torn tail, and returns
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
	l.state = locker.NewState(int(min(fileSize/160, 1<<24)))
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

// apply applies a durable operation to the log's state, through the one
// function that decides what a record means (locker.State.Apply), and
// keeps the encoded size of the live grants for compaction. It returns
// why an operation contradicts the state, changing nothing then.
//
// Version 1 operations are read as what they meant: an acquire of a held
// key replaces its holder (that format had no tokens to tell grants
// apart), and a release of a free key changes nothing.
func (l *Log) apply(o op) string {
	if o.typ == typeMark {
		if err := l.state.Raise(o.token); err != nil {
			return err.Error()
		}
		l.highToken.Store(l.state.HighToken())
		return ""
	}
	old, had := l.state.Held(o.key)
	switch {
	case o.typ == typeAcquireV1 && had:
		if reason := l.apply(op{typ: typeReleaseV1, key: o.key}); reason != "" {
			return reason
		}
		had = false
	case o.typ == typeReleaseV1 && !had:
		return ""
	}
	if err := l.state.Apply(changeOf(o)); err != nil {
		return err.Error()
	}
	if had {
		l.liveBytes -= int64(grantSize(o.key, holderOf(old)))
	}
	if o.typ != typeRelease && o.typ != typeReleaseV1 {
		l.liveBytes += int64(grantSize(o.key, o.h))
	}
	l.highToken.Store(l.state.HighToken())
	return ""
}

// changeOf is the engine's change an operation records.
func changeOf(o op) locker.Change {
	switch o.typ {
	case typeRelease, typeReleaseV1:
		return locker.Change{Key: o.key, Token: o.token}
	}
	return locker.Change{Key: o.key, Token: o.h.Token, Grant: true, Since: o.h.Since, TTL: o.h.TTL,
		Holder: locker.Holder{Source: o.h.Source, Remote: o.h.Remote, Session: locker.SessionID(o.h.Session),
			Origin: locker.Origin{Action: o.h.Action, ID: o.h.ID}}}
}

// holderOf is the log's view of a grant of the state.
func holderOf(g locker.Grant) Holder {
	return Holder{Source: g.Holder.Source, Remote: g.Holder.Remote, Since: g.Since, Token: g.Token,
		Session: uint64(g.Holder.Session), TTL: g.TTL, Action: g.Holder.Origin.Action, ID: g.Holder.Origin.ID}
}
