package crashtest

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/bench"
)

// BenchmarkBinaryTCP runs 64 lockers (lock then unlock, keys of their own)
// against the real binary in its own process, without and with DATA_PATH,
// so the server's scheduler is not shared with the load generator. Target:
// with the log, at least 0.8 times the in-memory acquires/s.
//
// It also reports the CPU time the server and the lockers spent per
// acquire: where both share the machine's cores and keep them busy, the
// ratio is set by what the log adds to those, not by fsync latency.
//
// The alternating run measures the same two servers taking turns every
// few thousand acquires, so that the machine's drift in speed between the
// two phases of a run does not decide the ratio; it reports the ratio
// itself.
func BenchmarkBinaryTCP(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchBinary(b, "") })
	b.Run("wal", func(b *testing.B) { benchBinary(b, filepath.Join(b.TempDir(), "locks.wal")) })
	b.Run("alternating", func(b *testing.B) {
		memory := start(b, "", "WEB_ADDRESS=127.0.0.1:0")
		defer memory.kill()
		wal := start(b, filepath.Join(b.TempDir(), "locks.wal"), "WEB_ADDRESS=127.0.0.1:0")
		defer wal.kill()
		before := fsyncCount(b, wal)
		perSecond := bench.Alternating(b, 64, 8000, memory.addr, wal.addr)
		b.ReportMetric(perSecond[0], "memory-acquires/s")
		b.ReportMetric(perSecond[1], "wal-acquires/s")
		b.ReportMetric(perSecond[1]/perSecond[0], "wal/memory")
		b.ReportMetric((fsyncCount(b, wal)-before)/float64(max(1, b.N/2)), "fsyncs/acquire")
	})
}

func benchBinary(b *testing.B, dataPath string) {
	srv := start(b, dataPath, "WEB_ADDRESS=127.0.0.1:0")
	defer srv.kill()
	before := fsyncCount(b, srv)
	cpu := serverCPU(b, srv)
	own := bench.ProcessCPU()
	idle, total := machineIdle()
	bench.Lockers(b, srv.addr, 64)
	if idle2, total2 := machineIdle(); total2 > total {
		b.ReportMetric(100*float64(idle2-idle)/float64(total2-total), "idle-%")
	}
	b.ReportMetric(float64(serverCPU(b, srv)-cpu)/float64(b.N)/1e3, "server-cpu-µs/acquire")
	b.ReportMetric(float64(bench.ProcessCPU()-own)/float64(b.N)/1e3, "lockers-cpu-µs/acquire")
	if dataPath != "" {
		b.ReportMetric(float64(fsyncCount(b, srv)-before)/float64(b.N), "fsyncs/acquire")
	}
}

// machineIdle reads, from /proc/stat, the clock ticks all cores have spent
// idle or waiting for I/O, and all ticks: where the lockers and the server
// share the cores, the time they leave unused is the other half of the
// ratio. It returns zeros where /proc is missing.
func machineIdle() (idle, total uint64) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, s := range f[1:9] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return idle, total
}

// serverCPU reads the server process's user and system CPU time so far
// from /proc, so the report shows whether the log costs processor time or
// only waiting. It returns 0 where /proc is missing.
func serverCPU(b *testing.B, srv *server) time.Duration {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", srv.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name is in brackets and may hold spaces and brackets:
	// count from the last ") ". utime and stime are then the 12th and 13th
	// fields, in clock ticks.
	i := bytes.LastIndex(stat, []byte(") "))
	if i < 0 {
		b.Fatalf("unexpected /proc stat %q", stat)
	}
	f := strings.Fields(string(stat[i+2:]))
	if len(f) < 13 {
		b.Fatalf("unexpected /proc stat %q", stat)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatalf("unexpected /proc stat %q: %v", stat, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// fsyncCount reads the server's count of log fsyncs from /metrics.
func fsyncCount(b *testing.B, srv *server) float64 {
	resp, err := http.Get("http://" + srv.web + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "locking_center_wal_fsync_duration_seconds_count "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	return 0
}
