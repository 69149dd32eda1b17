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
	t.Run("grants in FIFO order overtake nobody", func(t *testing.T) {
		var q queue
		for c := range 4 {
			q.Wait(c)
		}
		for c := range 4 {
			if n := q.Granted(c); n != 0 {
				t.Errorf("client %d granted in order overtook %d", c, n)
			}
			q.Wait(c) // back of the queue, as a client that locks again
		}
		for c := range 4 {
			if n := q.Granted(c); n != 0 {
				t.Errorf("second turn: client %d overtook %d", c, n)
			}
		}
	})
	t.Run("the last waiter granted first overtakes everyone before it", func(t *testing.T) {
		var q queue
		for c := range 4 {
			q.Wait(c)
		}
		if n := q.Granted(3); n != 3 {
			t.Errorf("client 3 overtook %d, want 3", n)
		}
		if n := q.Granted(1); n != 1 {
			t.Errorf("client 1 overtook %d, want 1 (client 0 still waits)", n)
		}
		if n := q.Granted(0); n != 0 {
			t.Errorf("client 0 overtook %d, want 0", n)
		}
		if n := q.Granted(2); n != 0 {
			t.Errorf("client 2 overtook %d, want 0", n)
		}
	})
	t.Run("a holder that locks again at once and wins overtakes the queue", func(t *testing.T) {
		var q queue
		q.Wait(0)
		q.Granted(0)
		q.Wait(1)
		q.Wait(2)
		q.Wait(0) // releases, asks again, and wins again: Redis-style polling can do this
		if n := q.Granted(0); n != 2 {
			t.Errorf("client 0 overtook %d, want 2", n)
		}
	})
	t.Run("a client not waiting overtakes nobody", func(t *testing.T) {
		var q queue
		q.Wait(1)
		if n := q.Granted(5); n != 0 {
			t.Errorf("unknown client overtook %d, want 0", n)
		}
		if n := q.Granted(1); n != 0 {
			t.Errorf("client 1 overtook %d, want 0", n)
		}
	})
}
