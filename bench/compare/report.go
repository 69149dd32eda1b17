package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"image/color"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// machine describes where the run happened.
type machine struct {
	CPU        string        `json:"cpu"`
	Cores      int           `json:"cores"`
	Kernel     string        `json:"kernel"`
	Go         string        `json:"go"`
	loadBefore string        // load average as the runs began
	loadAfter  string        // and as they ended
	took       time.Duration // the runs' wall time
}

func readMachine() machine {
	m := machine{CPU: "unknown", Cores: runtime.NumCPU(), Kernel: "unknown", Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

// loadAverage returns the 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// summary is one cell's figures over its rounds: each is the median of the
// rounds' own figures (a round of a busy machine then moves none of them),
// but overtakes and grants, which are summed.
type summary struct {
	Rounds     int     `json:"rounds"`
	Rate       float64 `json:"cycles_per_second"`
	P50Micros  float64 `json:"p50_us,omitempty"` // A: cycle; C: handover
	P99Micros  float64 `json:"p99_us,omitempty"`
	Jain       float64 `json:"jain,omitempty"`           // C
	Overtakes  int     `json:"fifo_overtakes,omitempty"` // C: all rounds
	Far        int     `json:"fifo_overtakes_over_1ms,omitempty"`
	Grants     int     `json:"grants,omitempty"`      // C: all rounds
	HoldMicros float64 `json:"hold_p50_us,omitempty"` // C
	Error      string  `json:"error,omitempty"`
}

func summarize(c cell, runs []runResult) summary {
	s := summary{Rounds: len(runs)}
	var rates, p50s, p99s, jains, holds []float64
	for _, r := range runs {
		rates = append(rates, r.rate())
		if len(r.latencies) > 0 {
			p50s = append(p50s, micros(percentile(r.latencies, 50)))
			p99s = append(p99s, micros(percentile(r.latencies, 99)))
		}
		if len(r.holds) > 0 {
			holds = append(holds, micros(percentile(r.holds, 50)))
		}
		if c.workload == wC {
			jains = append(jains, jain(r.perClient))
			s.Overtakes += r.overtakes
			s.Far += r.farOvertakes
			s.Grants += r.cycles
		}
	}
	s.Rate = median(rates)
	s.P50Micros = median(p50s)
	s.P99Micros = median(p99s)
	s.Jain = median(jains)
	s.HoldMicros = median(holds)
	return s
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// report is everything the README, the chart and results.json show.
type report struct {
	cfg      config
	m        machine
	versions map[string]string
	skipped  map[string]string
	systems  []*system
	sums     map[cell]summary
	// failovers are workload F's figures, by cluster system.
	failovers map[string]failoverResult
}

func newReport(cfg config, m machine, srv *servers, systems []*system, results map[cell][]runResult, failed map[cell]error) *report {
	r := &report{cfg: cfg, m: m, versions: srv.versions, skipped: srv.skipped, systems: systems, sums: make(map[cell]summary)}
	for c, runs := range results {
		r.sums[c] = summarize(c, runs)
	}
	for c, err := range failed {
		s := r.sums[c]
		s.Error = err.Error()
		r.sums[c] = s
	}
	return r
}

// has reports whether the system named is one of the report's.
func (r *report) has(name string) bool {
	return slices.ContainsFunc(r.systems, func(s *system) bool { return s.name == name })
}

// get returns a cell's summary and whether it was measured without error.
func (r *report) get(workload string, lockers int, system string) (summary, bool) {
	s, ok := r.sums[cell{workload, lockers, system}]
	return s, ok && s.Error == "" && s.Rounds > 0
}

// write writes README.md, chart.png and results.json into dir.
func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report folder: %w", err)
	}
	if err := r.chart(filepath.Join(dir, "chart.png")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(r.markdown("chart.png")), 0o644); err != nil {
		return fmt.Errorf("write README: %w", err)
	}
	type jsonCell struct {
		Workload string `json:"workload"`
		Lockers  int    `json:"lockers"`
		System   string `json:"system"`
		summary
	}
	var cells []jsonCell
	for c, s := range r.sums {
		cells = append(cells, jsonCell{c.workload, c.lockers, c.system, s})
	}
	slices.SortFunc(cells, func(a, b jsonCell) int {
		return strings.Compare(fmt.Sprintf("%s%03d%s", a.Workload, a.Lockers, a.System), fmt.Sprintf("%s%03d%s", b.Workload, b.Lockers, b.System))
	})
	type jsonFailover struct {
		System string `json:"system"`
		failoverFigures
		failoverResult
	}
	var fos []jsonFailover
	for _, name := range slices.Sorted(maps.Keys(r.failovers)) {
		f := r.failovers[name]
		fos = append(fos, jsonFailover{name, f.figures(), f})
	}
	b, err := json.MarshalIndent(map[string]any{"machine": r.m, "versions": r.versions, "cells": cells, "failovers": fos}, "", "  ")
	if err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results.json: %w", err)
	}
	return nil
}

