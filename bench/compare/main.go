// Command compare is bench-compare: Locking-Center side by side with Redis,
// etcd, PostgreSQL and two floors (a bare TCP exchange), on the same
// workloads, in one run on one machine.
//
// It installs what is missing (install.sh, Debian's packages), builds the
// server from the repository, starts every system on free 127.0.0.1 ports
// with its data in a temporary folder, runs the workloads in rounds that take
// the systems in turn (so that the machine's drift falls on all of them),
// stops every process it started by PID — also when a run fails or the
// benchmark is interrupted — and writes a README with tables and a chart.
//
//	cd bench/compare && go run . -out ../../docs/bench
//	go run . -duration 300ms -rounds 1 -systems lc-session,postgres -workloads A,C
//
// It lives in a Go module of its own so that the peers' client libraries never
// enter the server's go.mod.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the command line.
type config struct {
	out        string
	repo       string
	timing     timing
	rounds     int
	systems    []string
	workloads  []string
	hold       time.Duration
	redisRetry time.Duration
	install    bool
	keepTmp    bool
	cpuProfile string
	failovers  int      // workload F: kills of the leader (and hand-overs) per cluster
	args       []string // as given, for the README
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo" {
		if err := echoMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
}

// allWorkloads in the order a round runs them: M right after B, so that the
// two, whose ratio the report gives, are measured close together in time.
// F, the clusters' failovers, runs once after the rounds: it kills nodes.
var allWorkloads = []string{wA, wB, wM, wC, wD, wF}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench-compare", flag.ContinueOnError)
	cfg := config{args: args}
	fs.StringVar(&cfg.out, "out", "", "folder to write README.md, chart.png and results.json into (none: print only)")
	fs.StringVar(&cfg.repo, "repo", "../..", "the Locking-Center repository root, built with go build .")
	fs.DurationVar(&cfg.timing.duration, "duration", 1500*time.Millisecond, "counted time of each run")
	fs.DurationVar(&cfg.timing.warmup, "warmup", 200*time.Millisecond, "uncounted warm-up before each run")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds; each round runs every workload on every system once, systems in turn")
	systems := fs.String("systems", "all", "comma-separated systems to run: "+strings.Join(systemNames, ","))
	workloads := fs.String("workloads", "all", "comma-separated workloads to run: A,B,C,D,M,F")
	fs.DurationVar(&cfg.hold, "hold", 100*time.Microsecond, "how long workload C's holders keep the key")
	fs.DurationVar(&cfg.redisRetry, "redis-retry", time.Millisecond, "Redis: a taken key is tried again after a random sleep of 0 to this")
	fs.BoolVar(&cfg.install, "install", true, "run install.sh first (apt-get what is missing)")
	fs.BoolVar(&cfg.keepTmp, "keep-tmp", false, "keep the temporary folder (data and server logs)")
	fs.IntVar(&cfg.failovers, "failovers", 20, "workload F: kill -9 of the leader, and planned hand-overs, this many times on each cluster")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of this program (the clients, not the servers) over the runs to this file")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	var err error
	if cfg.systems, err = pick(*systems, systemNames); err != nil {
		return cfg, fmt.Errorf("-systems: %w", err)
	}
	if cfg.workloads, err = pick(strings.ToUpper(*workloads), allWorkloads); err != nil {
		return cfg, fmt.Errorf("-workloads: %w", err)
	}
	if cfg.rounds < 1 || cfg.timing.duration <= 0 || cfg.timing.warmup < 0 {
		return cfg, errors.New("-rounds must be ≥ 1, -duration > 0, -warmup ≥ 0")
	}
	return cfg, nil
}

