//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the test reads the master, lc-cli
// writes its stderr to the slave.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		t.Fatalf("pty number: %v", err)
	}
	// A wide window, so that the whole status line fits.
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 200}); err != nil {
		unix.Close(fd)
		t.Fatalf("set pty size: %v", err)
	}
	// Non-blocking, so that the runtime poller serves it and Close wakes
	// a pending Read.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("open pty slave: %v", err)
	}
	return master, slave
}

// ptyReader collects what arrives on a pty master.
type ptyReader struct {
	done chan struct{}
	mu   sync.Mutex // guards buf
	buf  bytes.Buffer
}

func readPTY(master *os.File) *ptyReader {
	r := &ptyReader{done: make(chan struct{})}
	// Ends when the master is closed or every slave is (EIO).
	go func() {
		defer close(r.done)
		b := make([]byte, 4096)
		for {
			n, err := master.Read(b)
			r.mu.Lock()
			r.buf.Write(b[:n])
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *ptyReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

func TestStatusLineOnATerminal(t *testing.T) {
	s := startServer(t)
	s.hold(t, "tty/demo", "LC_SOURCE=alice")

	// One waiter ahead, so the line can say "1 ahead of you".
	first, _, _ := cli(s.env("LC_SOURCE=bob"), "lock", "tty/demo", "--", "true")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first waiter to queue", func() bool { return s.waiters(t, "tty/demo") == 1 })

	master, slave := openPTY(t)
	r := readPTY(master)
	defer func() { master.Close(); <-r.done }()
	cmd, stdout, _ := cli(s.env("LC_SOURCE=carol"), "lock", "tty/demo", "--", "echo", "ran")
	cmd.Stderr = slave
	err := cmd.Start()
	slave.Close()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the status line", func() bool {
		return strings.Contains(r.String(), "held by alice") && strings.Contains(r.String(), "1 ahead of you")
	}, func() string { return fmt.Sprintf("pty got %q", r.String()) })
	if out := r.String(); !strings.HasPrefix(out, "\r\x1b[Klc-cli: waiting") || strings.Contains(out, "\n") {
		t.Errorf("status line %q: want it drawn in place (\\r, erase line), without new lines", out)
	}
	// The first waiter gets it, runs true and hands it on to carol.
	if code, _, e := run(t, s.env(), "unlock", "tty/demo"); code != 0 {
		t.Fatalf("unlock: %d %s", code, e)
	}
	if code := wait(t, first); code != 0 {
		t.Fatalf("first waiter: %d", code)
	}
	if code := wait(t, cmd); code != 0 {
		t.Fatalf("second waiter: %d", code)
	}
	<-r.done // lc-cli has exited: every slave is closed
	out := r.String()
	if !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("the status line was not erased at the end: %q", out)
	}
	if stdout.String() != "ran\n" {
		t.Errorf("command output %q", stdout)
	}
	if !s.free(t, "tty/demo") {
		t.Error("key still held")
	}
}

func TestNoStatusLineWithoutTerminal(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "notty", "LC_SOURCE=alice")
	cmd, _, stderr := cli(s.env(), "lock", "notty", "--", "true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiter to queue", func() bool { return s.waiters(t, "notty") == 1 })
	// On a terminal the line would be drawn within statusDelay and then
	// every statusEvery: give it that time to (wrongly) appear.
	time.Sleep(statusDelay + statusEvery + 200*time.Millisecond)
	if code, _, e := run(t, s.env(), "unlock", "notty"); code != 0 {
		t.Fatalf("unlock: %d %s", code, e)
	}
	if code := wait(t, cmd); code != 0 {
		t.Fatalf("waiter: %d", code)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr is not a terminal, yet lc-cli wrote %q", stderr)
	}
}