// thousands formats a rate as a whole number with thin digit groups.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString(",")
		}
		b.WriteRune(ch)
	}
	return b.String()
}

func (r *report) rateCell(w string, n int, sys string) string {
	s, ok := r.get(w, n, sys)
	if !ok {
		return r.missing(w, n, sys)
	}
	return thousands(s.Rate)
}

func (r *report) missing(w string, n int, sys string) string {
	if s, ok := r.sums[cell{w, n, sys}]; ok && s.Error != "" {
		return "failed"
	}
	return "–"
}

// headline is one ratio of the README's headline list.
type headline struct {
	what   string
	ratio  float64
	target string
	met    bool
	ok     bool // both sides were measured
}

func (r *report) headlines() []headline {
	var hs []headline
	ratio := func(what, target string, a, b float64, okA, okB bool, met func(float64) bool) {
		h := headline{what: what, target: target, ok: okA && okB && b != 0}
		if h.ok {
			h.ratio = a / b
			h.met = met(h.ratio)
		}
		hs = append(hs, h)
	}
	sa, okSA := r.get(wA, 1, "lc-session")
	fa, okFA := r.get(wA, 1, "floor-persistent")
	ratio("session A p50 ÷ persistent floor A p50", "≤ 1.05", sa.P50Micros, fa.P50Micros, okSA, okFA, func(x float64) bool { return x <= 1.05 })
	ss, okSS := r.get(wA, 1, "floor-session")
	ratio("session A p50 ÷ session-protocol floor A p50 (for insight: the same driver, no lock table)", "–", sa.P50Micros, ss.P50Micros, okSA, okSS, func(float64) bool { return true })
	sb, okSB := r.get(wB, nB, "lc-session")
	fb, okFB := r.get(wB, nB, "floor-persistent")
	ratio("session B ÷ persistent floor B (cycles/s)", "≥ 0.9", sb.Rate, fb.Rate, okSB, okFB, func(x float64) bool { return x >= 0.9 })
	sc, okSC := r.get(wC, nC, "lc-session")
	pc, okPC := r.get(wC, nC, "postgres")
	ratio("session C ÷ PostgreSQL C (acquisitions/s)", "≥ 1.2", sc.Rate, pc.Rate, okSC, okPC, func(x float64) bool { return x >= 1.2 })
	ratio("session C handover p99 ÷ PostgreSQL's", "≤ 0.6", sc.P99Micros, pc.P99Micros, okSC, okPC, func(x float64) bool { return x <= 0.6 })
	sm, okSM := r.get(wM, nB, "lc-session")
	ratio("M (one shared session) ÷ session B (32 sessions)", "≥ 1", sm.Rate, sb.Rate, okSM, okSB, func(x float64) bool { return x >= 1 })
	dw, okDW := r.get(wD, 64, "lc-session-wal")
	dm, okDM := r.get(wD, 64, "lc-session")
	ratio("D 64 lockers: session with DATA_PATH ÷ session in memory", "≥ 0.8", dw.Rate, dm.Rate, okDW, okDM, func(x float64) bool { return x >= 0.8 })
	tb, okTB := r.get(wB, nB, "lc-session-tls")
	ratio("session over TLS ÷ session (B cycles/s)", "–", tb.Rate, sb.Rate, okTB, okSB, func(float64) bool { return true })
	ta, okTA := r.get(wA, 1, "lc-v1-tls")
	va, okVA := r.get(wA, 1, "lc-v1")
	ratio("v1 over TLS ÷ v1 (A p50)", "–", ta.P50Micros, va.P50Micros, okTA, okVA, func(float64) bool { return true })
	return hs
}