// pick parses a comma-separated list of names from known ("all" for every
// one), in known's order.
func pick(list string, known []string) ([]string, error) {
	if strings.EqualFold(list, "all") {
		return known, nil
	}
	want := make(map[string]bool)
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("unknown name %q (known: %s)", n, strings.Join(known, ","))
		}
		want[n] = true
	}
	var out []string
	for _, n := range known {
		if want[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// cell is one measured figure's place: a workload (with its locker count)
// on a system.
type cell struct {
	workload string
	lockers  int
	system   string
}

// inD reports whether workload D runs on s: the durable systems, PostgreSQL
// (its advisory locks are its usual lock), and the in-memory session, plain
// and over TLS, as the reference.
func inD(s *system) bool {
	return s.durable || s.name == "postgres" || s.name == "lc-session" || s.name == "lc-session-tls"
}

// plan lists the cells of one round in order: every workload, and within it
// every system it applies to, starting from a system that moves on by one
// each round.
func plan(workloads []string, systems []*system, round int) []cell {
	var cells []cell
	rotated := func(keep func(*system) bool) []*system {
		var s []*system
		for _, sys := range systems {
			if keep(sys) {
				s = append(s, sys)
			}
		}
		if len(s) > 0 {
			k := round % len(s)
			s = append(s[k:], s[:k]...)
		}
		return s
	}
	for _, w := range workloads {
		switch w {
		case wA, wB:
			n := 1
			if w == wB {
				n = nB
			}
			for _, s := range rotated(func(*system) bool { return true }) {
				cells = append(cells, cell{w, n, s.name})
			}
		case wC:
			for _, s := range rotated(func(s *system) bool { return !s.floor && !s.cluster }) {
				cells = append(cells, cell{w, nC, s.name})
			}
		case wD:
			for _, n := range dLockers {
				for _, s := range rotated(inD) {
					cells = append(cells, cell{w, n, s.name})
				}
			}
		case wM:
			for _, s := range rotated(func(s *system) bool { return s.shared }) {
				cells = append(cells, cell{w, nB, s.name})
			}
		}
	}
	return cells
}

func run(cfg config) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	repo, err := filepath.Abs(cfg.repo)
	if err != nil {
		return fmt.Errorf("-repo: %w", err)
	}
	if cfg.install {
		// Run from bench/compare (as go run . is), where install.sh is.
		cmd := exec.CommandContext(ctx, "./install.sh")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("install.sh: %w", err)
		}
	}
	m := readMachine()
	tmp, err := os.MkdirTemp("", "bench-compare-")
	if err != nil {
		return fmt.Errorf("temporary folder: %w", err)
	}
	// PostgreSQL runs as its own user and must be able to enter the folder.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("temporary folder: %w", err)
	}
	srv := &servers{tmp: tmp}
	defer func() {
		err = errors.Join(err, srv.stopAll())
		if cfg.keepTmp {
			slog.Info("kept the temporary folder", "path", tmp)
		} else if rmErr := os.RemoveAll(tmp); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", tmp, rmErr))
		}
	}()
	chosen := make(map[string]bool)
	for _, n := range cfg.systems {
		chosen[n] = true
	}
	if err := startServers(ctx, srv, repo, chosen, cfg.redisRetry); err != nil {
		return err
	}
	var systems []*system
	for _, n := range cfg.systems {
		if s, ok := srv.systems[n]; ok {
			systems = append(systems, s)
		}
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	m.loadBefore = loadAverage()
	results := make(map[cell][]runResult)
	failed := make(map[cell]error)
	started := time.Now()
	seq := 0
	for round := range cfg.rounds {
		for _, c := range plan(cfg.workloads, systems, round) {
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", ctx.Err())
			}
			if failed[c] != nil {
				continue
			}
			seq++
			r, err := runCell(ctx, srv.systems[c.system], c, "r"+strconv.Itoa(seq)+"/", cfg)
			if err != nil {
				slog.Error("run failed", "round", round+1, "workload", c.workload, "lockers", c.lockers, "system", c.system, "err", err)
				failed[c] = err
				continue
			}
			results[c] = append(results[c], r)
			fmt.Fprintf(os.Stderr, "round %d/%d  %-2s %3d  %-17s %s\n", round+1, cfg.rounds, c.workload, c.lockers, c.system, brief(c, r))
		}
	}
	failovers := make(map[string]failoverResult)
	if slices.Contains(cfg.workloads, wF) && cfg.failovers > 0 {
		for _, s := range systems {
			if c, ok := srv.clusters[s.name]; ok {
				failovers[s.name] = runFailovers(ctx, c, cfg.failovers)
			}
		}
	}
	m.loadAfter = loadAverage()
	m.took = time.Since(started)
	rep := newReport(cfg, m, srv, systems, results, failed)
	rep.failovers = failovers
	fmt.Println(rep.markdown(""))
	if cfg.out != "" {
		if err := rep.write(cfg.out); err != nil {
			return err
		}
		slog.Info("wrote the report", "folder", cfg.out)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d measurements failed (see above)", len(failed))
	}
	return nil
}

// runCell runs one measurement with a deadline well past its duration, so
// that a system that stops answering fails the run instead of hanging it.
func runCell(ctx context.Context, sys *system, c cell, prefix string, cfg config) (runResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timing.warmup+cfg.timing.duration+60*time.Second)
	defer cancel()
	switch c.workload {
	case wA:
		return runCycles(ctx, sys, prefix, 1, false, true, cfg.timing)
	case wC:
		return runHotKey(ctx, sys, prefix, c.lockers, cfg.hold, cfg.timing)
	case wM:
		return runCycles(ctx, sys, prefix, c.lockers, true, false, cfg.timing)
	default:
		return runCycles(ctx, sys, prefix, c.lockers, false, false, cfg.timing)
	}
}

// brief is one progress line's figures.
func brief(c cell, r runResult) string {
	switch c.workload {
	case wA:
		lat := slices.Clone(r.latencies)
		return fmt.Sprintf("p50 %s  p99 %s  (%d cycles)", us(percentile(lat, 50)), us(percentile(lat, 99)), r.cycles)
	case wC:
		lat := slices.Clone(r.latencies)
		return fmt.Sprintf("%.0f acq/s  handover p50 %s p99 %s  jain %.4f  overtakes %d (%d > %v)", r.rate(),
			us(percentile(lat, 50)), us(percentile(lat, 99)), jain(r.perClient), r.overtakes, r.farOvertakes, overtakeMargin)
	}
	return fmt.Sprintf("%.0f cycles/s", r.rate())
}

// us formats a duration in whole microseconds.
func us(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " µs"
}
