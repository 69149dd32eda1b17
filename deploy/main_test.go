package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind and removes the
// binary built for the server tests.
func TestMain(m *testing.M) {
	code := m.Run()
	cleanupBinary()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// repoRoot is the repository root: this module lives in deploy/.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readRepoFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), filepath.FromSlash(rel)))
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return b
}

// serverDefaults are the server's built-in BIND_ADDRESS and WEB_ADDRESS
// ports, read from main.go so that the deployment files cannot drift from
// the code (the README: 22119 and 22120).
type serverDefaults struct {
	LockPort, WebPort string
}

var (
	bindDefault = regexp.MustCompile(`BindAddress:\s*"[^":]*:(\d+)"`)
	webDefault  = regexp.MustCompile(`WebAddress:\s*"[^":]*:(\d+)"`)
)

func readServerDefaults(t *testing.T) serverDefaults {
	t.Helper()
	src := readRepoFile(t, "main.go")
	b, w := bindDefault.FindSubmatch(src), webDefault.FindSubmatch(src)
	if b == nil || w == nil {
		t.Fatalf("main.go: cannot find the BindAddress/WebAddress defaults in configFromEnv (matched %q, %q); update %s",
			b, w, "deploy/main_test.go")
	}
	d := serverDefaults{LockPort: string(b[1]), WebPort: string(w[1])}
	if d.LockPort != "22119" || d.WebPort != "22120" {
		t.Fatalf("server defaults are %+v, the README says 22119 and 22120", d)
	}
	return d
}
