//go:build failpoints

package walog

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// This file is built only with -tags failpoints, for the crash tests: it
// makes a failpoint kill the process with SIGKILL, at once, as a power cut
// of the process would, at a chosen pass through a chosen place.
//
// With LC_STATS_ON_SIGUSR1 set, SIGUSR1 makes the process collect its
// garbage and write "runtime stats goroutines=N heap_inuse=B
// heap_objects=N" to standard error, for the leak checks.
//
// LC_FAILPOINT=name:n[,name:n...] kills the process the n-th time it
// passes the place name (n ≥ 1). Just before, it writes one line to
// standard error, "failpoint <name> reached (pass <n>): SIGKILL", which the
// test counts. LC_COMPACT_FLOOR=bytes lowers the compaction floor, so that
// a short run compacts often enough to reach the compaction points.
//
// LC_SABOTAGE=drop-releases or forget-holds plants a bug instead, for a
// test that the crash tests find one: the first writes no release record
// (released keys come back held after a restart), the second restores
// nothing at start (acknowledged grants are lost).
//
// The places (Failpoints lists them):
//
//	append-before-fsync      a batch is written, not yet fsynced
//	fsync-before-answer      a batch is fsynced; no caller answered, so no '+' sent
//	release-before-apply     a batch with a release is fsynced; the release not yet applied
//	compact-temp-written     a rewrite's temporary file is written, not fsynced
//	compact-temp-synced      the temporary file is whole and fsynced, not renamed
//	compact-renamed          renamed over the log, the folder not fsynced
//	compact-folder-synced    the folder is fsynced: the rewrite is durable
const failpointsOn = true

// Failpoints names every crash point, in the order a lock and a
// compaction pass them.
var Failpoints = []string{
	"append-before-fsync", "fsync-before-answer", "release-before-apply",
	"compact-temp-written", "compact-temp-synced", "compact-renamed", "compact-folder-synced",
}

// armed maps a place to its pass counter and the pass that kills; built
// once at start from LC_FAILPOINT and read-only afterwards.
var armed = parseFailpoints(os.Getenv("LC_FAILPOINT"))

type arm struct {
	passes atomic.Int64
	at     int64
}

func parseFailpoints(v string) map[string]*arm {
	m := make(map[string]*arm)
	for f := range strings.SplitSeq(v, ",") {
		if f == "" {
			continue
		}
		name, n, ok := strings.Cut(f, ":")
		at, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || at < 1 {
			fmt.Fprintf(os.Stderr, "LC_FAILPOINT=%q: want name:n with n ≥ 1\n", v)
			os.Exit(2)
		}
		m[name] = &arm{at: at}
	}
	return m
}

// failpoint kills the process at the armed pass through name.
func failpoint(name string) {
	a := armed[name]
	if a == nil {
		return
	}
	if n := a.passes.Add(1); n == a.at {
		fmt.Fprintf(os.Stderr, "failpoint %s reached (pass %d): SIGKILL\n", name, n)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; nothing more may happen here
	}
}

// failpointFloor is LC_COMPACT_FLOOR, or 0.
func failpointFloor() int64 {
	n, _ := strconv.ParseInt(os.Getenv("LC_COMPACT_FLOOR"), 10, 64)
	return n
}

func init() {
	if os.Getenv("LC_STATS_ON_SIGUSR1") == "" {
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() { // lives as long as the process: it is the process's own probe
		for range sig {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(os.Stderr, "runtime stats goroutines=%d heap_inuse=%d heap_objects=%d\n",
				runtime.NumGoroutine(), ms.HeapInuse, ms.HeapObjects)
		}
	}()
}

// sabotage is LC_SABOTAGE, read once at start.
var sabotage = os.Getenv("LC_SABOTAGE")

// sabotaged reports whether the planted bug name is switched on.
func sabotaged(name string) bool { return sabotage == name }
