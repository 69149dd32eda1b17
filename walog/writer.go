package walog

// The writer: group commit of the engine's batches, one write and one
// fsync per batch, and what a failure leaves.

import (
	"fmt"
	"runtime"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// maxBatch bounds the records of one write, so one batch cannot hold an
// unbounded buffer; at the queue's depth it is never reached in practice.
const maxBatch = 4096

// lingerFor bounds how long a batch waits for more records (see gather):
// about one fsync here, so at worst it doubles a waiter's wait, and only
// when several lockers are writing at once.
const lingerFor = 250 * time.Microsecond

type request struct {
	rec     []byte // encoded records
	records int    // how many records rec holds
	ops     []op
	done    chan error // its outcome, when the writer goroutine writes it (nil for a lone locker writing its own)
}

// Commit records a batch of the engine's changes as one record (see the
// format) and returns once it is durable. It is the log's side of
// locker.Journal.
func (l *Log) Commit(batch []locker.Change) error {
	ops := make([]op, len(batch))
	size := 0
	for i, c := range batch {
		if err := checkField("key", c.Key); err != nil {
			return err
		}
		if c.Grant {
			if err := checkField("source", c.Holder.Source); err != nil {
				return err
			}
			if err := checkField("remote address", c.Holder.Remote); err != nil {
				return err
			}
			h := Holder{Source: c.Holder.Source, Remote: c.Holder.Remote, Since: c.Since,
				Token: c.Token, Session: uint64(c.Holder.Session), TTL: c.TTL}
			if h.Session != 0 {
				h.Action, h.ID = c.Holder.Origin.Action, c.Holder.Origin.ID
			}
			ops[i] = grantOp(c.Key, h)
			size += grantSize(c.Key, h)
		} else {
			ops[i] = op{typ: typeRelease, key: c.Key, token: c.Token}
			size += 1 + 8 + 2 + len(c.Key)
		}
	}
	if failpointsOn && sabotaged("drop-releases") {
		ops = dropReleases(ops) // a planted bug for the crash test to find
	}
	rec, n := appendRecords(make([]byte, 0, frameSize+size), ops)
	return l.submit(&request{rec: rec, records: n, ops: ops})
}

func (l *Log) submit(r *request) error {
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	// A lone locker (the previous batch held one record) that finds the
	// log idle writes its record itself, with whatever else is queued by
	// then: handing it to the writer goroutine and being woken with the
	// answer are two wake-ups of another thread, about a sixth of a durable
	// Lock+Unlock here (see the README's Performance section). Under
	// concurrency the writer goroutine batches as before. l.mu stays held
	// for reading, so Close waits for this batch; the queue cannot close
	// meanwhile, so drain never reports it closed here. The caller's own
	// outcome is returned, not sent to it through a channel.
	if l.direct && l.lone.Load() && len(l.queue) == 0 && l.writing.TryLock() {
		batch := []*request{r}
		l.drain(&batch)
		l.directBatches.Add(1)
		err := l.commit(batch)
		l.maybeCompact()
		l.writing.Unlock()
		l.mu.RUnlock()
		answer(batch[1:], err)
		return err
	}
	r.done = make(chan error, 1)
	l.queue <- r
	l.mu.RUnlock()
	return <-r.done
}

// Close answers every queued record, stops the writer, discards a
// compaction in progress and closes the file. Every record acknowledged
// before is already durable. Later calls return ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return l.closeErr
}

// run is the writer goroutine, started by Open and ended by Close. It
// writes the queued records, holding writing for each batch, and owns the
// compactor goroutine, which it always waits for before it ends.
func (l *Log) run() {
	defer close(l.done)
	batch := make([]*request, 0, maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	l.writing.Lock()
	l.maybeCompact()
	l.writing.Unlock()
	for {
		select {
		case res := <-l.compacted:
			l.writing.Lock()
			l.finishCompaction(res)
			l.maybeCompact()
			l.writing.Unlock()
		case r, ok := <-l.queue:
			l.writing.Lock()
			if !ok {
				l.shutdown()
				l.writing.Unlock()
				return
			}
			batch = append(batch[:0], r)
			open := l.drain(&batch)
			if open && l.prev > 1 {
				open = l.gather(&batch, l.prev, linger)
			}
			err := l.commit(batch)
			if open {
				l.maybeCompact()
			} else {
				l.shutdown()
			}
			l.writing.Unlock()
			answer(batch, err)
			if !open {
				return
			}
			clear(batch) // let the requests go
			// The callers just answered are runnable on the writer's
			// processor. Step aside so they send their '+' now: the next
			// batch's fsync keeps that processor for its whole length
			// (syncAppend), and they would wait behind it, holding back the
			// lockers whose next records would have made that batch larger.
			// Over TCP with 64 lockers this cut the fsyncs per acquire by a
			// fifth (see the README's Performance section).
			runtime.Gosched()
		}
	}
}

// drain appends to batch what is queued, without waiting, and reports
// whether the queue is still open.
func (l *Log) drain(batch *[]*request) bool {
	for len(*batch) < maxBatch {
		select {
		case r, ok := <-l.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, r)
		default:
			return true
		}
	}
	return true
}

