package lctest

import (
	"os"
	"os/exec"
	"testing"
)

// ChromiumPath finds the browser of the real-browser tests: $LC_CHROMIUM,
// else the usual names on PATH; "" when there is none.
func ChromiumPath() string {
	if p := os.Getenv("LC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Chromium returns chromium's path for the real-browser test named by
// what, or skips it loudly: under CI (CI=true), where it must run, a
// missing chromium fails it. -short skips it too, outside CI.
func Chromium(t testing.TB, what string) string {
	t.Helper()
	chrome := ChromiumPath()
	if chrome == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed: CI must run the real-browser tests (apt-get install chromium)")
		}
		t.Skipf("SKIPPED: chromium not found, so %s did not run; install the chromium package or set LC_CHROMIUM", what)
	}
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skipf("SKIPPED: -short, %s did not run", what)
	}
	return chrome
}
