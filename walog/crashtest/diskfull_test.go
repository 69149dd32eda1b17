package crashtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/locking-center/locking-center/client/protocol"
)

// mountTmpfs mounts a tmpfs of size bytes on a new folder and unmounts it
// when the test ends, whatever the outcome. It needs root (CI runs as
// root); without it, or where mounting is not allowed, the test skips
// saying why.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs the tests as root)")
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("mount -t tmpfs failed (no CAP_SYS_ADMIN here?): %v: %s", err, out)
	}
	t.Cleanup(func() { // registered after TempDir's, so it runs before the folder is removed
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// remountTmpfs changes the size of the tmpfs at dir.
func remountTmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", size), dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s: %v: %s", dir, err, out)
	}
}

// TestBinaryDiskFull runs the real binary with its log on a 128 KiB tmpfs
// and takes keys until the disk is full: the first grant that cannot be
// written is answered '-' and every one after it too (the log fails until
// restart, so nothing is acknowledged that is not on disk); after a
// SIGKILL, room made and a restart, every key acknowledged is held and new
// grants are made.
func TestBinaryDiskFull(t *testing.T) {
	dir := mountTmpfs(t, 128<<10)
	dataPath := filepath.Join(dir, "locks.wal")
	srv := start(t, dataPath)
	defer func() {
		select {
		case <-srv.exited:
		default:
			srv.kill()
		}
	}()
	source := strings.Repeat("s", 127)
	key := func(i int) string { return fmt.Sprintf("%0120d", i) } // long keys fill it quickly
	var acked []string
	refused := -1
	for i := 0; i < 5000 && refused < 0; i++ {
		a, err := v1Ask(srv.addr, protocol.Frame{Action: protocol.TryLock, Key: key(i), Source: source}, 0)
		if err != nil {
			t.Fatalf("trylock %d: %v", i, err)
		}
		switch a {
		case protocol.AnswerOK:
			acked = append(acked, key(i))
		case protocol.AnswerFail:
			refused = i
		default:
			t.Fatalf("trylock %d of a new key answered %q", i, a)
		}
	}
	if refused < 0 {
		t.Fatalf("5000 grants fitted on a 128 KiB tmpfs: the disk never filled")
	}
	// The log failed: everything is refused now, even an unlock (its
	// record could not be written either), and nothing is granted.
	for _, f := range []protocol.Frame{
		{Action: protocol.TryLock, Key: "after-full", Source: "t"},
		{Action: protocol.Lock, Key: "after-full-2", Source: "t"},
		{Action: protocol.Unlock, Key: acked[0], Source: "t"},
	} {
		a, err := v1Ask(srv.addr, f, 0)
		if err != nil || a != protocol.AnswerFail {
			t.Errorf("%v %q on a full disk: %q, %v; want '-'", f.Action, f.Key, a, err)
		}
	}
	srv.kill() // its output is all read once it has exited
	if !strings.Contains(srv.out.String(), "no space left on device") {
		t.Errorf("the server did not log ENOSPC:\n%s", srv.out)
	}

	remountTmpfs(t, dir, 1<<20)
	srv = start(t, dataPath)
	for _, k := range acked {
		a, err := v1Ask(srv.addr, protocol.Frame{Action: protocol.TryLock, Key: k, Source: "t"}, 0)
		if err != nil || a != protocol.AnswerLocked {
			t.Fatalf("%q was acknowledged before the disk filled, but after restart TryLock gave %q, %v", k, a, err)
		}
	}
	if a, err := v1Ask(srv.addr, protocol.Frame{Action: protocol.TryLock, Key: "after-restart", Source: "t"}, 0); err != nil || a != protocol.AnswerOK {
		t.Fatalf("a new grant after room was made: %q, %v", a, err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-srv.exited
	var ee *exec.ExitError
	if srv.err != nil && !errors.As(srv.err, &ee) {
		t.Fatal(srv.err)
	}
	t.Logf("%d grants acknowledged on a 128 KiB tmpfs before the first ENOSPC ('-' to grant %d); all held after the restart", len(acked), refused)
}