// markdown renders the README; chart names the chart's file ("" for none).
func (r *report) markdown(chart string) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("# bench-compare: Locking-Center beside Redis, etcd and PostgreSQL\n\n")
	p("One run of `bench-compare` on one machine: every system on 127.0.0.1, the same workloads on each, ")
	p("in %d rounds that take the systems in turn, so that the machine's drift falls on all of them. ", r.cfg.rounds)
	p("The floors are bare exchanges with a tiny Go server that locks nothing: one byte per connection, one byte on a persistent connection, and the session protocol's frames answered at once. ")
	p("No lock server can answer faster than they do.\n\n")
	if chart != "" {
		p("![bench-compare chart](%s)\n\n", chart)
	}

	p("## Headline ratios\n\n")
	p("| ratio | measured | target |\n| --- | ---: | --- |\n")
	for _, h := range r.headlines() {
		if !h.ok {
			p("| %s | not measured | %s |\n", h.what, h.target)
			continue
		}
		verdict := " (met)"
		if !h.met {
			verdict = " (missed)"
		}
		if h.target == "–" {
			verdict = ""
		}
		p("| %s | %s× | %s%s |\n", h.what, sig3(h.ratio), h.target, verdict)
	}
	if s, ok := r.get(wC, nC, "lc-session"); ok {
		p("\nSession C fairness: Jain's index %.4f, %d FIFO overtakes (%d of a waiter that started more than %v earlier) in %s acquisitions.\n", s.Jain, s.Overtakes, s.Far, overtakeMargin, thousands(float64(s.Grants)))
	}

	p("\n## A, B: lock cycles on fresh keys\n\n")
	p("A: one client, Lock then Unlock of a new key, again and again; the latency of the whole cycle. ")
	p("B: %d clients at once, each on keys of its own; cycles per second. ", nB)
	p("A floor's cycle is two exchanges, as a Lock and an Unlock are two requests. ")
	p("`floor-session` sends the session protocol's frames through the same driver as `lc-session` to a server that answers `+` at once: the gap between the two is the lock server's.\n\n")
	if r.has("lc-v1-tls") || r.has("lc-session-tls") {
		p("`lc-v1-tls` and `lc-session-tls` are the in-memory server started with `TLS_CERT` and `TLS_KEY` (an ECDSA P-256 certificate for 127.0.0.1, signed by a CA the benchmark makes at its start) and the same two drivers inside crypto/tls, Go's defaults on both sides but for the clients trusting that CA alone. ")
		p("v1 connects for every request and so shakes hands for every request, as a v1 client over TLS must; the clients share one `tls.ClientSessionCache`, as one program's clients would, so a handshake after the first resumes the TLS session of a ticket the server sent (TLS 1.3: a fresh key exchange still, Go's default X25519MLKEM768, but no certificate sent, signed or checked). ")
		p("The session shakes hands once, when its client connects, which is not timed. They run in A, B, C and D, not in M.\n\n")
	}
	p("| system | A p50 µs | A p99 µs | B cycles/s |\n| --- | ---: | ---: | ---: |\n")
	for _, s := range r.systems {
		a, okA := r.get(wA, 1, s.name)
		p50, p99 := r.missing(wA, 1, s.name), r.missing(wA, 1, s.name)
		if okA {
			p50, p99 = fmt.Sprintf("%.0f", a.P50Micros), fmt.Sprintf("%.0f", a.P99Micros)
		}
		p("| %s | %s | %s | %s |\n", s.name, p50, p99, r.rateCell(wB, nB, s.name))
	}

	p("\n## C: %d clients on one key\n\n", nC)
	p("Each client locks the key, holds it for %v (nanosleep(2) with 1 ns timer slack, then a busy wait that yields for its last 20 µs: a Go timer's sleep lasts a millisecond here; the median hold really taken is shown), releases it, and locks again at once. ", r.cfg.hold)
	p("Handover: from the holder starting to send its release to the next holder's grant arriving. ")
	p("Jain's fairness index over the clients' acquisition counts (1 = equal shares). ")
	p("FIFO overtakes: grants to a client while a client that started waiting before it still waited, counted once per waiter passed, over all rounds. ")
	p("A client starts waiting when its request is sent (v1: once connected); a request that the server reads late, behind one sent after it (the machine's scheduling between the send and the server's read), counts as an overtake too; the column \"> %v\" counts only the overtakes of a waiter that started waiting more than %v earlier, which only a delay of more than that between a send and the server's read could explain.\n\n", overtakeMargin, overtakeMargin)
	p("| system | acquisitions/s | handover p50 µs | handover p99 µs | Jain | FIFO overtakes | > %v | acquisitions | hold p50 µs |\n", overtakeMargin)
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.systems {
		if s.floor {
			continue
		}
		c, ok := r.get(wC, nC, s.name)
		if !ok {
			m := r.missing(wC, nC, s.name)
			p("| %s | %s | | | | | | | |\n", s.name, m)
			continue
		}
		p("| %s | %s | %.0f | %.0f | %.4f | %d | %d | %s | %.0f |\n", s.name, thousands(c.Rate), c.P50Micros, c.P99Micros, c.Jain, c.Overtakes, c.Far, thousands(float64(c.Grants)), c.HoldMicros)
	}

	p("\n## D: durable, 1, 16 and 64 lockers on their own keys\n\n")
	p("Acquisitions (Lock+Unlock cycles) per second. Locking-Center with `DATA_PATH` fsyncs every grant and every release before answering; ")
	p("etcd commits every write to its raft log on disk. PostgreSQL is here because its advisory locks are the lock people reach for in it, ")
	p("but they live in its shared memory and are not written to its WAL: they do not survive a restart. ")
	p("The in-memory session (and, when measured, the in-memory session over TLS) is the reference for the durable one.\n\n")
	p("| system | 1 | 16 | 64 |\n| --- | ---: | ---: | ---: |\n")
	for _, s := range r.systems {
		if !inD(s) {
			continue
		}
		p("| %s |", s.name)
		for _, n := range dLockers {
			p(" %s |", r.rateCell(wD, n, s.name))
		}
		p("\n")
	}

	p("\n## M: %d lockers sharing one connection\n\n", nB)
	p("B's %d clients as goroutines of one program sharing ONE Locking-Center session: one TCP connection, requests written together, answers matched by id. ", nB)
	p("etcd's client can do the same (gRPC carries many calls on one connection), so it is here too: one client and one session (lease) shared by the %d lockers' Mutexes. ", nB)
	p("PostgreSQL cannot: a waiting `pg_advisory_lock` blocks the connection it runs on, so each waiting locker needs a connection of its own; ")
	p("Redis has no waiting on the server at all (SET NX fails and the client sleeps and polls).\n\n")
	p("`floor-session` is the driver on one connection to a server that locks nothing.\n\n")
	p("| system | M: one connection, cycles/s | B: %d connections, cycles/s | M ÷ B |\n| --- | ---: | ---: | ---: |\n", nB)
	for _, s := range r.systems {
		if !s.shared {
			continue
		}
		mm, okM := r.get(wM, nB, s.name)
		bb, okB := r.get(wB, nB, s.name)
		ratio := "–"
		if okM && okB && bb.Rate > 0 {
			ratio = fmt.Sprintf("%.2f×", mm.Rate/bb.Rate)
		}
		p("| %s | %s | %s | %s |\n", s.name, r.rateCell(wM, nB, s.name), r.rateCell(wB, nB, s.name), ratio)
	}

	r.clusterSection(p)

	p("\n## Systems\n\n")
	for _, s := range r.systems {
		p("- **%s**: %s.\n", s.name, s.what)
	}
	for _, n := range systemNames {
		if why, ok := r.skipped[n]; ok {
			p("- **%s**: not measured: %s.\n", n, why)
		}
	}
	var failed []string
	for c, s := range r.sums {
		if s.Error != "" {
			failed = append(failed, fmt.Sprintf("- %s (%d lockers) on %s failed: %s", c.workload, c.lockers, c.system, s.Error))
		}
	}
	slices.Sort(failed)
	if len(failed) > 0 {
		p("\nFailed measurements:\n\n%s\n", strings.Join(failed, "\n"))
	}

	p("\n## How it was run\n\n")
	p("```\nmake bench-compare\n# which runs, in bench/compare:\ngo run .%s\n```\n\n", argString(r.cfg.args))
	p("- Every run: clients connected first (not timed), %v of warm-up not counted, then %v counted; %d rounds. ", r.cfg.timing.warmup, r.cfg.timing.duration, r.cfg.rounds)
	p("Each round runs every workload on every system once, starting one system further along each round. ")
	p("Every figure is the median of the rounds' own figures (a percentile is taken within each round), except overtakes and acquisitions, which are summed.\n")
	p("- Locking-Center is driven by bench-compare's own v1 and session drivers, written from `docs/protocol.md` (bench/compare/README.md says how they read and write); the peers by go-redis, etcd's clientv3 and pgx.\n")
	p("- The benchmark's clients run in one Go process (GOMAXPROCS %d) on the same machine as the servers, and share its cores with them.\n", runtime.GOMAXPROCS(0))
	p("- Every server is a process of its own, started on free 127.0.0.1 ports with its data in a temporary folder, and stopped by PID at the end. ")
	p("Locking-Center is built from this repository with `go build .` and runs with `WEB_ADDRESS=off`; Redis with `--save '' --appendonly no`; ")
	p("etcd as a single member with its data directory in the temporary folder; PostgreSQL initialised there with `initdb`, run as the user `postgres`, fsync settings at their defaults.\n")
	p("- Redis retries a taken key after a random sleep of 0 to %v, redsync's way (redsync's own default sleeps 50 to 250 ms, which would make its C figures far lower).\n", r.cfg.redisRetry)
	p("- The machine is shared with other work: load average %s as the runs began, %s as they ended; the runs took %v. Figures from a busy machine are noisy; ratios from one run (the systems taking turns) are steadier than absolute figures.\n",
		r.m.loadBefore, r.m.loadAfter, r.m.took.Round(time.Second))

	p("\n## Machine\n\n")
	p("| | |\n| --- | --- |\n")
	p("| CPU | %s |\n| cores | %d |\n| kernel | %s |\n| Go | %s |\n", r.m.CPU, r.m.Cores, r.m.Kernel, r.m.Go)
	for _, k := range []string{"locking-center", "redis", "etcd", "postgres"} {
		if v, ok := r.versions[k]; ok {
			p("| %s | %s |\n", k, v)
		}
	}
	return b.String()
}

