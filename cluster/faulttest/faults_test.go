package faulttest

import (
	"testing"
	"time"
)

// The faults of SPEC §8.9. Each injects its fault, measures what it can,
// and undoes it; the run around it (harness_test.go) checks the rest.

// killLeader is kill -9 of the leader, restarted once another leads.
var killLeader = fault{name: "kill-leader", inject: func(f *faultRun) {
	at := time.Now()
	f.leader.kill()
	nl, _ := f.awaitLeaderOf(f.c.others(f.leader), 30*time.Second)
	f.measure("kill→new leader", time.Since(at))
	f.note("new leader %s after %v", nl.id, time.Since(at).Round(time.Millisecond))
	f.leader.start(f.t)
}}

// TestClusterFaults3 runs every fault on a cluster of three.
func TestClusterFaults3(t *testing.T) {
	c := startCluster(t, "f3", 31, 3)
	runFaults(t, c, runsOf(t, 2), []fault{killLeader})
}
