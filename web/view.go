package web

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/locking-center/locking-center/locker"
)

// PageSize is the number of keys on one dashboard page.
const PageSize = 100

// exactBelow is the table size under which every page, list and scrape
// reads the table afresh (a walk of 5,000 keys and its sorts take about
// 3 ms). From this size on they share a catalog that is rebuilt in the
// background, so that their cost does not grow with the table.
const exactBelow = 5000

// Bounds of a shared catalog's age: ten times what its build took (so
// that rebuilding costs at most a tenth of one processor), within these.
const (
	catalogMinAge = 2 * time.Second
	catalogMaxAge = time.Minute
)

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

// selection says which keys a view returns: the matches of the filter at
// positions [Skip, Skip+Limit) in Order.
type selection struct {
	filter
	Order order
	Skip  int
	Limit int
	// LastPage moves a Skip past the last match to the start of the last
	// page (of Limit rows), as the dashboard shows a page past the end.
	LastPage bool
}

// catEntry is one held key in a catalog: what filters and orders need.
// The strings share the table's memory.
type catEntry struct {
	key, source string
	since       int64 // grant time, Unix nanoseconds
}

// catalog is a copy of the table's keys, sorted both ways, made by one
// walk. Rows are not read from it: a view takes the keys of its page from
// the catalog and reads each afresh (Table.Key), so holders, ages and
// queues are current; only which keys exist, and the stuck and oldest
// figures, are as old as the catalog.
type catalog struct {
	entries []catEntry // by key
	byAge   []int32    // positions in entries, longest held first
	stuck   int        // keys held for StuckAfter or longer when built
	oldest  time.Time  // grant time of the longest-held key; zero if none
	built   time.Time  // wall clock, for its age
	took    time.Duration
}

