package walog

import (
	"github.com/locking-center/locking-center/locker"

	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"time"
)

// WriteTestLog writes a version 2 log at path in which keys
// "key/0".."key/<live-1>" are held, each under its own token. With slack >= 0
// it then appends grant/release pairs of other keys until the file is slack
// bytes short of the compaction threshold, so that the next records start a
// compaction.
func WriteTestLog(path string, live int, slack int64) error {
	return writeTestLog(path, live, slack, version2)
}

// WriteTestLogV1 is WriteTestLog in version 1, the format written before
// fencing tokens: it is what an upgraded server finds on disk.
func WriteTestLogV1(path string, live int) error {
	return writeTestLog(path, live, -1, version1)
}

func writeTestLog(path string, live int, slack int64, version uint32) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	acquire, release := appendGrantRecord, appendReleaseRecord
	w.Write(appendHeader(nil))
	if version == version1 {
		acquire, release = appendAcquireV1, appendReleaseV1
		w.Write(appendHeaderV1(nil))
	}
	size := int64(headerSize)
	liveBytes := int64(0)
	var rec []byte
	since := time.Unix(1764500000, 0)
	token := uint64(1000)
	for i := range live {
		k := fmt.Sprintf("key/%d", i)
		token++
		h := Holder{Source: fmt.Sprintf("svc-%d", i%50), Remote: fmt.Sprintf("10.1.%d.%d:%d", i/256%256, i%256, 30000+i%30000),
			Since: since, Token: token}
		rec = acquire(rec[:0], k, h)
		w.Write(rec)
		size += int64(len(rec))
		liveBytes += int64(grantSize(k, h))
	}
	if slack >= 0 {
		threshold := max(2*(headerSize+liveBytes), DefaultCompactFloor)
		for i := 0; ; i++ {
			k := fmt.Sprintf("gone/%d", i)
			token++
			rec = acquire(rec[:0], k, Holder{Source: "svc", Remote: "10.2.0.1:1", Since: since, Token: token})
			rec = release(rec, k, token)
			if size+int64(len(rec)) > threshold-slack {
				break
			}
			w.Write(rec)
			size += int64(len(rec))
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// appendGrantRecord appends a version 2 record holding one grant.
func appendGrantRecord(b []byte, key string, h Holder) []byte {
	b, _ = appendRecords(b, []op{{typ: typeGrant, key: key, token: h.Token, h: h}})
	return b
}

// appendReleaseRecord appends a version 2 record holding one release.
func appendReleaseRecord(b []byte, key string, token uint64) []byte {
	b, _ = appendRecords(b, []op{{typ: typeRelease, key: key, token: token}})
	return b
}

// The version 1 encoder, as the server wrote it before fencing tokens. The
// package only reads this format now; the tests write it.

func appendHeaderV1(b []byte) []byte {
	start := len(b)
	b = append(b, magic[:]...)
	b = binary.BigEndian.AppendUint32(b, version1)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

func appendAcquireV1(b []byte, key string, h Holder) []byte {
	start := len(b)
	b = append(b, make([]byte, frameSizeV1)...)
	b = append(b, typeAcquireV1)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Since.UnixNano()))
	b = appendString(b, key)
	b = appendString(b, h.Source)
	b = appendString(b, h.Remote)
	return sealFrameV1(b, start)
}

func appendReleaseV1(b []byte, key string, _ uint64) []byte {
	start := len(b)
	b = append(b, make([]byte, frameSizeV1)...)
	b = append(b, typeReleaseV1)
	b = appendString(b, key)
	return sealFrameV1(b, start)
}

func sealFrameV1(b []byte, start int) []byte {
	n := uint16(len(b) - start - frameSizeV1)
	binary.BigEndian.PutUint16(b[start+4:], n)
	binary.BigEndian.PutUint16(b[start+6:], ^n)
	binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// Acquire records that key is held by h (its grant, token and session
// included), and returns once the record is durable: Commit of one grant,
// for tests.
func (l *Log) Acquire(key string, h Holder) error {
	return l.Commit([]locker.Change{{Key: key, Token: h.Token, Grant: true, Since: h.Since, TTL: h.TTL,
		Holder: locker.Holder{Source: h.Source, Remote: h.Remote, Session: locker.SessionID(h.Session)}}})
}

// Release records that key is free, whatever its grant: Commit of one
// release, for tests.
func (l *Log) Release(key string) error {
	return l.Commit([]locker.Change{{Key: key}})
}
