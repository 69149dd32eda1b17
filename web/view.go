package web

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// PageSize is the number of keys on one dashboard page.
const PageSize = 100

// filter selects held keys.
type filter struct {
	Key    string // substring of the key ("" matches all)
	Prefix string // prefix of the key (JSON API)
	After  string // keys strictly after this one, in key order (JSON API paging)
	Source string // substring of the holder's source
	Stuck  bool   // only keys held for StuckAfter or longer
}

// order is how rows are sorted. Both orders are total (no two keys are
// equal), so pages are stable.
type order int

const (
	byKey order = iota // bytewise by key
	byAge              // longest held first, so stuck keys lead; then by key
)

// compare is a plain function of the order, not a func value, so that the
// compiler can keep the rows it is handed on the stack.
func (o order) compare(a, b *locker.KeyInfo) int {
	if o == byAge {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
	}
	return strings.Compare(a.Key, b.Key)
}

// selection says which keys a walk returns: the matches of the filter at
// positions [Skip, Keep) in Order.
type selection struct {
	filter
	Order order
	Skip  int
	// Keep is the end of the range; 0 returns no row (totals only) and
	// -1 returns every match.
	Keep int
}

// heapMax bounds the rows kept in the heap. Beyond it (deep pages, large
// API pages) the walk copies every match and selects the range instead,
// which costs less than churning a large heap.
const heapMax = 2000

// snapshot is one walk of the table.
type snapshot struct {
	Rows    []locker.KeyInfo // the matches at [Skip, Keep), sorted
	Matched int              // keys that matched the filter
	Held    int              // every held key
	Waiting int              // every queued request
	Stuck   int              // every key held for StuckAfter or longer
	Oldest  time.Time        // grant time of the longest-held key; zero if none
}

// walk reads the whole table once: the totals over every key, and the
// keys that match sel's filter at positions [sel.Skip, sel.Keep) in
// sel's order. Up to heapMax rows it keeps them in a bounded heap, so
// that showing the first page of 100,000 keys neither copies nor sorts
// them all. Each key is a consistent snapshot; the set is not, which a
// live view accepts.
func (s *server) walk(sel selection, now time.Time) snapshot {
	var snap snapshot
	stuckBefore := now.Add(-s.opts.StuckAfter)
	f := sel.filter
	h := rowHeap{order: sel.Order, keep: sel.Keep}
	var pooled *[]locker.KeyInfo
	switch {
	case sel.Keep < 0:
		h.keep = -1
		h.rows = make([]locker.KeyInfo, 0, s.opts.Table.Stats().Held)
	case sel.Keep > heapMax:
		// A deep page: every match is copied, then the page selected. The
		// copy is large (128 bytes a key), so its memory is reused.
		h.keep = -1
		pooled = collectPool.Get().(*[]locker.KeyInfo)
		h.rows = (*pooled)[:0]
	}
	s.opts.Table.Each(func(ki locker.KeyInfo) bool {
		snap.Held++
		snap.Waiting += ki.Waiters
		stuck := !ki.Since.After(stuckBefore)
		if stuck {
			snap.Stuck++
		}
		if snap.Oldest.IsZero() || ki.Since.Before(snap.Oldest) {
			snap.Oldest = ki.Since
		}
		if sel.Keep != 0 &&
			strings.HasPrefix(ki.Key, f.Prefix) &&
			(f.After == "" || ki.Key > f.After) &&
			strings.Contains(ki.Key, f.Key) &&
			strings.Contains(ki.Holder.Source, f.Source) &&
			(!f.Stuck || stuck) {
			snap.Matched++
			h.offer(&ki)
		}
		return true
	})
	if h.keep < 0 {
		end := sel.Keep
		if end < 0 {
			end = len(h.rows)
		}
		snap.Rows = selectRange(h.rows, sel.Skip, end, sel.Order)
		if pooled != nil {
			snap.Rows = slices.Clone(snap.Rows)
			clear(h.rows) // let the keys' strings go
			*pooled = h.rows[:0]
			collectPool.Put(pooled)
		}
	} else {
		rows := h.sorted()
		snap.Rows = rows[min(sel.Skip, len(rows)):]
	}
	return snap
}

// collectPool holds the buffers of deep-page walks.
var collectPool = sync.Pool{New: func() any { return new([]locker.KeyInfo) }}

// rowHeap keeps the first keep rows in order seen so far: a max-heap,
// whose top is the last row kept, so that a row that sorts after it is
// dropped with one comparison. keep < 0 keeps every row, unsorted.
type rowHeap struct {
	order order
	keep  int
	rows  []locker.KeyInfo
}

func (h *rowHeap) offer(ki *locker.KeyInfo) {
	switch {
	case h.keep < 0:
		h.rows = append(h.rows, *ki)
	case len(h.rows) < h.keep:
		h.rows = append(h.rows, *ki)
		h.up(len(h.rows) - 1)
	case h.order.compare(ki, &h.rows[0]) < 0:
		h.rows[0] = *ki
		h.down(0)
	}
}

func (h *rowHeap) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if h.order.compare(&h.rows[i], &h.rows[parent]) <= 0 {
			return
		}
		h.rows[i], h.rows[parent] = h.rows[parent], h.rows[i]
		i = parent
	}
}

func (h *rowHeap) down(i int) {
	n := len(h.rows)
	for {
		largest, l, r := i, 2*i+1, 2*i+2
		if l < n && h.order.compare(&h.rows[l], &h.rows[largest]) > 0 {
			largest = l
		}
		if r < n && h.order.compare(&h.rows[r], &h.rows[largest]) > 0 {
			largest = r
		}
		if largest == i {
			return
		}
		h.rows[i], h.rows[largest] = h.rows[largest], h.rows[i]
		i = largest
	}
}

// sorted returns the kept rows in order.
func (h *rowHeap) sorted() []locker.KeyInfo {
	slices.SortFunc(h.rows, func(a, b locker.KeyInfo) int { return h.order.compare(&a, &b) })
	return h.rows
}

// selectRange returns rows[lo:hi] as a sort by o would leave them, in
// expected linear time: it partitions around lo and hi (Hoare's selection)
// and sorts only the range. rows is reordered.
func selectRange(rows []locker.KeyInfo, lo, hi int, o order) []locker.KeyInfo {
	lo = min(max(lo, 0), len(rows))
	hi = min(max(hi, lo), len(rows))
	if lo == hi {
		return rows[lo:lo]
	}
	nthElement(rows, lo, o)
	nthElement(rows[lo:], hi-lo-1, o)
	out := rows[lo:hi]
	slices.SortFunc(out, func(a, b locker.KeyInfo) int { return o.compare(&a, &b) })
	return out
}

// nthElement reorders xs so that xs[n] is the row a sort would put there,
// every row before it sorts before it and every row after it after.
func nthElement(xs []locker.KeyInfo, n int, o order) {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three into xs[mid], so that sorted or reversed input
		// stays linear.
		if o.compare(&xs[mid], &xs[lo]) < 0 {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if o.compare(&xs[hi], &xs[lo]) < 0 {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if o.compare(&xs[hi], &xs[mid]) < 0 {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for o.compare(&xs[i], &pivot) < 0 {
				i++
			}
			for o.compare(&pivot, &xs[j]) < 0 {
				j--
			}
			if i <= j {
				xs[i], xs[j] = xs[j], xs[i]
				i++
				j--
			}
		}
		switch {
		case n <= j:
			hi = j
		case n >= i:
			lo = i
		default:
			return
		}
	}
}