// startOnTerminal starts lc-cli as a shell starts a job: in a session whose
// controlling terminal is a fresh pty, with the pty as stdin, stdout and
// stderr. It returns the pty master's reader and a writer for typing.
func startOnTerminal(t *testing.T, env []string, args ...string) (*exec.Cmd, *ptyReader, *os.File) {
	t.Helper()
	master, slave := openPTY(t)
	r := readPTY(master)
	t.Cleanup(func() { master.Close(); <-r.done })
	cmd := exec.Command(cliBin, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err := cmd.Start()
	slave.Close()
	if err != nil {
		t.Fatal(err)
	}
	return cmd, r, master
}

// procState returns the state letter of pid (R, S, T, Z...), "" when gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	var state string
	fmt.Sscan(string(b[bytes.LastIndexByte(b, ')')+1:]), &state)
	return state
}

func TestCommandOwnsTheTerminal(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ready := filepath.Join(t.TempDir(), "ready")

	// The command reads the terminal: it can only if its group is the
	// terminal's foreground group (else SIGTTIN stops it).
	cmd, r, tty := startOnTerminal(t, s.env(), "lock", "tty/read", "--", "sh", "-c",
		`echo $$ > "$1"; read line; echo "got $line"; exit 4`, "sh", ready)
	eventually(t, "the command to start", func() bool { _, err := os.Stat(ready); return err == nil })
	fmt.Fprint(tty, "hello\n")
	if code := wait(t, cmd); code != 4 {
		t.Errorf("status %d, want 4; terminal %q", code, r)
	}
	eventually(t, "the command's output", func() bool { return strings.Contains(r.String(), "got hello") },
		func() string { return fmt.Sprintf("terminal %q", r) })

	// Ctrl-C reaches the command from the terminal.
	os.Remove(ready)
	cmd, r, tty = startOnTerminal(t, s.env(), "lock", "tty/read", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 60`, "sh", ready)
	eventually(t, "the command to start", func() bool { _, err := os.Stat(ready); return err == nil })
	tty.Write([]byte{3}) // ^C
	if code := wait(t, cmd); code != 130 {
		t.Errorf("Ctrl-C: status %d, want 130; terminal %q", code, r)
	}

	// Ctrl-Z stops the command and lc-cli with it, as one job; SIGCONT to
	// lc-cli (what fg does) resumes both with the command in front.
	os.Remove(ready)
	cmd, r, tty = startOnTerminal(t, s.env(), "lock", "tty/read", "--", "sh", "-c", `echo $$ > "$1"; read line; exit 5`, "sh", ready)
	var pid int
	eventually(t, "the command to start", func() bool {
		b, _ := os.ReadFile(ready)
		_, err := fmt.Sscan(string(b), &pid)
		return err == nil
	})
	tty.Write([]byte{26}) // ^Z
	eventually(t, "lc-cli and the command to stop", func() bool {
		return procState(cmd.Process.Pid) == "T" && procState(pid) == "T"
	}, func() string {
		return fmt.Sprintf("lc-cli %q, command %q, terminal %q", procState(cmd.Process.Pid), procState(pid), r)
	})
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the command to go on", func() bool { return procState(pid) != "T" })
	fmt.Fprint(tty, "go\n")
	if code := wait(t, cmd); code != 5 {
		t.Errorf("after ^Z and fg: status %d, want 5; terminal %q", code, r)
	}
	if !s.free(t, "tty/read") {
		t.Error("key still held")
	}
}

// TestTryLockBusyOnATerminal: a trylock that finds the key held says so,
// naming the holder, in one line — on a terminal only (scripts get the
// exit status alone, see TestTryLockCommandThroughASession).
func TestTryLockBusyOnATerminal(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.hold(t, "tty/busy", "LC_SOURCE=alice")
	for _, args := range [][]string{{"trylock", "tty/busy"}, {"trylock", "tty/busy", "--", "true"}} {
		master, slave := openPTY(t)
		r := readPTY(master)
		cmd, _, _ := cli(s.env(), args...)
		cmd.Stderr = slave
		err := cmd.Start()
		slave.Close()
		if err != nil {
			t.Fatal(err)
		}
		if code := wait(t, cmd); code != exitNotAcquired {
			t.Errorf("%v on a busy key: status %d, want 1", args, code)
		}
		<-r.done
		master.Close()
		if out := r.String(); !strings.Contains(out, "not acquired: held by alice for") || strings.Count(out, "\n") != 1 {
			t.Errorf("%v: terminal got %q, want one line naming the holder", args, out)
		}
	}
}
