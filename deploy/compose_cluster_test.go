package deploy

import (
	"context"
	"net"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// The cluster's compose file and its three services (SPEC §8.7).
const composeClusterFile = "docker-compose.cluster.yml"

var clusterServices = []string{"lc1", "lc2", "lc3"}

// clusterRaftPort is the server's default RAFT_ADDRESS port (cluster
// package, SPEC §8.6): the compose file leaves RAFT_ADDRESS unset.
const clusterRaftPort = "22121"

// testClusterToken stands in for the token a user puts in .env.
const testClusterToken = "compose-test-cluster-token-0123456789"

// loadComposeFile loads a compose file of the repository root as `docker
// compose -f FILE` does, with only env as its environment (no .env file).
func loadComposeFile(t *testing.T, file string, env []string) (*types.Project, error) {
	t.Helper()
	root := repoRoot(t)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, file)},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(env),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	return opts.LoadProject(context.Background())
}

// TestComposeCluster checks docker-compose.cluster.yml as compose-go (the
// library of `docker compose`) loads it: three nodes of one image with the
// same CLUSTER_PEERS and CLUSTER_TOKEN, each its own NODE_ID and a named
// volume of its own for RAFT_DIR, DATA_PATH emptied (the image sets it, a
// cluster refuses it), the client ports published on distinct host ports and
// the cluster port not at all; and that a missing CLUSTER_TOKEN stops the
// load with a message naming it and .env.
func TestComposeCluster(t *testing.T) {
	root := repoRoot(t)
	img := parseDockerfile(t)
	defaults := readServerDefaults(t)

	t.Run("without CLUSTER_TOKEN", func(t *testing.T) {
		for _, env := range [][]string{nil, {"CLUSTER_TOKEN="}} {
			_, err := loadComposeFile(t, composeClusterFile, env)
			if err == nil {
				t.Fatalf("env %q: %s loads without a CLUSTER_TOKEN", env, composeClusterFile)
			}
			if msg := err.Error(); !strings.Contains(msg, "CLUSTER_TOKEN") || !strings.Contains(msg, ".env") {
				t.Errorf("env %q: the error does not tell the user to set CLUSTER_TOKEN in .env: %v", env, err)
			}
		}
		example := string(readRepoFile(t, ".env.example"))
		if !regexp.MustCompile(`(?m)^CLUSTER_TOKEN=`).MatchString(example) {
			t.Errorf(".env.example has no CLUSTER_TOKEN= line for the user to fill in")
		}
	})

	p, err := loadComposeFile(t, composeClusterFile, []string{"CLUSTER_TOKEN=" + testClusterToken})
	if err != nil {
		t.Fatalf("%s: %v", composeClusterFile, err)
	}
	if got := p.ServiceNames(); !slices.Equal(sortedCopy(got), clusterServices) {
		t.Fatalf("services %v, want %v", got, clusterServices)
	}
	if p.Name == "" || p.Name == loadCompose(t).Name {
		t.Errorf("project name %q is the single node's: their volumes and containers would mix", p.Name)
	}

	var peers string
	images := map[string]bool{}
	published := map[string]string{} // host port → service
	volumes := map[string]string{}   // volume → service
	builders := 0
	for _, name := range clusterServices {
		s := p.Services[name]
		t.Run(name, func(t *testing.T) {
			env := func(k string) (string, bool) {
				v, ok := s.Environment[k]
				if !ok || v == nil {
					return "", false
				}
				return *v, true
			}
			images[s.Image] = true
			if s.Build != nil {
				builders++
				if s.Build.Context != root {
					t.Errorf("build context %q, want the repository root", s.Build.Context)
				}
			}
			if id, _ := env("NODE_ID"); id != name {
				t.Errorf("NODE_ID %q, want the service name %s", id, name)
			}
			if dp, ok := env("DATA_PATH"); !ok || dp != "" {
				t.Errorf("DATA_PATH %q (set: %v): the image sets %s, which a cluster node refuses; want it set empty",
					dp, ok, img.Env["DATA_PATH"])
			}
			if tok, _ := env("CLUSTER_TOKEN"); tok != testClusterToken {
				t.Errorf("CLUSTER_TOKEN %q, want the one from the environment (.env)", tok)
			}
			pl, _ := env("CLUSTER_PEERS")
			if peers == "" {
				peers = pl
			} else if pl != peers {
				t.Errorf("CLUSTER_PEERS %q differs from %q: every node must have the same list", pl, peers)
			}
			if _, ok := env("CLUSTER_JOIN"); ok {
				t.Error("CLUSTER_JOIN is set beside CLUSTER_PEERS")
			}
			for _, k := range []string{"RAFT_ADDRESS", "RAFT_ADVERTISE", "BIND_ADDRESS", "WEB_ADDRESS"} {
				if v, ok := env(k); ok && v != "" {
					t.Errorf("%s=%q is set: the peers, ports and healthcheck assume the defaults", k, v)
				}
			}
			dir, _ := env("RAFT_DIR")
			i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
				return dir == v.Target || strings.HasPrefix(dir, strings.TrimSuffix(v.Target, "/")+"/")
			})
			if dir == "" || !path.IsAbs(dir) || i < 0 {
				t.Errorf("RAFT_DIR %q is not inside a volume: the raft log, vote and term would be lost with the container", dir)
			} else if v := s.Volumes[i]; v.Type != types.VolumeTypeVolume || v.ReadOnly {
				t.Errorf("RAFT_DIR's volume is %s (read-only %v), want a writable named volume", v.Type, v.ReadOnly)
			} else if _, ok := p.Volumes[v.Source]; !ok {
				t.Errorf("volume %q is not declared under the top-level volumes", v.Source)
			} else if other, ok := volumes[v.Source]; ok {
				t.Errorf("volume %q is %s's too: every node needs a RAFT_DIR of its own", v.Source, other)
			} else {
				volumes[v.Source] = name
			}
			targets := map[uint32]bool{}
			for _, port := range s.Ports {
				targets[port.Target] = true
				if other, ok := published[port.Published]; ok {
					t.Errorf("host port %s is published by %s too", port.Published, other)
				}
				published[port.Published] = name
				if strconv.FormatUint(uint64(port.Target), 10) == clusterRaftPort {
					t.Errorf("the cluster port %s is published: only the other nodes may reach it", clusterRaftPort)
				}
			}
			for _, want := range []string{defaults.LockPort, defaults.WebPort} {
				n, _ := strconv.ParseUint(want, 10, 32)
				if !targets[uint32(n)] {
					t.Errorf("port %s is not published: clients must reach every node", want)
				}
			}
			if s.Restart != types.RestartPolicyUnlessStopped {
				t.Errorf("restart %q, want %s", s.Restart, types.RestartPolicyUnlessStopped)
			}
			if s.HealthCheck == nil || !slices.Equal([]string(s.HealthCheck.Test), img.Healthcheck) {
				t.Errorf("healthcheck %+v, want the image's %q", s.HealthCheck, img.Healthcheck)
			}
			if s.Ulimits["nofile"] == nil || s.Ulimits["nproc"] == nil {
				t.Errorf("ulimits %v: want nofile and nproc set, as in docker-compose.yml (podman asks for more than many hosts allow)", s.Ulimits)
			}
			if g := s.StopGracePeriod; g == nil || time.Duration(*g) < 10*time.Second {
				t.Errorf("stop_grace_period %v, want at least 10s", g)
			}
		})
	}
	if builders != 1 {
		t.Errorf("%d services build the image, want one (the others run what it built)", builders)
	}
	if len(images) != 1 {
		t.Errorf("the nodes run %d different images %v, want one", len(images), images)
	}
	lc1 := p.Services["lc1"]
	for _, want := range []string{defaults.LockPort, defaults.WebPort} {
		if !slices.ContainsFunc(lc1.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Published == want && strconv.FormatUint(uint64(pc.Target), 10) == want
		}) {
			t.Errorf("lc1 does not publish %s on the host's %s, as the README says", want, want)
		}
	}

	t.Run("CLUSTER_PEERS", func(t *testing.T) {
		var ids []string
		for item := range strings.SplitSeq(peers, ",") {
			id, addr, ok := strings.Cut(item, "=")
			host, port, err := net.SplitHostPort(addr)
			if !ok || err != nil {
				t.Fatalf("CLUSTER_PEERS item %q is not id=host:port", item)
			}
			ids = append(ids, id)
			// Each node reaches the others by service name on the
			// project network, at the cluster port they listen on.
			if host != id || port != clusterRaftPort {
				t.Errorf("CLUSTER_PEERS item %q: want %s=%s:%s (the service's name, the default RAFT_ADDRESS port)", item, id, id, clusterRaftPort)
			}
		}
		if !slices.Equal(sortedCopy(ids), clusterServices) {
			t.Errorf("CLUSTER_PEERS names %v, want %v", ids, clusterServices)
		}
	})

	t.Run("single node stays the default", func(t *testing.T) {
		if s := loadCompose(t).ServiceNames(); !slices.Equal(s, []string{composeServer}) {
			t.Errorf("docker-compose.yml runs %v, want only %s", s, composeServer)
		}
	})
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