// sig3 formats x with three significant figures, trailing zeros kept
// (2.00, 0.897, 12.3), so that a ratio just under a target does not read as
// on it.
func sig3(x float64) string {
	if x <= 0 {
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	decimals := max(0, 2-int(math.Floor(math.Log10(x))))
	return strconv.FormatFloat(x, 'f', decimals, 64)
}

// argString quotes the command line's arguments for a shell.
func argString(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " '\"$\\*?") {
			b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// Colours of the chart's families of systems.
var (
	colFloor   = color.RGBA{150, 150, 150, 255}
	colV1      = color.RGBA{120, 170, 220, 255}
	colSession = color.RGBA{20, 80, 160, 255}
	colV1TLS   = color.RGBA{110, 195, 190, 255}
	colSessTLS = color.RGBA{20, 125, 120, 255}
	colRedis   = color.RGBA{200, 60, 50, 255}
	colEtcd    = color.RGBA{60, 150, 80, 255}
	colPg      = color.RGBA{130, 80, 160, 255}
	// The clusters of three.
	colLCCluster = color.RGBA{230, 130, 20, 255}
	colEtcdClu   = color.RGBA{25, 95, 45, 255}
)

func colourOf(name string) color.Color {
	switch {
	case strings.HasPrefix(name, "floor"):
		return colFloor
	case name == "lc-session-tls":
		return colSessTLS
	case name == "lc-v1-tls":
		return colV1TLS
	case strings.HasPrefix(name, "lc-session"):
		return colSession
	case strings.HasPrefix(name, "lc-v1"):
		return colV1
	case name == "lc-cluster":
		return colLCCluster
	case name == "etcd-cluster":
		return colEtcdClu
	case name == "redis":
		return colRedis
	case name == "etcd":
		return colEtcd
	}
	return colPg
}

// bar is one bar of a panel.
type bar struct {
	label  string
	value  float64
	colour color.Color
}

// panel draws horizontal bars, one per system, first at the top. With cut
// (the latency panels), a bar far longer than the rest (more than 4× their
// median) is cut at the axis's end and its label keeps its value, so that
// one slow system does not flatten the others into slivers.
func panel(title, unit string, bars []bar, cut bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = unit
	p.X.Min = 0
	p.X.Tick.Marker = compactTicks{}
	if len(bars) == 0 {
		p.Title.Text += " (not measured)"
		p.HideAxes()
		return p, nil
	}
	var values []float64
	for _, b := range bars {
		values = append(values, b.value)
	}
	limit := 0.0
	within := 4 * median(slices.Clone(values))
	for _, v := range values {
		if !cut || v <= within || within == 0 {
			limit = max(limit, v)
		}
	}
	limit *= 1.25 // room for the value labels
	var names []string
	var xys plotter.XYs
	var labels []string
	for i, b := range bars {
		y := float64(len(bars) - 1 - i)
		v, label := b.value, " "+compact(b.value)
		if v > limit {
			v, label = limit, " "+compact(b.value)+" (cut)"
		}
		bc, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(11))
		if err != nil {
			return nil, fmt.Errorf("chart %q: %w", title, err)
		}
		bc.Horizontal = true
		bc.XMin = y
		bc.Color = b.colour
		bc.LineStyle.Width = 0
		p.Add(bc)
		xys = append(xys, plotter.XY{X: v, Y: y})
		labels = append(labels, label)
	}
	for i := range bars {
		names = append(names, bars[len(bars)-1-i].label)
	}
	p.NominalY(names...)
	p.Y.Min, p.Y.Max = -0.7, float64(len(bars))-0.3
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("chart %q: %w", title, err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].YAlign = draw.YCenter
		l.TextStyle[i].Font.Size = vg.Points(9)
	}
	p.Add(l)
	p.X.Max = limit * 1.2
	return p, nil
}

