package crashtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPlantedBugsAreFound runs TestCrashRestartUnderLoad, in a child
// process, against servers with a planted bug (LC_SABOTAGE of the
// failpoint build): one that writes no release record, one that restores
// nothing at start. Each run must fail with a history porcupine refuses,
// naming its visualisation — the crash test finds what it is for. Either
// bug may instead be caught by the replay at the next start: a log
// without its releases, or one in which a forgotten hold was granted
// again, holds a grant of a key held under another token with no release
// between, which the replay refuses naming the file and offset — found as
// surely.
func TestPlantedBugsAreFound(t *testing.T) {
	visualisation := regexp.MustCompile(`visualisation (\S+/history\.html)`)
	for _, bug := range []string{"drop-releases", "forget-holds"} {
		t.Run(bug, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRestartUnderLoad$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "LC_SABOTAGE="+bug, "LC_LOAD_CYCLES=20")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the crash test passed against a server that %s:\n%s", bug, lastLines(out, 20))
			}
			if strings.Contains(string(out), "with no release between") {
				t.Logf("%s: refused at start by the replay", bug)
				return
			}
			m := visualisation.FindSubmatch(out)
			if m == nil || !strings.Contains(string(out), "not linearizable") {
				t.Fatalf("the crash test failed, but not by its history check:\n%s", lastLines(out, 40))
			}
			if _, err := os.Stat(string(m[1])); err != nil {
				t.Errorf("visualisation %s: %v", m[1], err)
			}
			os.RemoveAll(filepath.Dir(string(m[1])))
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "not linearizable") {
					t.Logf("%s: %s", bug, strings.TrimSpace(line))
					break
				}
			}
		})
	}
}

// lastLines returns the last n lines of out.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
