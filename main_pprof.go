//go:build pprof

package main

// This file is built only with -tags pprof, to measure a running node: it
// is never in a release build. With LC_PPROF_DIR set, the process serves
// net/http/pprof and raft's own metrics (go-metrics, kept in memory) on a
// free 127.0.0.1 port, and writes that address to
// LC_PPROF_DIR/<NODE_ID or "single">-<pid>.addr, so that the nodes of a
// benchmark's cluster, which share one environment, each get their own:
//
//	curl -o cpu.pprof http://$(cat n0-*.addr)/debug/pprof/profile?seconds=5
//	curl http://$(cat n0-*.addr)/debug/metrics    # raft.boltdb.storeLogs, raft.commitTime, …

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

func init() {
	dir := os.Getenv("LC_PPROF_DIR")
	if dir == "" {
		return
	}
	sink := metrics.NewInmemSink(10*time.Second, time.Minute)
	cfg := metrics.DefaultConfig("lc")
	cfg.EnableHostname = false
	cfg.EnableRuntimeMetrics = false
	if _, err := metrics.NewGlobal(cfg, sink); err != nil {
		slog.Error("pprof build: metrics", "err", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		slog.Error("pprof build: listen", "err", err)
		return
	}
	name := os.Getenv("NODE_ID")
	if name == "" {
		name = "single"
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.addr", name, os.Getpid()))
	if err := os.WriteFile(path, []byte(ln.Addr().String()), 0o600); err != nil {
		slog.Error("pprof build: write the address", "err", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/metrics", func(w http.ResponseWriter, r *http.Request) {
		v, err := sink.DisplayMetrics(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, iv := range v.(metrics.MetricsSummary).Samples {
			fmt.Fprintf(w, "%s count=%d mean=%.3f min=%.3f max=%.3f\n", iv.Name, iv.Count, iv.Mean, iv.Min, iv.Max)
		}
		for _, g := range v.(metrics.MetricsSummary).Gauges {
			fmt.Fprintf(w, "%s gauge=%.1f\n", g.Name, g.Value)
		}
	})
	go func() { _ = http.Serve(ln, mux) }() // lives as long as the process: a measuring build only
}
