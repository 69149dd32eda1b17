package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// This file runs docker-compose.yml for real, on podman with podman-compose
// (the container engine this machine kind has; it has no Docker engine):
// the image is built from the repository's Dockerfile, the stack comes up,
// and what the README promises is checked from outside through the
// published ports.
//
// No container registry is reachable here, so the Dockerfile's builder
// image is made from the local Go toolchain by deploy/make-go-image.sh, the
// README's recipe for such a machine, under the name the Dockerfile pulls;
// the build's `go mod download` reads this machine's module cache through a
// read-only mount (GOPROXY=file://...) instead of the network.
//
// Everything podman stores for the test — images, layers, containers,
// volumes, networks — lives in a storage root of its own under the test's
// temporary folder, so the machine's own podman images and containers are
// never seen or touched. The test removes what it made by name (compose
// down -v, then each container, volume, network and image it created),
// checks that nothing is left, and only then is the folder deleted.

// podmanStack is one compose project under test.
type podmanStack struct {
	t        *testing.T
	root     string   // repository root: the compose project folder
	file     string   // the compose file, relative to root
	volumes  []string // the file's named volumes, removed at teardown
	compose  []string // argv of podman-compose, before its own flags
	env      []string // environment of every podman and podman-compose run
	project  string   // compose project name, unique to this run
	version  string   // VERSION given to compose: the image tag and stamped version
	goImage  string   // the builder image make-go-image.sh makes
	modCache string   // host GOMODCACHE, mounted into the build
	lockAddr string   // published lock port, 127.0.0.1:PORT
	webAddr  string   // published web port
	password string   // WEB_PASSWORD given to the server
}

// requirePodman returns podman-compose's argv, or skips the test (fails it
// under CI=true) when podman, runc or podman-compose are missing.
func requirePodman(t *testing.T) []string {
	t.Helper()
	missing := func(what string) {
		msg := "SKIPPED: " + what + ", so docker-compose.yml was not run on a container engine; deploy/ci-setup.sh installs podman, runc and podman-compose"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if runtime.GOOS != "linux" {
		missing("not Linux")
	}
	if os.Geteuid() != 0 {
		missing("not root (the test runs podman as root)")
	}
	for _, tool := range []string{"podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " not found")
		}
	}
	if p, err := exec.LookPath("podman-compose"); err == nil {
		return []string{p}
	}
	if exec.Command("python3", "-c", "import podman_compose").Run() == nil {
		return []string{"python3", "-m", "podman_compose"}
	}
	missing("podman-compose not found")
	return nil
}

// composeVars are the variables the compose files read: only those the
// test sets reach podman-compose, so that the caller's own VERSION or
// WEB_PASSWORD cannot change the test.
var composeVars = []string{"VERSION", "STUCK_AFTER", "WEB_PASSWORD", "LOCK_PORT", "WEB_PORT", "AUTH_TOKEN",
	"CLUSTER_TOKEN", "RAFT_HEARTBEAT_TIMEOUT", "LC1_LOCK_PORT", "LC1_WEB_PORT", "LC2_LOCK_PORT", "LC2_WEB_PORT",
	"LC3_LOCK_PORT", "LC3_WEB_PORT"}

// newPodmanStack is docker-compose.yml's stack, with its ports on free
// loopback ports and WEB_PASSWORD set.
func newPodmanStack(t *testing.T) *podmanStack {
	s := newPodmanStackOf(t, "docker-compose.yml", "lc-composetest-", []string{"locks", "prometheus"})
	s.lockAddr, s.webAddr = freePort(t), freePort(t)
	s.env = append(s.env, "LOCK_PORT="+s.lockAddr, "WEB_PORT="+s.webAddr, "WEB_PASSWORD="+s.password)
	return s
}

