package walog

import (
	"bufio"
	"fmt"
	"os"
	"time"
)

// WriteTestLog writes a log at path in which keys "key/0".."key/<live-1>"
// are held. With slack >= 0 it then appends acquire/release pairs of other
// keys until the file is slack bytes short of the compaction threshold, so
// that the next records start a compaction.
func WriteTestLog(path string, live int, slack int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	size := int64(headerSize)
	liveBytes := int64(0)
	w.Write(appendHeader(nil))
	var rec []byte
	since := time.Unix(1764500000, 0)
	for i := range live {
		k := fmt.Sprintf("key/%d", i)
		h := Holder{Source: fmt.Sprintf("svc-%d", i%50), Remote: fmt.Sprintf("10.1.%d.%d:%d", i/256%256, i%256, 30000+i%30000), Since: since}
		rec = appendAcquire(rec[:0], k, h)
		w.Write(rec)
		size += int64(len(rec))
		liveBytes += int64(len(rec))
	}
	if slack >= 0 {
		threshold := max(2*(headerSize+liveBytes), DefaultCompactFloor)
		for i := 0; ; i++ {
			k := fmt.Sprintf("gone/%d", i)
			rec = appendAcquire(rec[:0], k, Holder{Source: "svc", Remote: "10.2.0.1:1", Since: since})
			rec = appendRelease(rec, k)
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
