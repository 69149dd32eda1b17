package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// defaultHandoverWait bounds handover's wait for another leader: inside
// Kubernetes' default 30 s grace period, which the preStop hook shares.
const defaultHandoverWait = 20 * time.Second

// handover is the preStop hook of a cluster node (`locking-center
// handover [timeout]`, run in the node's own container with its
// environment): when this node leads, it asks its own web port to hand
// leadership over (POST /api/v1/cluster/transfer, with WEB_PASSWORD) and
// waits until its web port names another leader, so that the SIGTERM that
// follows stops a follower. It exits 0 when another node leads, or this
// node did not lead; 1 when it could not tell or the wait ran out (the pod
// stops anyway, and the cluster elects a leader within a few heartbeat
// timeouts).
func handover(getenv func(string) string, args []string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintln(stderr, "handover:", err)
		return 1
	}
	wait := defaultHandoverWait
	if len(args) > 1 {
		return fail(errors.New("want at most one argument, the time to wait (e.g. 20s)"))
	}
	if len(args) == 1 {
		d, err := time.ParseDuration(args[0])
		if err != nil || d <= 0 {
			return fail(fmt.Errorf("timeout %q: want a duration such as 20s", args[0]))
		}
		wait = d
	}
	cfg, err := configFromEnv(getenv)
	switch {
	case err != nil:
		return fail(err)
	case cfg.Cluster == nil:
		fmt.Fprintln(stdout, "handover: not a cluster node (no CLUSTER_PEERS or CLUSTER_JOIN); nothing to hand over")
		return 0
	case cfg.WebAddress == "":
		return fail(errors.New("WEB_ADDRESS is off: the hand-over is asked of the web port"))
	}
	base, hc := localWeb(cfg)
	hc.Timeout = wait
	do := func(method, path, body string, v any) error {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		if cfg.WebPassword != "" {
			req.SetBasicAuth("admin", cfg.WebPassword)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s answered %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
		}
		return json.Unmarshal(b, v)
	}
	var st struct {
		Node     string `json:"node"`
		State    string `json:"state"`
		LeaderID string `json:"leader_id"`
	}
	if err := do(http.MethodGet, "/api/v1/cluster", "", &st); err != nil {
		return fail(err)
	}
	if st.State != "leader" {
		fmt.Fprintf(stdout, "handover: node %s does not lead (the leader is %q); nothing to hand over\n", st.Node, st.LeaderID)
		return 0
	}
	me := st.Node
	deadline := time.Now().Add(wait)
	var res struct {
		Leader string `json:"leader"`
	}
	if err := do(http.MethodPost, "/api/v1/cluster/transfer", "{}", &res); err != nil {
		return fail(err)
	}
	for {
		if err := do(http.MethodGet, "/api/v1/cluster", "", &st); err == nil && st.LeaderID != "" && st.LeaderID != me {
			fmt.Fprintf(stdout, "handover: node %s handed leadership to node %s\n", me, st.LeaderID)
			return 0
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("no other node leads after %v (the leader is %q)", wait, st.LeaderID))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