// compactTicks are gonum's default ticks labelled 20k, 40k rather than
// 20000.00.
type compactTicks struct{}

func (compactTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label == "" {
			continue
		}
		if v := ts[i].Value; v >= 1000 {
			ts[i].Label = strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
		} else {
			ts[i].Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return ts
}

// compact formats a figure for a bar's label: 45.1k, 812.
func compact(x float64) string {
	switch {
	case x >= 10_000:
		return fmt.Sprintf("%.1fk", x/1000)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.1f", x)
}

// chart draws six panels into a PNG: A, B, C (two), D with 64 lockers, M.
func (r *report) chart(path string) error {
	var a, bb, c, ch, d, m []bar
	for _, s := range r.systems {
		col := colourOf(s.name)
		if x, ok := r.get(wA, 1, s.name); ok {
			a = append(a, bar{s.name, x.P50Micros, col})
		}
		if x, ok := r.get(wB, nB, s.name); ok {
			bb = append(bb, bar{s.name, x.Rate, col})
		}
		if x, ok := r.get(wC, nC, s.name); ok {
			c = append(c, bar{s.name, x.Rate, col})
			ch = append(ch, bar{s.name, x.P99Micros, col})
		}
		if x, ok := r.get(wD, 64, s.name); ok {
			d = append(d, bar{s.name, x.Rate, col})
		}
		if s.shared {
			if x, ok := r.get(wB, nB, s.name); ok {
				m = append(m, bar{s.name + " B: 32 conns", x.Rate, colFloor})
			}
			if x, ok := r.get(wM, nB, s.name); ok {
				m = append(m, bar{s.name + " M: 1 conn", x.Rate, col})
			}
		}
	}
	specs := []struct {
		title, unit string
		bars        []bar
		cut         bool
	}{
		{"A: Lock+Unlock p50, 1 client (lower is better)", "µs", a, true},
		{fmt.Sprintf("B: %d clients, own keys", nB), "cycles/s", bb, false},
		{fmt.Sprintf("C: %d clients, one key, hold %v", nC, r.cfg.hold), "acquisitions/s", c, false},
		{"C: handover p99 (lower is better)", "µs", ch, true},
		{"D: 64 lockers, durable (in-memory sessions for reference)", "acquisitions/s", d, false},
		{fmt.Sprintf("M: %d lockers on one connection vs B's %d", nB, nB), "cycles/s", m, false},
	}
	rows := 2
	if len(r.failovers) > 0 {
		var kp, km, ho []bar
		for _, s := range r.systems {
			f, ok := r.failovers[s.name]
			if !ok {
				continue
			}
			fig := f.figures()
			col := colourOf(s.name)
			if fig.Kills > 0 {
				kp = append(kp, bar{s.name + " p50", fig.KillP50ms, col})
				km = append(km, bar{s.name + " max", fig.KillMaxms, col})
			}
			if fig.Handovers > 0 {
				ho = append(ho, bar{s.name + " p50", fig.HandoverP50ms, col}, bar{s.name + " max", fig.HandoverMaxms, col})
			}
		}
		specs = append(specs,
			struct {
				title, unit string
				bars        []bar
				cut         bool
			}{"F: kill -9 of the leader → first grant, p50 (3 nodes)", "ms", kp, false},
			struct {
				title, unit string
				bars        []bar
				cut         bool
			}{"F: kill -9 of the leader → first grant, max", "ms", km, false},
			struct {
				title, unit string
				bars        []bar
				cut         bool
			}{"F: planned hand-over, longest gap between grants", "ms", ho, false})
		rows = 3
	}
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, 3)
	}
	for i, s := range specs {
		p, err := panel(s.title, s.unit, s.bars, s.cut)
		if err != nil {
			return err
		}
		plots[i/3][i%3] = p
	}
	img := vgimg.NewWith(vgimg.UseWH(vg.Points(1500), vg.Points(380*float64(rows))), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: 3, PadX: vg.Points(24), PadY: vg.Points(24), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("chart: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart: close %s: %w", path, err)
	}
	return nil
}