// newPodmanStackOf is the stack of a compose file of the repository root,
// in a podman storage of its own, under a project name made of prefix and
// this process's id; volumes are the file's named volumes. The caller
// adds the file's variables to s.env.
func newPodmanStackOf(t *testing.T, file, prefix string, volumes []string) *podmanStack {
	compose := requirePodman(t)
	root := repoRoot(t)
	dir := t.TempDir()
	s := &podmanStack{
		t:        t,
		root:     root,
		file:     file,
		volumes:  volumes,
		compose:  compose,
		project:  prefix + strconv.Itoa(os.Getpid()),
		version:  "composetest-" + strconv.Itoa(os.Getpid()),
		password: "compose-test-" + strconv.FormatInt(time.Now().UnixNano(), 36),
	}
	// The Dockerfile's default builder, which make-go-image.sh tags.
	s.goImage = parseDockerfile(t).BuilderBase

	// runc, not crun: crun fails on this kernel's hybrid cgroups (the
	// README's podman settings). The ulimits are the compose file's own.
	conf := fmt.Sprintf(`[engine]
runtime = "runc"
tmp_dir = "%[1]s/tmp"
events_logger = "file"
events_logfile_path = "%[1]s/events.log"
[network]
network_config_dir = "%[1]s/networks"
`, dir)
	storage := fmt.Sprintf(`[storage]
driver = "overlay"
graphroot = "%[1]s/storage"
runroot = "%[1]s/run"
`, dir)
	for name, body := range map[string]string{"containers.conf": conf, "storage.conf": storage} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(composeVars, k) {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env,
		"CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"),
		"CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"),
		"VERSION="+s.version,
		// Docker's image format keeps the Dockerfile's HEALTHCHECK (OCI's
		// drops it), as the README's podman settings say.
		"BUILDAH_FORMAT=docker",
	)
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	s.modCache = strings.TrimSpace(string(out))
	t.Cleanup(s.teardown)
	return s
}

// run runs a command with the stack's environment from the repository root
// and returns its combined output; it fails the test when the command fails.
func (s *podmanStack) run(name string, args ...string) string {
	s.t.Helper()
	out, err := s.try(name, args...)
	if err != nil {
		s.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func (s *podmanStack) try(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.root
	cmd.Env = s.env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// composeArgs is podman-compose's argv for one subcommand of this project.
func (s *podmanStack) composeArgs(sub ...string) []string {
	args := append(slices.Clone(s.compose[1:]),
		"-p", s.project, "-f", filepath.Join(s.root, s.file), "--in-pod", "false",
		// No intermediate images are kept; the module cache stands in for
		// the module proxy.
		"--podman-build-args", strings.Join([]string{
			"--layers=false",
			"-v", filepath.Join(s.modCache, "cache", "download") + ":/gomodcache:ro",
		}, " "),
	)
	return append(args, sub...)
}

func (s *podmanStack) composeRun(sub ...string) string {
	s.t.Helper()
	return s.run(s.compose[0], s.composeArgs(sub...)...)
}

// container is the name of the project's server container.
func (s *podmanStack) container() string {
	s.t.Helper()
	return s.serviceContainer(composeServer)
}

// serviceContainer is the name of the project's container of a service.
func (s *podmanStack) serviceContainer(service string) string {
	s.t.Helper()
	names := strings.Fields(s.run("podman", "ps", "-a", "--format", "{{.Names}}",
		"--filter", "label=io.podman.compose.project="+s.project,
		"--filter", "label=com.docker.compose.service="+service))
	if len(names) != 1 {
		s.t.Fatalf("want one %s container in project %s, have %q", service, s.project, names)
	}
	return names[0]
}

// makeGoImage makes the Dockerfile's builder image from the local Go
// toolchain with deploy/make-go-image.sh, as the README tells a user with
// no registry in reach to do, into the test's own podman storage. The
// image's module proxy is the host's module cache, which the build mounts.
func (s *podmanStack) makeGoImage() {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.root, "deploy", "make-go-image.sh"))
	cmd.Env = append(slices.Clone(s.env), "ENGINE=podman", "GOPROXY=file:///gomodcache", "GOSUMDB=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("deploy/make-go-image.sh: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), s.goImage) {
		s.t.Fatalf("deploy/make-go-image.sh did not name %s:\n%s", s.goImage, out)
	}
}

