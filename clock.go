//go:build !failpoints

package main

import "time"

// testClock is the lock table's clock: nil, time.Now, in the normal build.
// The failpoint build can set it off by LC_CLOCK_OFFSET (clock_failpoints.go).
func testClock() func() time.Time { return nil }
