package web

import (
	"slices"
	"strings"
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
}

func (f filter) match(ki *locker.KeyInfo) bool {
	return strings.HasPrefix(ki.Key, f.Prefix) &&
		(f.After == "" || ki.Key > f.After) &&
		strings.Contains(ki.Key, f.Key) &&
		strings.Contains(ki.Holder.Source, f.Source)
}

// snapshot is one walk of the table.
type snapshot struct {
	Rows    []locker.KeyInfo // the keys that matched the filter, in no order
	Held    int              // every held key
	Waiting int              // every queued request
	Stuck   int              // every key held for StuckAfter or longer
	Oldest  time.Time        // grant time of the longest-held key; zero if none
}

// walk collects the keys that match f (none when f is nil) and the totals
// over all keys. Each key is a consistent snapshot; the set is not, which a
// live view accepts.
func (s *server) walk(f *filter, now time.Time) snapshot {
	var snap snapshot
	stuckBefore := now.Add(-s.opts.StuckAfter)
	all := f != nil && *f == filter{}
	if all {
		snap.Rows = make([]locker.KeyInfo, 0, s.opts.Table.Stats().Held)
	}
	s.opts.Table.Each(func(ki locker.KeyInfo) bool {
		snap.Held++
		snap.Waiting += ki.Waiters
		if !ki.Since.After(stuckBefore) {
			snap.Stuck++
		}
		if snap.Oldest.IsZero() || ki.Since.Before(snap.Oldest) {
			snap.Oldest = ki.Since
		}
		if all || f != nil && f.match(&ki) {
			snap.Rows = append(snap.Rows, ki)
		}
		return true
	})
	return snap
}

// byKey orders keys bytewise.
func byKey(a, b locker.KeyInfo) int { return strings.Compare(a.Key, b.Key) }

// byAge orders the longest-held first, so stuck keys lead; ties by key keep
// the order total and pages stable.
func byAge(a, b locker.KeyInfo) int {
	if c := a.Since.Compare(b.Since); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// page returns xs[lo:hi] as they would be after sorting xs with cmp, in
// expected linear time: a full sort of 100,000 keys to show 100 of them
// would cost most of the page's time budget. xs is reordered. The order
// must be total (no two elements equal).
func page[T any](xs []T, lo, hi int, cmp func(a, b T) int) []T {
	lo = min(max(lo, 0), len(xs))
	hi = min(max(hi, lo), len(xs))
	if lo == hi {
		return xs[lo:lo]
	}
	nthElement(xs, lo, cmp)
	nthElement(xs[lo:], hi-lo-1, cmp)
	out := xs[lo:hi]
	slices.SortFunc(out, cmp)
	return out
}

// nthElement reorders xs so that xs[n] is the element a sort would put
// there, every element before it is smaller and every one after larger
// (Hoare's selection with a median-of-three pivot).
func nthElement[T any](xs []T, n int, cmp func(a, b T) int) {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three into xs[mid], so sorted or reversed input stays linear.
		if cmp(xs[mid], xs[lo]) < 0 {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if cmp(xs[hi], xs[lo]) < 0 {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if cmp(xs[hi], xs[mid]) < 0 {
			xs[hi], xs[mid] = xs[mid], xs[hi]
		}
		pivot := xs[mid]
		i, j := lo, hi
		for i <= j {
			for cmp(xs[i], pivot) < 0 {
				i++
			}
			for cmp(pivot, xs[j]) < 0 {
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
