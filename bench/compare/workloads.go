package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The workloads. Every run connects its clients first (not timed), lets them
// run for a warm-up that is not counted, counts for the run's duration, then
// stops them and closes the clients.
const (
	wA = "A"   // one client, Lock+Unlock on fresh keys: cycle latency
	wB = "B"   // 32 clients, each on its own keys: cycles/s
	wC = "C"   // 16 clients on one key, holding it ~100 µs each time
	wD = "D"   // durable systems, 1/16/64 lockers on their own keys
	wM = "M"   // B's 32 clients as goroutines sharing one connection
	wF = "F"   // clusters: kill -9 of the leader → first grant; planned hand-over
	nB = 32    // clients of B and M
	nC = 16    // clients of C
	kC = "hot" // C's one key (with the run's prefix)
)

// overtakeMargin splits C's overtakes: one of a waiter that started waiting
// more than this before the client granted is not a matter of which of two
// nearly simultaneous requests the server happened to read first.
const overtakeMargin = time.Millisecond

// dLockers are the locker counts of workload D.
var dLockers = []int{1, 16, 64}

// The phases of a run, read by every worker.
const (
	phaseWarm int32 = iota
	phaseCount
	phaseStop
)

// runResult is what one run of one workload on one system measured.
type runResult struct {
	cycles    int             // Lock+Unlock cycles (acquisitions) completed while counting
	elapsed   time.Duration   // the counted time
	latencies []time.Duration // A: each cycle; C: each handover
	holds     []time.Duration // C: how long each holder really held the key
	perClient []int           // C: acquisitions per client
	overtakes int             // C: FIFO overtakes
	// C: overtakes of a waiter that started waiting more than
	// overtakeMargin earlier
	farOvertakes int
}

// rate returns cycles per second.
func (r runResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.cycles) / r.elapsed.Seconds()
}

// timing is the warm-up and counted duration of every run.
type timing struct {
	warmup, duration time.Duration
}

// sharer is a client that many goroutines can use at once through views of
// it, one per goroutine: a Locking-Center session, or etcd's client and
// session (gRPC carries many calls on one connection). Closing a view leaves
// the shared connection open; closing the original closes it.
type sharer interface {
	client
	share() client
}

