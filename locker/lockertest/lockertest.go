// Package lockertest holds helpers for tests of the lock engine and of what
// is built on it. It is imported by tests only.
package lockertest

import (
	"runtime"
	"strings"
)

// Parked counts the goroutines of this process blocked in the select of
// locker's Table.Lock: waiters that the key's channel really queues, not
// only registered ones. Tests of arrival order wait for it before they send
// the next waiter, since registering and parking are two steps.
func Parked() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "locker.(*Table).Lock(") {
			count++
		}
	}
	return count
}