// failoverFigures summarise one cluster's workload F.
type failoverFigures struct {
	Kills         int     `json:"kills"`
	KillP50ms     float64 `json:"kill_to_first_grant_p50_ms,omitempty"`
	KillMaxms     float64 `json:"kill_to_first_grant_max_ms,omitempty"`
	Handovers     int     `json:"handovers"`
	HandoverP50ms float64 `json:"handover_longest_gap_p50_ms,omitempty"`
	HandoverMaxms float64 `json:"handover_longest_gap_max_ms,omitempty"`
}

func (f failoverResult) figures() failoverFigures {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fig := failoverFigures{Kills: len(f.Kills), Handovers: len(f.Handovers)}
	if len(f.Kills) > 0 {
		k := slices.Clone(f.Kills)
		fig.KillP50ms, fig.KillMaxms = ms(percentile(k, 50)), ms(slices.Max(k))
	}
	if len(f.Handovers) > 0 {
		h := slices.Clone(f.Handovers)
		fig.HandoverP50ms, fig.HandoverMaxms = ms(percentile(h, 50)), ms(slices.Max(h))
	}
	return fig
}

// clusterSection writes the clusters' table, beside the single servers'
// figures, and their targets.
func (r *report) clusterSection(p func(string, ...any)) {
	if !r.has("lc-cluster") && !r.has("etcd-cluster") {
		return
	}
	p("\n## Clusters of three\n\n")
	p("`lc-cluster` is three Locking-Center nodes (SPEC §8: hashicorp/raft, `RAFT_DIR` on disk, the default `RAFT_HEARTBEAT_TIMEOUT` of 500 ms), ")
	p("its clients' sessions spread over the three lock ports as a load balancer would spread them (a follower forwards each connection to the leader); ")
	p("`etcd-cluster` is three etcd members (its defaults: 100 ms heartbeat, 1 s election), `concurrency.Mutex` through clientv3 with the three endpoints. ")
	p("All six processes run on this one machine, on loopback: a commit is a round trip between processes and an fsync on each of two of them, sharing the same cores and disk. ")
	p("The single servers are beside them for what the replication costs.\n\n")
	p("F: the leader is killed with SIGKILL %d times; from the kill, a v1 TryLock (etcd: a Mutex Lock on a session made before the kill) of a fresh key is sent every 20 ms through each of the two other nodes, the attempts overlapping, ", r.cfg.failovers)
	p("and the time to the first grant is taken; the killed node is started again on its data, and the next kill waits until the three agree on a ready leader. ")
	p("Hand-over: four lockers grant and release fresh keys through the two followers while leadership is handed to another node the planned way ")
	p("(Locking-Center: `POST /api/v1/cluster/transfer` to the leader, SPEC §8.7; etcd: `MoveLeader`); ")
	p("the figure is the longest gap between two grants from %v before the request to %v after its answer.\n\n", handoverWindow, handoverWindow)
	p("| system | A p50 µs | B cycles/s | D 1 | D 16 | D 64 | M cycles/s | kill -9 → first grant p50 | max | kills | hand-over gap p50 | max |\n")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, name := range []string{"lc-cluster", "etcd-cluster", "lc-session-wal", "lc-session", "etcd"} {
		if !r.has(name) {
			continue
		}
		a := r.missing(wA, 1, name)
		if s, ok := r.get(wA, 1, name); ok {
			a = fmt.Sprintf("%.0f", s.P50Micros)
		}
		label := name
		if !strings.HasSuffix(name, "-cluster") {
			label = name + " (one server)"
		}
		p("| %s | %s | %s | %s | %s | %s | %s |", label, a, r.rateCell(wB, nB, name), r.rateCell(wD, 1, name), r.rateCell(wD, 16, name), r.rateCell(wD, 64, name), r.rateCell(wM, nB, name))
		f, ok := r.failovers[name]
		if !ok {
			p(" – | – | – | – | – |\n")
			continue
		}
		fig := f.figures()
		kp, km, hp, hm := "–", "–", "–", "–"
		if fig.Kills > 0 {
			kp, km = fmt.Sprintf("%.0f ms", fig.KillP50ms), fmt.Sprintf("%.0f ms", fig.KillMaxms)
		}
		if fig.Handovers > 0 {
			hp, hm = fmt.Sprintf("%.0f ms", fig.HandoverP50ms), fmt.Sprintf("%.0f ms", fig.HandoverMaxms)
		} else if f.HandoverErr != "" {
			hp = "not measured"
		}
		p(" %s | %s | %d | %s | %s |\n", kp, km, fig.Kills, hp, hm)
	}
	for _, name := range slices.Sorted(maps.Keys(r.failovers)) {
		f := r.failovers[name]
		if f.HandoverErr != "" {
			p("\n%s: the hand-over was not measured: %s.\n", name, f.HandoverErr)
		}
		for _, e := range f.KillErrors {
			p("\n%s: a kill failed: %s.\n", name, e)
		}
	}

	p("\n| target | measured | |\n| --- | --- | --- |\n")
	verdict := func(ok, met bool) string {
		switch {
		case !ok:
			return "not measured"
		case met:
			return "met"
		}
		return "missed"
	}
	lf, okL := r.failovers["lc-cluster"]
	ef, okE := r.failovers["etcd-cluster"]
	lfig, efig := lf.figures(), ef.figures()
	okKill := okL && okE && lfig.Kills > 0 && efig.Kills > 0
	p("| kill -9 of the leader → first grant, p50: Locking-Center no slower than etcd | %.0f ms against %.0f ms | %s |\n",
		lfig.KillP50ms, efig.KillP50ms, verdict(okKill, lfig.KillP50ms <= efig.KillP50ms))
	p("| kill -9 of the leader → first grant, max ≤ 3 s | %.0f ms (%d kills) | %s |\n",
		lfig.KillMaxms, lfig.Kills, verdict(okL && lfig.Kills > 0, lfig.KillMaxms <= 3000))
	if okL && lfig.Handovers == 0 && lf.HandoverErr != "" {
		p("| planned hand-over: no gap between grants over 100 ms | not measured: %s | pending |\n", lf.HandoverErr)
	} else {
		p("| planned hand-over: no gap between grants over 100 ms | longest %.0f ms (%d hand-overs; etcd's MoveLeader: %.0f ms) | %s |\n",
			lfig.HandoverMaxms, lfig.Handovers, efig.HandoverMaxms, verdict(okL && lfig.Handovers > 0, lfig.HandoverMaxms <= 100))
	}
	ratio := func(what, target string, w string, n int, lower bool, want float64) {
		l, okl := r.get(w, n, "lc-cluster")
		e, oke := r.get(w, n, "etcd-cluster")
		if !okl || !oke {
			p("| %s %s | not measured | not measured |\n", what, target)
			return
		}
		a, b := l.Rate, e.Rate
		if lower {
			a, b = l.P50Micros, e.P50Micros
		}
		x := a / b
		met := x >= want
		if lower {
			met = x <= want
		}
		p("| %s %s | %s× | %s |\n", what, target, sig3(x), verdict(true, met))
	}
	ratio("B cycles/s, lc-cluster ÷ etcd-cluster", "≥ 5×", wB, nB, false, 5)
	ratio("D 64 lockers, lc-cluster ÷ etcd-cluster", "≥ 5×", wD, 64, false, 5)
	ratio("A p50, lc-cluster ÷ etcd-cluster", "≤ 0.5×", wA, 1, true, 0.5)
}
