package crashtest

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
	"github.com/locking-center/locking-center/walog/crashtest/history"
)

var leakDuration = flag.Duration("leak-duration", 0, "load time of TestNoLeaksAfterLoad (default LC_LEAK_DURATION, else 3s)")

// runtimeStats is one "runtime stats" line of the failpoint build (its
// answer to SIGUSR1, after a garbage collection) and the process's open
// descriptors.
type runtimeStats struct {
	goroutines, heapInuse, heapObjects, fds int
}

var statsLine = regexp.MustCompile(`runtime stats goroutines=(\d+) heap_inuse=(\d+) heap_objects=(\d+)`)

// stats asks srv (started with LC_STATS_ON_SIGUSR1) for its runtime stats.
func stats(t *testing.T, srv *server) runtimeStats {
	t.Helper()
	before := len(statsLine.FindAllString(srv.out.String(), -1))
	if err := srv.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := statsLine.FindAllStringSubmatch(srv.out.String(), -1)
		if len(all) > before {
			m := all[len(all)-1]
			var st runtimeStats
			st.goroutines, _ = strconv.Atoi(m[1])
			st.heapInuse, _ = strconv.Atoi(m[2])
			st.heapObjects, _ = strconv.Atoi(m[3])
			fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", srv.cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			st.fds = len(fds)
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("no runtime stats line within 10s:\n%s", srv.out)
		}
		time.Sleep(10 * time.Millisecond) // the line has no event to wait on
	}
}

// TestNoLeaksAfterLoad runs the load of TestCrashRestartUnderLoad against
// one server that is never killed, then stops the clients, ends their
// sessions and frees every key: the server's goroutines, descriptors and
// live heap come back near what they were after a first short round. Its
// history is checked too.
func TestNoLeaksAfterLoad(t *testing.T) {
	d := 3 * time.Second
	if v := os.Getenv("LC_LEAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("LC_LEAK_DURATION=%q: %v", v, err)
		}
	}
	if *leakDuration > 0 {
		d = *leakDuration
	}
	total := d
	fp := failpointBinary(t)
	srv := startWith(t, fp, filepath.Join(t.TempDir(), "locks.wal"), "LC_STATS_ON_SIGUSR1=1",
		"LC_COMPACT_FLOOR="+strconv.Itoa(loadCompactFloor))
	defer srv.kill()

	lr, v1s, ss := newLoadRun(t, "leak", srv.addr)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))

	// round runs the load for d, then stops it: resets free the keys so
	// that every waiter is answered, every client settles and every
	// session is closed.
	ops := 0
	round := func(n int, d time.Duration) {
		for _, w := range ss {
			if !w.open(lr) {
				t.Fatalf("%s: no session", w.name)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for _, w := range v1s {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(n)))
			wg.Go(func() { w.run(ctx, lr, wrng) })
		}
		for _, w := range ss {
			wrng := rand.New(rand.NewPCG(rng.Uint64(), uint64(n)))
			wg.Go(func() { w.run(ctx, lr, wrng) })
		}
		<-ctx.Done()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }() // ends when the clients have
		for stopped := false; !stopped; {
			for _, k := range lr.keys { // clients stop at their next turn: free the keys they wait for
				h := lr.rec.Call(history.Op{Client: loadV1 + loadSessions, Kind: history.ResetKey, Key: k, Who: "checker"})
				a, err := v1Ask(lr.addr, protocol.Frame{Action: protocol.ResetByKey, Key: k}, 0)
				if err != nil {
					t.Fatalf("reset %q: %v", k, err)
				}
				lr.rec.Return(h, outcomeOf(a), 0)
			}
			select {
			case <-done:
				stopped = true
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !settleAfterRestart(t, lr, srv, v1s, ss, loadV1+loadSessions, n) {
			t.Fatalf("round %d: the server died:\n%s", n, srv.out)
		}
		for _, w := range ss {
			h := lr.rec.Call(history.Op{Client: w.id, Kind: history.EndSession, Key: history.AllKeys, Who: w.name})
			a, err := w.s.ask(protocol.Close, "", 0)
			if err != nil {
				t.Fatalf("%s: close: %v", w.name, err)
			}
			lr.rec.Return(h, outcomeOf(a.Status), 0)
			w.s.close()
			w.s, w.sid = nil, 0
		}
		rep, err := lr.rec.Check(time.Minute)
		if err != nil {
			t.Fatalf("round %d: %v", n, err)
		}
		ops += rep.Ops
		lr.rec = history.NewRecorder()
	}

	round(0, 300*time.Millisecond)
	start := stats(t, srv)
	// The load comes in rounds of at most 5 s, each ended as above, so
	// that each history porcupine checks stays small.
	for n := 1; d > 0; n++ {
		round(n, min(d, 5*time.Second))
		d -= 5 * time.Second
	}
	var end runtimeStats
	// The server closes a connection a moment after its last answer:
	// give it that moment (a second at most) before judging.
	deadline := time.Now().Add(5 * time.Second)
	for {
		end = stats(t, srv)
		if end.goroutines <= start.goroutines+2 && end.fds <= start.fds+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after %v of load (%d operations, histories checked): goroutines %d → %d, descriptors %d → %d, heap in use %d → %d KiB (%d → %d objects)",
		total, ops, start.goroutines, end.goroutines, start.fds, end.fds, start.heapInuse>>10, end.heapInuse>>10, start.heapObjects, end.heapObjects)
	if end.goroutines > start.goroutines+2 {
		t.Errorf("goroutines grew from %d to %d", start.goroutines, end.goroutines)
	}
	if end.fds > start.fds+2 {
		t.Errorf("descriptors grew from %d to %d", start.fds, end.fds)
	}
	// The heap after a collection: the load leaves the table empty, the
	// sessions ended; what is left is caches and the log's buffers.
	if limit := 2*start.heapInuse + 2<<20; end.heapInuse > limit {
		t.Errorf("heap in use grew from %d to %d bytes (limit %d)", start.heapInuse, end.heapInuse, limit)
	}
	if strings.Contains(srv.out.String(), "panic") {
		t.Errorf("the server panicked:\n%s", srv.out)
	}
}