// gather waits up to lingerFor for batch to reach want records (as many as
// the previous batch had) and reports whether the queue is still open.
//
// Why wait at all: the lockers answered by the previous batch are about to
// send their next records (an unlock follows a lock). Under concurrency an
// fsync that starts a moment later, with them aboard, saves whole fsyncs,
// and on a busy machine each fsync costs far more than its own duration:
// the writer comes back from it without a processor and waits its turn
// behind every runnable connection before it can start the next one. A
// lone locker (the previous batch held one record) never waits.
func (l *Log) gather(batch *[]*request, want int, linger *time.Timer) (open bool) {
	linger.Reset(lingerFor)
	defer linger.Stop()
	for len(*batch) < want && len(*batch) < maxBatch {
		select {
		case r, ok := <-l.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, r)
		case <-linger.C:
			return true
		}
	}
	return true
}

// commit writes a batch with one write and one fsync and returns what its
// callers are to be answered (see answer). It notes the batch's size for
// the next (prev, lone). l.writing must be held.
func (l *Log) commit(batch []*request) error {
	l.prev = len(batch)
	l.lone.Store(l.prev <= 1)
	if err := l.Err(); err != nil {
		return err
	}
	buf := l.buf[:0]
	for _, r := range batch {
		buf = append(buf, r.rec...)
	}
	err := l.writeBatch(buf)
	if err != nil {
		err = l.fail(err)
	} else {
		failpoint("fsync-before-answer")
		if failpointsOn && hasRelease(batch) {
			failpoint("release-before-apply")
		}
		l.size.Add(int64(len(buf)))
		for _, r := range batch {
			l.records.Add(uint64(r.records))
			for _, o := range r.ops {
				if reason := l.apply(o); reason != "" {
					// The engine planned it against its own table: a bug, and
					// the next start will refuse this log. Said loudly.
					l.logger.Error("walog: a committed record contradicts the log's table; the next start will refuse the log",
						"file", l.path, "reason", reason)
				}
			}
		}
		if l.compacting {
			l.tail = append(l.tail, buf...)
		}
	}
	l.buf = buf
	if cap(buf) > 1<<20 {
		l.buf = nil // do not keep a burst's buffer for ever
	}
	return err
}

// answer tells every caller of a committed batch its outcome. It is called
// once l.writing is let go: an answered lone locker then finds the log free
// and writes its next record itself (submit) instead of queueing it behind
// a writer that has not yet let go.
func answer(batch []*request, err error) {
	for _, r := range batch {
		r.done <- err
	}
}

func (l *Log) writeBatch(buf []byte) error {
	if err := writeAll(l.f, buf, l.path); err != nil {
		return err
	}
	failpoint("append-before-fsync")
	start := time.Now()
	var err error
	if s, ok := l.f.(appendSyncer); ok && len(buf) <= smallAppend && l.lastSync < quickSync {
		err = s.SyncAppend()
	} else {
		err = l.f.Sync()
	}
	l.lastSync = time.Since(start)
	l.onFsync(l.lastSync)
	l.fsyncs.Add(1)
	if err != nil {
		return pathError("fsync", l.path, err)
	}
	return nil
}

// dropReleases returns ops without its releases (for a sabotage).
func dropReleases(ops []op) []op {
	kept := ops[:0:0]
	for _, o := range ops {
		if o.typ != typeRelease && o.typ != typeReleaseV1 {
			kept = append(kept, o)
		}
	}
	return kept
}

// hasRelease reports whether a batch releases a key (for a failpoint).
func hasRelease(batch []*request) bool {
	for _, r := range batch {
		for _, o := range r.ops {
			if o.typ == typeRelease || o.typ == typeReleaseV1 {
				return true
			}
		}
	}
	return false
}

// fail makes err sticky: every later record is refused with it.
func (l *Log) fail(err error) error {
	l.errs.Add(1)
	err = fmt.Errorf("%w: %w", ErrFailed, err)
	if l.failed.CompareAndSwap(nil, &err) {
		l.logger.Error("walog: the log failed; every lock and unlock is refused until restart",
			"file", l.path, "err", err)
	}
	return *l.failed.Load()
}

// shutdown ends the writer: it waits for a running compaction, discards
// it, and closes the file.
func (l *Log) shutdown() {
	if l.compacting {
		res := <-l.compacted
		l.compacting = false
		if res.err == nil {
			l.discard(res.f)
		}
	}
	if err := l.f.Close(); err != nil {
		l.closeErr = fmt.Errorf("walog: close %s: %w", l.path, err)
	}
	unlockFile(l.lock)
}