// getWeb GETs a path of the published web port, with basic auth when auth
// is set, and returns the status and body.
func (s *podmanStack) getWeb(path string, auth bool) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+s.webAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if auth {
		req.SetBasicAuth("admin", s.password)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// awaitReady waits until the published /readyz answers 200: the container
// runs, its log is replayed, and the port forwarding works.
func (s *podmanStack) awaitReady() {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, _, err := s.getWeb("/readyz", false)
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			logs, _ := s.try("podman", "logs", s.container())
			s.t.Fatalf("GET http://%s/readyz: %d, %v after 90s; container log:\n%s", s.webAddr, code, err, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// health is the container's health status as podman records it.
func (s *podmanStack) health() string {
	s.t.Helper()
	var st []struct {
		State struct {
			Health      *struct{ Status string }
			Healthcheck *struct{ Status string }
		}
	}
	out := s.run("podman", "container", "inspect", s.container())
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		s.t.Fatalf("podman container inspect: %v\n%s", err, out)
	}
	switch {
	case st[0].State.Health != nil && st[0].State.Health.Status != "":
		return st[0].State.Health.Status
	case st[0].State.Healthcheck != nil:
		return st[0].State.Healthcheck.Status
	}
	return ""
}

// awaitHealthy runs the container's healthcheck until podman records it
// healthy. Podman schedules healthchecks with systemd timers; this machine
// has no systemd, so the test runs the check itself, once a second, as the
// timer would at the compose file's interval.
func (s *podmanStack) awaitHealthy() {
	s.t.Helper()
	ctr := s.container()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := s.try("podman", "healthcheck", "run", ctr)
		status := s.health()
		if err == nil && status == "healthy" {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("container %s not healthy after 60s: status %q, last check: %v %s", ctr, status, err, out)
		}
		time.Sleep(time.Second)
	}
}

// heldBy returns the source that holds key, per the JSON API, or "".
func (s *podmanStack) heldBy(key string) string {
	s.t.Helper()
	code, body, err := s.getWeb("/api/v1/keys/"+url.PathEscape(key), true)
	if err != nil {
		s.t.Fatalf("GET /api/v1/keys/%s: %v", key, err)
	}
	if code == http.StatusNotFound {
		return ""
	}
	var k struct{ Key, Source string }
	if code != http.StatusOK || json.Unmarshal([]byte(body), &k) != nil || k.Key != key {
		s.t.Fatalf("GET /api/v1/keys/%s: %d %s", key, code, body)
	}
	return k.Source
}

func (s *podmanStack) startedAt() string {
	s.t.Helper()
	return strings.TrimSpace(s.run("podman", "container", "inspect", "--format", "{{.State.StartedAt}}", s.container()))
}

// teardown removes, by name, everything the test made, then checks that the
// test's podman storage holds nothing more.
func (s *podmanStack) teardown() {
	t := s.t
	if out, err := s.try(s.compose[0], s.composeArgs("down", "-v")...); err != nil {
		t.Errorf("compose down -v: %v\n%s", err, out)
	}
	// What compose down may have left, each by the name compose gave it.
	if ids, _ := s.try("podman", "ps", "-a", "-q", "--filter", "label=io.podman.compose.project="+s.project); strings.TrimSpace(ids) != "" {
		s.try("podman", append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
	}
	for _, name := range s.volumes {
		v := s.project + "_" + name
		if _, err := s.try("podman", "volume", "exists", v); err == nil {
			s.try("podman", "volume", "rm", "-f", v)
		}
	}
	if _, err := s.try("podman", "network", "exists", s.project+"_default"); err == nil {
		s.try("podman", "network", "rm", "-f", s.project+"_default")
	}
	for _, img := range []string{"localhost/locking-center:" + s.version, s.goImage} {
		if _, err := s.try("podman", "image", "exists", img); err == nil {
			if out, err := s.try("podman", "rmi", img); err != nil {
				t.Errorf("podman rmi %s: %v\n%s", img, err, out)
			}
		}
	}
	for _, list := range [][]string{{"ps", "-a", "-q"}, {"volume", "ls", "-q"}, {"images", "-a", "-q"}, {"network", "ls", "-q", "--filter", "name=" + s.project}} {
		if out, err := s.try("podman", list...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("after teardown, podman %s: %v %q", strings.Join(list, " "), err, out)
		}
	}
}

var versionLine = regexp.MustCompile(`(?m)^locking-center (\S+)$`)

// TestComposeOnPodman builds the image from the Dockerfile and brings up
// docker-compose.yml for real, as the README's recipe does
// (VERSION=… docker compose up -d --build, here with podman-compose), with
// WEB_PASSWORD set; then checks the lock port, the dashboard and /metrics
// (behind basic auth), the healthcheck, and that a held key survives
// `compose restart` and `compose down` + `up` with its volume.
func TestComposeOnPodman(t *testing.T) {
	s := newPodmanStack(t)
	s.run("go", "mod", "download") // the build reads the module cache, not the network
	s.makeGoImage()

	start := time.Now()
	s.composeRun("up", "-d", "--build")
	t.Logf("compose up --build: %v", time.Since(start).Round(time.Second))
	s.awaitReady()
	ctr := s.container()

	t.Run("image is the VERSION built", func(t *testing.T) {
		img := strings.TrimSpace(s.run("podman", "container", "inspect", "--format", "{{.ImageName}}", ctr))
		if want := "locking-center:" + s.version; !strings.HasSuffix(img, want) {
			t.Errorf("container runs image %q, want %s", img, want)
		}
		m := versionLine.FindStringSubmatch(s.run("podman", "exec", ctr, binaryPath, "version"))
		if m == nil || m[1] != s.version {
			t.Errorf("%s version in the container: %q, want %s", binaryPath, m, s.version)
		}
		hc := s.run("podman", "image", "inspect", "--format", "{{json .Config.Healthcheck}}", "localhost/locking-center:"+s.version)
		if !strings.Contains(hc, binaryPath) || !strings.Contains(hc, "healthcheck") {
			t.Errorf("image healthcheck %s, want the Dockerfile's HEALTHCHECK", hc)
		}
	})

	const key = "deploy/prod"
	t.Run("lock port", func(t *testing.T) {
		if a, err := lockRequest(s.lockAddr, actionTryLock, key); err != nil || a != '+' {
			t.Fatalf("TryLock %s through %s: %q, %v; want '+'", key, s.lockAddr, a, err)
		}
		if a, err := lockRequest(s.lockAddr, actionTryLock, key); err != nil || a != '#' {
			t.Errorf("second TryLock %s: %q, %v; want '#'", key, a, err)
		}
		if got := s.heldBy(key); got == "" {
			t.Errorf("the JSON API does not show %s held", key)
		}
	})

	t.Run("dashboard and metrics", func(t *testing.T) {
		for _, p := range []string{"/", "/metrics"} {
			if code, _, err := s.getWeb(p, false); err != nil || code != http.StatusUnauthorized {
				t.Errorf("GET %s without the password: %d, %v; want 401 (WEB_PASSWORD is set)", p, code, err)
			}
		}
		code, body, err := s.getWeb("/", true)
		if err != nil || code != http.StatusOK || !strings.Contains(body, key) {
			t.Errorf("GET / with the password: %d, %v; want 200 listing %s", code, err, key)
		}
		code, body, err = s.getWeb("/metrics", true)
		if err != nil || code != http.StatusOK || !regexp.MustCompile(`(?m)^locking_center_held_keys 1$`).MatchString(body) {
			t.Errorf("GET /metrics with the password: %d, %v; want 200 with locking_center_held_keys 1", code, err)
		}
	})

	t.Run("healthcheck turns healthy", func(t *testing.T) { s.awaitHealthy() })

	t.Run("held key survives compose restart", func(t *testing.T) {
		before := s.startedAt()
		s.composeRun("restart")
		s.awaitReady()
		if after := s.startedAt(); after == before {
			t.Fatalf("container start time %s unchanged: compose restart did not restart it", after)
		}
		if s.heldBy(key) == "" {
			t.Errorf("%s no longer held after compose restart", key)
		}
	})

	t.Run("held key survives compose down and up with its volume", func(t *testing.T) {
		s.composeRun("down")
		if out, err := s.try("podman", "volume", "exists", s.project+"_locks"); err != nil {
			t.Fatalf("volume %s_locks gone after compose down (without -v): %v %s", s.project, err, out)
		}
		s.composeRun("up", "-d")
		s.awaitReady()
		if s.heldBy(key) == "" {
			t.Errorf("%s no longer held after compose down and up", key)
		}
		if a, err := lockRequest(s.lockAddr, actionUnlock, key); err != nil || a != '+' {
			t.Errorf("Unlock %s: %q, %v; want '+'", key, a, err)
		}
	})
}
