package main

import (
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of samples by the
// nearest-rank method: the smallest sample that at least p per cent of the
// samples do not exceed. It sorts samples in place and returns 0 for none.
// Nearest rank never invents a value between two samples, so a p99 is a
// latency some cycle really took.
func percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	rank := int(math.Ceil(p / 100 * float64(len(samples))))
	rank = max(rank, 1)
	rank = min(rank, len(samples))
	return samples[rank-1]
}

// jain returns Jain's fairness index of the per-client counts:
// (Σx)² / (n·Σx²). It is 1 when every client got the same share and 1/n
// when one client got everything; 0 for no counts or all zero.
func jain(counts []int) float64 {
	var sum, sumSq float64
	for _, c := range counts {
		x := float64(c)
		sum += x
		sumSq += x * x
	}
	if sumSq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sumSq)
}

// median returns the median of xs (the mean of the two middle values for an
// even count), 0 for none. It sorts xs in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// queue tracks the order in which clients of one key started waiting, to
// count FIFO overtakes: a grant to a client while a client that started
// waiting before it is still waiting. The order is the order of calls to
// Wait, which the caller makes just before sending its request. It is not
// safe for concurrent use: the caller serialises Wait and Granted.
type queue struct {
	next    uint64
	waiting map[int]waiter
}

// waiter is one client's place in the order of Wait calls, and its time.
type waiter struct {
	place uint64
	since time.Time
}

// Wait records that client starts waiting at t, behind everyone already
// waiting.
func (q *queue) Wait(client int, t time.Time) {
	if q.waiting == nil {
		q.waiting = make(map[int]waiter)
	}
	q.next++
	q.waiting[client] = waiter{place: q.next, since: t}
}

// Granted records that client got the key and returns how many clients that
// started waiting before it are still waiting (the waiters it overtook), and
// how many of those started waiting more than margin before it: overtakes
// that no scheduling delay of less than margin between a client's send and
// the server's read can explain. A client that was not waiting overtakes
// nobody.
func (q *queue) Granted(client int, margin time.Duration) (overtaken, byMargin int) {
	mine, ok := q.waiting[client]
	if !ok {
		return 0, 0
	}
	delete(q.waiting, client)
	for _, w := range q.waiting {
		if w.place < mine.place {
			overtaken++
			if mine.since.Sub(w.since) > margin {
				byMargin++
			}
		}
	}
	return overtaken, byMargin
}
