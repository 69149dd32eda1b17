package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleReport is a report over made-up figures for every cell.
func sampleReport() *report {
	var systems []*system
	for _, n := range systemNames {
		s := &system{name: n, what: "made up", floor: strings.HasPrefix(n, "floor"),
			durable: strings.HasSuffix(n, "-wal") || n == "etcd", shared: n == "lc-session" || n == "lc-session-wal" || n == "etcd"}
		systems = append(systems, s)
	}
	results := make(map[cell][]runResult)
	for i, s := range systems {
		f := float64(i + 1)
		for round := range 3 {
			for _, c := range plan(allWorkloads, systems, round) {
				if c.system != s.name {
					continue
				}
				r := runResult{cycles: int(1000 * f), elapsed: time.Second}
				switch c.workload {
				case wA:
					r.latencies = []time.Duration{time.Duration(40*f) * time.Microsecond, time.Duration(90*f) * time.Microsecond}
				case wC:
					r.latencies = []time.Duration{time.Duration(60*f) * time.Microsecond}
					if s.name == "etcd" {
						r.latencies = []time.Duration{70 * time.Millisecond} // far off the others: cut in the chart
					}
					r.holds = []time.Duration{100 * time.Microsecond}
					r.perClient = []int{10, 10, 10, 10}
				}
				results[c] = append(results[c], r)
			}
		}
	}
	srv := &servers{versions: map[string]string{"redis": "Redis server v=7"}, skipped: map[string]string{}}
	cfg := config{rounds: 3, timing: timing{warmup: 200 * time.Millisecond, duration: time.Second}, hold: 100 * time.Microsecond, redisRetry: time.Millisecond, args: []string{"-out", "../../docs/bench"}}
	failed := map[cell]error{{wD, 1, "etcd"}: os.ErrDeadlineExceeded}
	return newReport(cfg, machine{CPU: "test CPU", Cores: 2, Kernel: "Linux test", Go: "go-test"}, srv, systems, results, failed)
}

func TestReportWritesReadmeChartAndResults(t *testing.T) {
	dir := t.TempDir()
	if err := sampleReport().write(dir); err != nil {
		t.Fatalf("write: %v", err)
	}
	png, err := os.ReadFile(filepath.Join(dir, "chart.png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10_000 {
		t.Errorf("chart.png: %d bytes, not a drawn PNG", len(png))
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"![bench-compare chart](chart.png)",
		// lc-session is the 5th system: A p50 of samples 200 and 450 µs is 200.
		"| lc-session | 200 | 450 | 5,000 |",
		// session A p50 (200) ÷ persistent floor's (80): 2.50, a miss.
		"| session A p50 ÷ persistent floor A p50 | 2.50× | ≤ 1.05 (missed) |",
		// M ÷ B for the same made-up rate is 1.00, met.
		"| M (one shared session) ÷ session B (32 sessions) | 1.00× | ≥ 1 (met) |",
		"D (1 lockers) on etcd failed",
		// lc-session-tls is the 7th system (rate 7,000), lc-session the 5th
		// (5,000); lc-v1-tls the 6th (A p50 240 µs), lc-v1 the 4th (160).
		"| session over TLS ÷ session (B cycles/s) | 1.40× | – |",
		"| v1 over TLS ÷ v1 (A p50) | 1.50× | – |",
		"| lc-session-tls | 7,000 | 7,000 | 7,000 |",
		"`lc-v1-tls` and `lc-session-tls` are the in-memory server started with `TLS_CERT` and `TLS_KEY`",
		"share one `tls.ClientSessionCache`",
		"| CPU | test CPU |",
		"go run . -out ../../docs/bench",
	} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README lacks %q", want)
		}
	}
	var results struct {
		Cells []map[string]any `json:"cells"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &results); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(results.Cells) == 0 {
		t.Error("results.json has no cells")
	}
}

func TestSig3(t *testing.T) {
	for x, want := range map[float64]string{2: "2.00", 0.897: "0.897", 0.8999: "0.900", 12.34: "12.3", 1.05: "1.05", 150: "150"} {
		if got := sig3(x); got != want {
			t.Errorf("sig3(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestPlanTakesSystemsInTurn(t *testing.T) {
	systems := []*system{{name: "a"}, {name: "b"}, {name: "c", floor: true}}
	first := func(round int) string { return plan([]string{wA}, systems, round)[0].system }
	if got := []string{first(0), first(1), first(2), first(3)}; strings.Join(got, "") != "abca" {
		t.Errorf("round starts %v, want a b c a", got)
	}
	for _, c := range plan([]string{wC}, systems, 0) {
		if c.system == "c" {
			t.Error("C planned on a floor")
		}
	}
}

func TestPick(t *testing.T) {
	got, err := pick("C,A", allWorkloads)
	if err != nil || strings.Join(got, ",") != "A,C" {
		t.Errorf("pick C,A = %v, %v; want A,C in the known order", got, err)
	}
	if _, err := pick("A,Z", allWorkloads); err == nil {
		t.Error("pick of an unknown name: no error")
	}
}
