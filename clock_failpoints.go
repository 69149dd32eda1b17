//go:build failpoints

package main

import (
	"fmt"
	"os"
	"time"
)

// testClock is the lock table's clock in the failpoint build: with
// LC_CLOCK_OFFSET set (a duration, "1h" or "-1h"), time.Now moved by it,
// for the cluster's fault tests of one node's clock an hour off. It is
// what the table reads for tokens, since and TTL deadlines; raft's timers
// are not moved (they measure intervals). libfaketime cannot do this: Go
// reads the clock through the vDSO.
func testClock() func() time.Time {
	v := os.Getenv("LC_CLOCK_OFFSET")
	if v == "" {
		return nil
	}
	off, err := time.ParseDuration(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "LC_CLOCK_OFFSET=%q: want a duration such as 1h or -1h\n", v)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "failpoint clock: the lock table's clock is %v off\n", off)
	return func() time.Time { return time.Now().Add(off) }
}
