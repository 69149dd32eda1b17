package deploy

import (
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// The server binary is built once per test run, the way the Dockerfile
// builds it: from the files .dockerignore lets into the build context, with
// the Dockerfile's go build flags.
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

const testVersion = "deploy-test-1.2.3"

func cleanupBinary() {
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
}

// serverBinary returns the path of the binary built as the image builds it.
func serverBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	img := parseDockerfile(t)
	buildOnce.Do(func() { buildBin, buildErr = buildLikeDocker(root, img) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func buildLikeDocker(root string, img image) (string, error) {
	gotool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	m := ldflags.FindStringSubmatch(img.BuildRun)
	if m == nil {
		return "", fmt.Errorf("no -ldflags \"...\" in the Dockerfile's go build line %q", img.BuildRun)
	}
	flags := strings.ReplaceAll(strings.ReplaceAll(m[1], "${VERSION}", testVersion), "$VERSION", testVersion)
	if buildDir, err = os.MkdirTemp("", "lc-deploy-"); err != nil {
		return "", err
	}
	ctxDir := filepath.Join(buildDir, "context")
	if err := copyBuildContext(root, ctxDir); err != nil {
		return "", err
	}
	bin := filepath.Join(buildDir, "locking-center")
	cmd := exec.Command(gotool, "build", "-trimpath", "-ldflags", flags, "-o", bin, ".")
	cmd.Dir = ctxDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build in the Docker build context (after .dockerignore): %v\n%s", err, out)
	}
	return bin, nil
}

// copyBuildContext copies what `docker build .` would send: every file not
// excluded by .dockerignore.
func copyBuildContext(root, dst string) error {
	f, err := os.Open(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return err
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		return fmt.Errorf(".dockerignore: %w", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return fmt.Errorf(".dockerignore: %w", err)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		switch {
		case excluded && d.IsDir() && !pm.Exclusions():
			return filepath.SkipDir
		case excluded:
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

func TestBinaryAsBuiltInImage(t *testing.T) {
	bin := serverBinary(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), testVersion) {
		t.Errorf("`locking-center version` = %q, %v; want the version stamped by -ldflags (%s)", out, err, testVersion)
	}
	// scratch has no libc: the binary must not ask for a dynamic loader.
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary is dynamically linked (PT_INTERP); it will not run on scratch")
		}
	}
}

// server is one running locking-center process.
type server struct {
	cmd        *exec.Cmd
	stderr     *os.File // the process writes its log here; the test reads the file
	lock, web  string   // host:port
	exited     chan struct{}
	exitErr    error
	stoppedFor time.Duration
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer runs the binary with the image's environment (env) plus
// loopback addresses on free ports, and waits until /readyz answers 200.
func startServer(t *testing.T, bin string, env map[string]string, readyPath string) *server {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), "stderr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	s := &server{stderr: log, lock: freePort(t), web: freePort(t), exited: make(chan struct{})}
	s.cmd = exec.Command(bin)
	s.cmd.Env = []string{"BIND_ADDRESS=" + s.lock, "WEB_ADDRESS=" + s.web}
	for k, v := range env {
		s.cmd.Env = append(s.cmd.Env, k+"="+v)
	}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exitErr = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
	})

	deadline := time.Now().Add(15 * time.Second)
	for {
		code, err := get(s.web, readyPath)
		if err == nil && code == http.StatusOK {
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("server exited before it was ready: %v\n%s", s.exitErr, s.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d, %v after 15s\n%s", readyPath, code, err, s.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// log returns what the server has written to its stderr so far.
func (s *server) log() string {
	b, _ := os.ReadFile(s.stderr.Name())
	return string(b)
}

// stop sends SIGTERM and waits at most grace, as Docker and Kubernetes do
// before they SIGKILL; the server must exit 0 within it.
func (s *server) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(grace):
		t.Fatalf("server still running %v after SIGTERM; Docker would SIGKILL it\n%s", grace, s.log())
	}
	s.stoppedFor = time.Since(start)
	if s.exitErr != nil {
		t.Fatalf("server exit after SIGTERM: %v, want status 0\n%s", s.exitErr, s.log())
	}
}

func get(addr, path string) (int, error) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// lockRequest sends one frame of the TCP protocol (docs/protocol.md) with an empty
// source and returns the one-byte answer.
func lockRequest(addr string, action byte, key string) (byte, error) {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	frame := append([]byte{action, byte(len(key))}, key...)
	if _, err := conn.Write(append(frame, 0)); err != nil {
		return 0, err
	}
	var answer [1]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		return 0, err
	}
	return answer[0], nil
}

const (
	actionLock    = 1
	actionUnlock  = 2
	actionTryLock = 5
)

// imageEnv is the environment the image gives the server, with DATA_PATH
// moved from the volume into dataDir.
func imageEnv(t *testing.T, img image, dataDir string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range img.Env {
		env[k] = v
	}
	if v := env["DATA_PATH"]; v != "" {
		env["DATA_PATH"] = filepath.Join(dataDir, filepath.Base(v))
	}
	return env
}

// TestRestartKeepsHeldKeys is `docker compose restart` without Docker: a
// key held before SIGTERM is still held after the server starts again on
// the same volume, and the server stops within compose's stop_grace_period.
func TestRestartKeepsHeldKeys(t *testing.T) {
	bin := serverBinary(t)
	img := parseDockerfile(t)
	grace := composeStopGrace(t)
	env := imageEnv(t, img, t.TempDir())

	s := startServer(t, bin, env, "/readyz")
	const key = "deploy-test/held-across-restart"
	if a, err := lockRequest(s.lock, actionLock, key); err != nil || a != '+' {
		t.Fatalf("lock %s: %q, %v; want '+'", key, a, err)
	}
	s.stop(t, grace)
	t.Logf("SIGTERM to exit: %v (stop_grace_period %v)", s.stoppedFor, grace)

	if _, err := os.Stat(env["DATA_PATH"]); err != nil {
		t.Fatalf("the server did not write DATA_PATH (%s): %v", env["DATA_PATH"], err)
	}
	s = startServer(t, bin, env, "/readyz")
	if a, err := lockRequest(s.lock, actionTryLock, key); err != nil || a != '#' {
		t.Errorf("trylock %s after restart: %q, %v; want '#' (still held)", key, a, err)
	}
	if a, err := lockRequest(s.lock, actionUnlock, key); err != nil || a != '+' {
		t.Errorf("unlock %s after restart: %q, %v; want '+'", key, a, err)
	}
	s.stop(t, grace)
}
