package main

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	us := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Microsecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 … 1, unsorted on purpose
	}
	cases := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", us(7), 99, 7 * time.Microsecond},
		{"p50 of 1..100", us(hundred...), 50, 50 * time.Microsecond},
		{"p99 of 1..100", us(hundred...), 99, 99 * time.Microsecond},
		{"p100 is the maximum", us(hundred...), 100, 100 * time.Microsecond},
		{"tiny p is the minimum", us(hundred...), 0.001, 1 * time.Microsecond},
		{"p50 of an even count is the lower middle", us(4, 1, 3, 2), 50, 2 * time.Microsecond},
		{"p99 of few samples is the maximum", us(5, 1, 9), 99, 9 * time.Microsecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := percentile(c.samples, c.p); got != c.want {
				t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
			}
		})
	}
}

func TestJain(t *testing.T) {
	cases := []struct {
		name   string
		counts []int
		want   float64
	}{
		{"equal shares", []int{10, 10, 10, 10}, 1},
		{"one client took all of four", []int{40, 0, 0, 0}, 0.25},
		{"two of four share", []int{5, 5, 0, 0}, 0.5},
		// (1+2+3)² / (3·(1+4+9)) = 36/42
		{"1, 2, 3", []int{1, 2, 3}, 36.0 / 42.0},
		{"nothing counted", []int{0, 0}, 0},
		{"no clients", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := jain(c.counts); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("jain(%v) = %v, want %v", c.counts, got, c.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3, 1, 2 = %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 4, 1, 3, 2 = %v, want 2.5", got)
	}
	if got := median(nil); got != 0 {
		t.Errorf("median of nothing = %v, want 0", got)
	}
}

func TestQueueOvertakes(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const margin = time.Millisecond
	granted := func(t *testing.T, q *queue, client, wantOvertaken, wantFar int) {
		t.Helper()
		if n, far := q.Granted(client, margin); n != wantOvertaken || far != wantFar {
			t.Errorf("client %d overtook %d (%d by more than %v), want %d (%d)", client, n, far, margin, wantOvertaken, wantFar)
		}
	}
	t.Run("grants in FIFO order overtake nobody", func(t *testing.T) {
		var q queue
		for c := range 4 {
			q.Wait(c, at(c))
		}
		for c := range 4 {
			granted(t, &q, c, 0, 0)
			q.Wait(c, at(10+c)) // back of the queue, as a client that locks again
		}
		for c := range 4 {
			granted(t, &q, c, 0, 0)
		}
	})
	t.Run("the last waiter granted first overtakes everyone before it", func(t *testing.T) {
		var q queue
		for c := range 4 {
			q.Wait(c, at(2*c)) // 0, 2, 4, 6 ms
		}
		granted(t, &q, 3, 3, 3) // 6 ms passes 0, 2, 4: all by more than 1 ms
		granted(t, &q, 1, 1, 1) // 2 ms passes 0
		granted(t, &q, 0, 0, 0)
		granted(t, &q, 2, 0, 0)
	})
	t.Run("a near tie is an overtake but not a far one", func(t *testing.T) {
		var q queue
		q.Wait(0, at(0))
		q.Wait(1, t0.Add(300*time.Microsecond))
		granted(t, &q, 1, 1, 0)
		granted(t, &q, 0, 0, 0)
	})
	t.Run("a holder that locks again at once and wins overtakes the queue", func(t *testing.T) {
		var q queue
		q.Wait(0, at(0))
		granted(t, &q, 0, 0, 0)
		q.Wait(1, at(1))
		q.Wait(2, at(2))
		q.Wait(0, at(5)) // releases, asks again, and wins again: Redis-style polling can do this
		granted(t, &q, 0, 2, 2)
	})
	t.Run("a client not waiting overtakes nobody", func(t *testing.T) {
		var q queue
		q.Wait(1, at(0))
		granted(t, &q, 5, 0, 0)
		granted(t, &q, 1, 0, 0)
	})
}
