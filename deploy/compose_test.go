package deploy

import (
	"context"
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
	"sigs.k8s.io/yaml"
)

// loadCompose loads docker-compose.yml as `docker compose` does, with the
// given profiles, an empty environment (so every ${VAR:-default} takes its
// default) and compose-go's consistency checks on.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(nil),
		cli.WithProfiles(profiles),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

const (
	composeServer     = "locking-center"
	composePrometheus = "prometheus"
)

// composeStopGrace is the server's stop_grace_period.
func composeStopGrace(t *testing.T) time.Duration {
	t.Helper()
	s, ok := loadCompose(t).Services[composeServer]
	if !ok || s.StopGracePeriod == nil {
		t.Fatalf("docker-compose.yml: no stop_grace_period on %s", composeServer)
	}
	return time.Duration(*s.StopGracePeriod)
}

var pinnedPrometheus = regexp.MustCompile(`^docker\.io/prom/prometheus:v\d+\.\d+\.\d+$`)

func TestCompose(t *testing.T) {
	root := repoRoot(t)
	img := parseDockerfile(t)
	defaults := readServerDefaults(t)

	t.Run("server", func(t *testing.T) {
		p := loadCompose(t)
		s, ok := p.Services[composeServer]
		if !ok {
			t.Fatalf("no service %q; services: %v", composeServer, p.ServiceNames())
		}
		if s.Build == nil || s.Build.Context != root {
			t.Errorf("build %+v, want the repository root as context", s.Build)
		} else if df := s.Build.Dockerfile; df != "" && df != "Dockerfile" && df != filepath.Join(root, "Dockerfile") {
			t.Errorf("build.dockerfile %q, want the root Dockerfile", df)
		}
		var published []string
		for _, port := range s.Ports {
			published = append(published, port.Published+":"+strconv.FormatUint(uint64(port.Target), 10))
		}
		for _, want := range []string{defaults.LockPort + ":" + defaults.LockPort, defaults.WebPort + ":" + defaults.WebPort} {
			if !slices.Contains(published, want) {
				t.Errorf("ports %v lack %s", published, want)
			}
		}
		dataDir := path.Dir(img.Env["DATA_PATH"])
		if env := s.Environment["DATA_PATH"]; env != nil && *env != img.Env["DATA_PATH"] {
			t.Errorf("environment DATA_PATH=%q differs from the image's %q", *env, img.Env["DATA_PATH"])
		}
		i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == dataDir })
		if i < 0 {
			t.Errorf("no volume on %s (the image's DATA_PATH folder): held keys would not survive a recreate", dataDir)
		} else if v := s.Volumes[i]; v.Type != types.VolumeTypeVolume || v.ReadOnly {
			t.Errorf("volume on %s is %s (read-only %v), want a writable named volume", dataDir, v.Type, v.ReadOnly)
		} else if _, ok := p.Volumes[v.Source]; !ok {
			t.Errorf("volume %q is not declared under the top-level volumes", v.Source)
		}
		if s.Restart != types.RestartPolicyUnlessStopped {
			t.Errorf("restart %q, want %s", s.Restart, types.RestartPolicyUnlessStopped)
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable {
			t.Error("no healthcheck")
		} else if !slices.Equal([]string(s.HealthCheck.Test), img.Healthcheck) {
			t.Errorf("healthcheck test %q, want the image's %q", s.HealthCheck.Test, img.Healthcheck)
		}
		if g := s.StopGracePeriod; g == nil || time.Duration(*g) < 10*time.Second {
			t.Errorf("stop_grace_period %v, want at least 10s for the log to be flushed", g)
		}
		if _, ok := p.DisabledServices[composePrometheus]; !ok {
			t.Errorf("%s runs without the monitoring profile; services: %v", composePrometheus, p.ServiceNames())
		}
	})

	t.Run("monitoring profile", func(t *testing.T) {
		p := loadCompose(t, "monitoring")
		s, ok := p.Services[composePrometheus]
		if !ok {
			t.Fatalf("--profile monitoring does not enable %q; services: %v", composePrometheus, p.ServiceNames())
		}
		if !slices.Equal(s.Profiles, []string{"monitoring"}) {
			t.Errorf("profiles %v, want [monitoring]", s.Profiles)
		}
		if !pinnedPrometheus.MatchString(s.Image) {
			t.Errorf("image %q, want the official docker.io/prom/prometheus pinned to vX.Y.Z", s.Image)
		}
		i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Type == types.VolumeTypeBind && v.Source == filepath.Join(root, "deploy", "prometheus")
		})
		if i < 0 {
			t.Fatalf("deploy/prometheus is not mounted into %s: %+v", composePrometheus, s.Volumes)
		}
		mount := s.Volumes[i].Target
		cfgPath := ""
		for _, arg := range s.Command {
			if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
				cfgPath = v
			}
		}
		rel, err := filepath.Rel(mount, cfgPath)
		if cfgPath == "" || err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("command %q: want --config.file= inside %s (where deploy/prometheus is mounted)", s.Command, mount)
		}
		checkPrometheusConfig(t, filepath.ToSlash(filepath.Join("deploy", "prometheus", rel)), defaults)
	})
}

// promConfig is the part of prometheus.yml these tests read.
type promConfig struct {
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// checkPrometheusConfig checks that the Prometheus of the monitoring
// profile scrapes the compose server's web port under the job name the
// alert rules select, and loads the rules that promtool tests.
func checkPrometheusConfig(t *testing.T, rel string, defaults serverDefaults) {
	t.Helper()
	var cfg promConfig
	if err := yaml.Unmarshal(readRepoFile(t, rel), &cfg); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	want := composeServer + ":" + defaults.WebPort
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, want) {
				found = true
				if sc.JobName != "locking-center" {
					t.Errorf("%s: job %q scrapes %s; the alert rules select job=\"locking-center\"", rel, sc.JobName, want)
				}
				if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
					t.Errorf("%s: metrics_path %q, the server serves /metrics", rel, sc.MetricsPath)
				}
			}
		}
	}
	if !found {
		t.Errorf("%s: no scrape target %s", rel, want)
	}
	alerts := string(readRepoFile(t, "deploy/prometheus/alerts.yml"))
	if !strings.Contains(alerts, `job="locking-center"`) {
		t.Errorf("alerts.yml no longer selects job=\"locking-center\"; update %s", rel)
	}
	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Errorf("%s: rule_files %v do not load alerts.yml", rel, cfg.RuleFiles)
	}
}