func buildCatalog(t *locker.Table, stuckBefore time.Time) *catalog {
	start := time.Now()
	c := &catalog{entries: make([]catEntry, 0, t.Stats().Held)}
	sb := stuckBefore.UnixNano()
	t.Each(func(ki locker.KeyInfo) bool {
		since := ki.Since.UnixNano()
		c.entries = append(c.entries, catEntry{key: ki.Key, source: ki.Holder.Source, since: since})
		if since <= sb {
			c.stuck++
		}
		if c.oldest.IsZero() || ki.Since.Before(c.oldest) {
			c.oldest = ki.Since
		}
		return true
	})
	slices.SortFunc(c.entries, func(a, b catEntry) int { return strings.Compare(a.key, b.key) })
	// By age: sorted as (since, position) pairs side by side, which
	// is several times faster than sorting positions that point into
	// entries; ties in grant time fall back to the position, key order.
	ages := make([]agePos, len(c.entries))
	for i := range c.entries {
		ages[i] = agePos{c.entries[i].since, int32(i)}
	}
	slices.SortFunc(ages, func(a, b agePos) int {
		if c := cmp.Compare(a.since, b.since); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	c.byAge = make([]int32, len(ages))
	for i := range ages {
		c.byAge[i] = ages[i].pos
	}
	c.built, c.took = time.Now(), time.Since(start)
	return c
}

type agePos struct {
	since int64
	pos   int32
}

// maxAge is how old c may grow before a rebuild starts.
func (c *catalog) maxAge() time.Duration {
	return min(max(10*c.took, catalogMinAge), catalogMaxAge)
}

// countSource counts the keys held by exactly source.
func (c *catalog) countSource(source string) int {
	n := 0
	for i := range c.entries {
		if c.entries[i].source == source {
			n++
		}
	}
	return n
}

// pick returns the catalog entries of sel and the number of matches. An
// unfiltered range in key order, or the whole table by age, costs only
// the rows it returns; other filters scan the catalog once (no locks).
func (c *catalog) pick(sel selection, stuckBefore time.Time) (rows []catEntry, matched, skip int) {
	f := sel.filter
	lo := 0
	if f.Prefix != "" || f.After != "" {
		lo = sort.Search(len(c.entries), func(i int) bool {
			k := c.entries[i].key
			return k >= f.Prefix && (f.After == "" || k > f.After)
		})
	}
	hi := len(c.entries)
	if f.Prefix != "" {
		hi = lo + sort.Search(len(c.entries)-lo, func(i int) bool {
			return !strings.HasPrefix(c.entries[lo+i].key, f.Prefix)
		})
	}
	rangeOnly := f.Key == "" && f.Source == "" && !f.Stuck
	skip = sel.Skip
	clamp := func(matched int) int {
		if sel.LastPage && skip >= matched && matched > 0 {
			return (matched - 1) / sel.Limit * sel.Limit
		}
		return skip
	}
	switch {
	case rangeOnly && sel.Order == byKey:
		matched = hi - lo
		skip = clamp(matched)
		from := min(lo+skip, hi)
		return c.entries[from:min(from+sel.Limit, hi)], matched, skip
	case f.Key == "" && f.Source == "" && f.Prefix == "" && f.After == "" && sel.Order == byAge:
		// By age, the stuck keys are the first ones.
		matched = len(c.byAge)
		if f.Stuck {
			sb := stuckBefore.UnixNano()
			matched = sort.Search(len(c.byAge), func(i int) bool { return c.entries[c.byAge[i]].since > sb })
		}
		skip = clamp(matched)
		from := min(skip, matched)
		for _, p := range c.byAge[from:min(from+sel.Limit, matched)] {
			rows = append(rows, c.entries[p])
		}
		return rows, matched, skip
	}
	sb := stuckBefore.UnixNano()
	match := func(e *catEntry) bool {
		return strings.HasPrefix(e.key, f.Prefix) && (f.After == "" || e.key > f.After) &&
			strings.Contains(e.key, f.Key) && strings.Contains(e.source, f.Source) && (!f.Stuck || e.since <= sb)
	}
	scan := func(collect bool) {
		matched = 0
		visit := func(e *catEntry) {
			if !match(e) {
				return
			}
			if collect && matched >= skip && matched < skip+sel.Limit {
				rows = append(rows, *e)
			}
			matched++
		}
		if sel.Order == byKey {
			for i := lo; i < hi; i++ {
				visit(&c.entries[i])
			}
		} else {
			for _, p := range c.byAge {
				visit(&c.entries[p])
			}
		}
	}
	scan(true)
	if s := clamp(matched); s != skip {
		skip = s
		scan(true)
	}
	return rows, matched, skip
}

// catalogs hands out the current catalog.
type catalogs struct {
	table      *locker.Table
	exactBelow int

	// mu guards cur and building.
	mu       sync.Mutex
	cur      *catalog
	building bool
	// builds counts the background rebuilds running (at most one), so
	// that tests can wait for them to end.
	builds sync.WaitGroup
}

// get returns a catalog for stuckBefore. A table under exactBelow keys is
// walked now; a larger one is served from the shared catalog, built at
// once the first time and, once older than its maxAge, rebuilt in the
// background while the old one is still served.
func (cs *catalogs) get(stuckBefore time.Time) *catalog {
	if cs.table.Stats().Held < cs.exactBelow {
		return buildCatalog(cs.table, stuckBefore)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.cur == nil {
		cs.cur = buildCatalog(cs.table, stuckBefore)
		return cs.cur
	}
	if !cs.building && time.Since(cs.cur.built) > cs.cur.maxAge() {
		cs.building = true
		// Owned by cs; it ends when the walk and the sorts are done.
		cs.builds.Go(func() {
			c := buildCatalog(cs.table, stuckBefore)
			cs.mu.Lock()
			cs.cur, cs.building = c, false
			cs.mu.Unlock()
		})
	}
	return cs.cur
}

// view is what a page or a list shows: the rows of one selection, read
// afresh, and the figures of the whole table.
type view struct {
	Rows    []locker.KeyInfo // with Queue
	Matched int              // keys that match the filter (as of the catalog)
	Skip    int              // position of the page's first match, after LastPage
	// More says that matches follow the page; Last is the catalog key
	// of the page's last match (the API's cursor), which may have been
	// released since.
	More bool
	Last string

	Held, Waiting int       // right now (Table.Stats)
	Stuck         int       // as of the catalog
	Oldest        time.Time // grant time of the longest-held key, as of the catalog
}

// view selects sel at now. Keys of the page released since the catalog
// was made are left out.
func (s *server) view(sel selection, now time.Time) view {
	stuckBefore := now.Add(-s.opts.StuckAfter)
	c := s.catalogs.get(stuckBefore)
	st := s.opts.Table.Stats()
	v := view{Held: st.Held, Waiting: st.Waiting, Stuck: c.stuck, Oldest: c.oldest}
	if sel.Limit <= 0 {
		return v
	}
	picked, matched, skip := c.pick(sel, stuckBefore)
	v.Matched, v.Skip = matched, skip
	v.More = skip+len(picked) < matched
	if len(picked) > 0 {
		v.Last = picked[len(picked)-1].key
	}
	v.Rows = make([]locker.KeyInfo, 0, len(picked))
	for i := range picked {
		if ki, ok := s.opts.Table.Key(picked[i].key); ok {
			v.Rows = append(v.Rows, ki)
		}
	}
	return v
}