// connectAll connects n clients of sys; with shared, one client and n-1
// views of it (workload M). The caller closes what it returns, also on
// error.
func connectAll(ctx context.Context, sys *system, n int, shared bool) ([]client, error) {
	clients := make([]client, 0, n)
	if shared {
		c, err := sys.connect(ctx, 0)
		if err != nil {
			return nil, err
		}
		sc, ok := c.(sharer)
		if !ok {
			_ = c.Close()
			return nil, fmt.Errorf("%s has no connection to share", sys.name)
		}
		clients = append(clients, sc)
		for len(clients) < n {
			clients = append(clients, sc.share())
		}
		return clients, nil
	}
	for i := range n {
		c, err := sys.connect(ctx, i)
		if err != nil {
			return clients, fmt.Errorf("connect client %d of %d: %w", i+1, n, err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func closeAll(clients []client) error {
	var errs []error
	for _, c := range clients {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// runCycles runs n clients, each locking and unlocking fresh keys of its
// own in a loop (workloads A, B, D, M). With latency set it records how
// long each cycle took.
func runCycles(ctx context.Context, sys *system, prefix string, n int, shared, latency bool, t timing) (runResult, error) {
	clients, err := connectAll(ctx, sys, n, shared)
	defer func() { _ = closeAll(clients) }()
	if err != nil {
		return runResult{}, err
	}
	var phase atomic.Int32
	var firstErr error
	var errOnce sync.Once
	counts := make([]int, n)
	lats := make([][]time.Duration, n)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			key := make([]byte, 0, 64)
			for seq := 0; phase.Load() != phaseStop; seq++ {
				key = append(key[:0], prefix...)
				key = strconv.AppendInt(key, int64(i), 10)
				key = append(key, '/')
				key = strconv.AppendInt(key, int64(seq), 10)
				k := string(key)
				start := time.Now()
				err := c.Lock(ctx, k)
				if err == nil {
					err = c.Unlock(ctx, k)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("client %d: %w", i, err) })
					phase.Store(phaseStop)
					return
				}
				if phase.Load() == phaseCount {
					counts[i]++
					if latency {
						lats[i] = append(lats[i], time.Since(start))
					}
				}
			}
		})
	}
	elapsed := measure(ctx, &phase, t)
	wg.Wait()
	if firstErr != nil {
		return runResult{}, firstErr
	}
	r := runResult{elapsed: elapsed}
	for i := range n {
		r.cycles += counts[i]
		r.latencies = append(r.latencies, lats[i]...)
	}
	return r, nil
}

// measure waits out the warm-up, counts for the duration, then tells the
// workers to stop. It returns the counted time.
func measure(ctx context.Context, phase *atomic.Int32, t timing) time.Duration {
	sleepCtx(ctx, t.warmup)
	if !phase.CompareAndSwap(phaseWarm, phaseCount) {
		return 0 // a worker failed during the warm-up
	}
	start := time.Now()
	sleepCtx(ctx, t.duration)
	elapsed := time.Since(start)
	phase.CompareAndSwap(phaseCount, phaseStop)
	return elapsed
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// holdFor returns hold after since. It sleeps in nanosleep(2), with the
// thread's timer slack set to 1 ns (the default 50 µs would be half the
// hold), for all but the last spinSlack of it, and waits busily, yielding to
// other goroutines, for the rest. A Go timer cannot do it: its sleep lasts
// about a millisecond on Linux however short it is asked to be (the
// runtime's poller waits in whole milliseconds); and a busy wait alone would
// take a core from the servers.
func holdFor(since time.Time, hold time.Duration) {
	const spinSlack = 20 * time.Microsecond
	if left := hold - time.Since(since) - spinSlack; left > 0 {
		// PR_SET_TIMERSLACK of the thread this goroutine runs on now; a
		// thread switch in between only costs the precision.
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 29, 1, 0)
		ts := syscall.NsecToTimespec(int64(left))
		_ = syscall.Nanosleep(&ts, nil) // EINTR only shortens the sleep; the spin makes it up
	}
	for time.Since(since) < hold {
		runtime.Gosched()
	}
}

// lockSender is a client whose Lock can tell when its request is on its
// way: v1, whose Lock connects first. A client on a connection already open
// sends at once, and begins to wait when Lock is called.
type lockSender interface {
	LockSent(ctx context.Context, key string, sent func()) error
}

// hotKey is workload C's shared record of one key's turns. Its mutex is
// taken only around bookkeeping, never while a client talks to a server.
type hotKey struct {
	mu          sync.Mutex // guards every field below
	q           queue
	lastRelease time.Time // when the last holder began sending its release
	handovers   []time.Duration
	holds       []time.Duration
	counts      []int
	overtakes   int
	// farOvertakes are overtakes of a waiter that started waiting more than
	// overtakeMargin earlier.
	farOvertakes int
}

// runHotKey runs n clients that all lock one key, hold it for hold, and
// release it, in a loop (workload C). The handover is the time from the
// holder starting to send its release to the next holder's grant arriving.
func runHotKey(ctx context.Context, sys *system, prefix string, n int, hold time.Duration, t timing) (runResult, error) {
	clients, err := connectAll(ctx, sys, n, false)
	defer func() { _ = closeAll(clients) }()
	if err != nil {
		return runResult{}, err
	}
	key := prefix + kC
	h := &hotKey{counts: make([]int, n)}
	var phase atomic.Int32
	var firstErr error
	var errOnce sync.Once
	fail := func(i int, err error) {
		errOnce.Do(func() { firstErr = fmt.Errorf("client %d: %w", i, err) })
		phase.Store(phaseStop)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			for phase.Load() != phaseStop {
				wait := func() {
					h.mu.Lock()
					h.q.Wait(i, time.Now())
					h.mu.Unlock()
				}
				var err error
				if ls, ok := c.(lockSender); ok {
					err = ls.LockSent(ctx, key, wait)
				} else {
					wait()
					err = c.Lock(ctx, key)
				}
				if err != nil {
					fail(i, err)
					return
				}
				granted := time.Now()
				counting := phase.Load() == phaseCount
				h.mu.Lock()
				overtaken, byMargin := h.q.Granted(i, overtakeMargin)
				if counting {
					if !h.lastRelease.IsZero() {
						h.handovers = append(h.handovers, granted.Sub(h.lastRelease))
					}
					h.counts[i]++
					h.overtakes += overtaken
					h.farOvertakes += byMargin
				}
				h.mu.Unlock()
				holdFor(granted, hold)
				h.mu.Lock()
				h.lastRelease = time.Now()
				if counting {
					h.holds = append(h.holds, h.lastRelease.Sub(granted))
				}
				h.mu.Unlock()
				if err := c.Unlock(ctx, key); err != nil {
					fail(i, err)
					return
				}
			}
		})
	}
	elapsed := measure(ctx, &phase, t)
	wg.Wait()
	if firstErr != nil {
		return runResult{}, firstErr
	}
	r := runResult{elapsed: elapsed, latencies: h.handovers, holds: h.holds, perClient: h.counts, overtakes: h.overtakes, farOvertakes: h.farOvertakes}
	for _, c := range h.counts {
		r.cycles += c
	}
	return r, nil
}
