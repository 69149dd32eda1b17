package deploy

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// image is what the Dockerfile says about the builder and the final image,
// as BuildKit reads it.
type image struct {
	Stages      int
	BuilderBase string            // FROM of the first stage
	BuildRun    string            // the RUN line of the builder that calls go build
	FinalBase   string            // FROM of the last stage
	User        string            // last USER of the final stage
	Env         map[string]string // ENV of the final stage
	Expose      []string
	Volumes     []string
	Healthcheck []string // HEALTHCHECK test, exec form: ["CMD", ...]
	Entrypoint  []string
	Copied      []string // destinations of COPY --from in the final stage
}

func parseDockerfile(t *testing.T) image {
	t.Helper()
	res, err := parser.Parse(bytes.NewReader(readRepoFile(t, "Dockerfile")))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: parser warning: %s", w.Short)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	// The base images as `docker build` without --build-arg resolves them:
	// ARGs before the first FROM take their defaults.
	var defaults []string
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				defaults = append(defaults, "${"+kv.Key+"}", *kv.Value, "$"+kv.Key, *kv.Value)
			}
		}
	}
	expand := strings.NewReplacer(defaults...).Replace
	img := image{Stages: len(stages), BuilderBase: expand(stages[0].BaseName), Env: map[string]string{}}
	if strings.Contains(img.BuilderBase, "$") {
		t.Errorf("Dockerfile: builder FROM %q refers to an ARG without a default", stages[0].BaseName)
	}
	for _, cmd := range stages[0].Commands {
		if run, ok := cmd.(*instructions.RunCommand); ok && strings.Contains(strings.Join(run.CmdLine, " "), "go build") {
			img.BuildRun = strings.Join(run.CmdLine, " ")
		}
	}
	final := stages[len(stages)-1]
	img.FinalBase = expand(final.BaseName)
	for _, cmd := range final.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			img.User = c.User
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				img.Env[kv.Key] = kv.Value
			}
		case *instructions.ExposeCommand:
			img.Expose = append(img.Expose, c.Ports...)
		case *instructions.VolumeCommand:
			img.Volumes = append(img.Volumes, c.Volumes...)
		case *instructions.HealthCheckCommand:
			img.Healthcheck = c.Health.Test
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Errorf("Dockerfile: ENTRYPOINT %v is in shell form; scratch has no shell", c.CmdLine)
			}
			img.Entrypoint = c.CmdLine
		case *instructions.CopyCommand:
			if c.From != "" {
				img.Copied = append(img.Copied, c.DestPath)
			}
		case *instructions.RunCommand:
			t.Errorf("Dockerfile: RUN %v in the final stage; it has no shell", c.CmdLine)
		}
	}
	return img
}

// binaryPath is where the Dockerfile puts the server in the final image.
const binaryPath = "/locking-center"

var (
	pinnedGolang = regexp.MustCompile(`^docker\.io/library/golang:(\d+\.\d+\.\d+)(-[a-z0-9.]+)?$`)
	ldflags      = regexp.MustCompile(`-ldflags[= ]"([^"]*)"`)
)

func TestDockerfile(t *testing.T) {
	img := parseDockerfile(t)
	defaults := readServerDefaults(t)

	t.Run("builder", func(t *testing.T) {
		if img.Stages < 2 {
			t.Errorf("%d stage(s), want a multi-stage build (builder + final image)", img.Stages)
		}
		m := pinnedGolang.FindStringSubmatch(img.BuilderBase)
		if m == nil {
			t.Fatalf("builder FROM %q: want docker.io/library/golang:X.Y.Z (pinned to a patch release)", img.BuilderBase)
		}
		gomod, err := modfile.ParseLax("go.mod", readRepoFile(t, "go.mod"), nil)
		if err != nil || gomod.Go == nil {
			t.Fatalf("go.mod: %v", err)
		}
		if semver.Compare("v"+m[1], "v"+gomod.Go.Version) < 0 {
			t.Errorf("builder Go %s is older than go.mod's go %s", m[1], gomod.Go.Version)
		}
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=", "-o " + "/out" + binaryPath} {
			if !strings.Contains(img.BuildRun, want) {
				t.Errorf("go build RUN %q lacks %q", img.BuildRun, want)
			}
		}
		if !ldflags.MatchString(img.BuildRun) {
			t.Errorf("go build RUN %q: want -ldflags \"...\" in double quotes", img.BuildRun)
		}
	})

	t.Run("final image", func(t *testing.T) {
		if img.FinalBase != "scratch" && !strings.Contains(img.FinalBase, "distroless/static") {
			t.Errorf("final FROM %q: want scratch or distroless static", img.FinalBase)
		}
		if !slices.Contains(img.Copied, binaryPath) {
			t.Errorf("final stage copies %v from the builder, want the binary at %s", img.Copied, binaryPath)
		}
		if want := []string{binaryPath}; !slices.Equal(img.Entrypoint, want) {
			t.Errorf("ENTRYPOINT %q, want %q", img.Entrypoint, want)
		}
		if _, err := imageUID(img.User); err != nil {
			t.Error(err)
		}
		if want := []string{"CMD", binaryPath, "healthcheck"}; !slices.Equal(img.Healthcheck, want) {
			t.Errorf("HEALTHCHECK %q, want %q (exec form: scratch has no shell)", img.Healthcheck, want)
		}
		var ports []string
		for _, p := range img.Expose {
			ports = append(ports, strings.TrimSuffix(p, "/tcp"))
		}
		slices.Sort(ports)
		if want := []string{defaults.LockPort, defaults.WebPort}; !slices.Equal(ports, want) {
			t.Errorf("EXPOSE %v, want %v", img.Expose, want)
		}
		if !slices.Equal(img.Volumes, []string{"/data"}) {
			t.Errorf("VOLUME %v, want [/data]", img.Volumes)
		}
		if got := img.Env["DATA_PATH"]; got != "/data/locks.wal" {
			t.Errorf("ENV DATA_PATH=%q, want /data/locks.wal (persistence on in containers)", got)
		}
		if dir := path.Dir(img.Env["DATA_PATH"]); !slices.Contains(img.Volumes, dir) {
			t.Errorf("DATA_PATH %q is not on a VOLUME %v", img.Env["DATA_PATH"], img.Volumes)
		}
	})
}

// imageUID returns the numeric UID of a USER line and fails for root or a
// user name, which scratch cannot resolve (it has no /etc/passwd).
func imageUID(user string) (int64, error) {
	if user == "" {
		return 0, fmt.Errorf("no USER in the final stage: the server would run as root")
	}
	uid, err := strconv.ParseInt(strings.SplitN(user, ":", 2)[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("USER %q: want a numeric UID[:GID]", user)
	}
	if uid == 0 {
		return 0, fmt.Errorf("USER %q is root", user)
	}
	return uid, nil
}
