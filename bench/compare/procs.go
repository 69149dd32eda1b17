package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one server process this benchmark started. Its owner stops it by
// PID (stop), never by name.
type proc struct {
	name    string
	cmd     *exec.Cmd
	stopSig syscall.Signal // the signal that makes it shut down cleanly
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status; read after done
}

// startProc starts name with its output in logPath. The process gets
// SIGKILL if this benchmark dies without stopping it (Pdeathsig), so that a
// crash of the benchmark never leaves servers behind.
func startProc(name, logPath string, stopSig syscall.Signal, cred *syscall.Credential, dir string, env []string, bin string, args ...string) (*proc, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, stopSig: stopSig, logPath: logPath, done: make(chan struct{})}
	// The waiter goroutine ends when the process does; stop waits for it.
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	slog.Info("started", "system", name, "pid", cmd.Process.Pid)
	return p, nil
}

// exited reports whether the process has ended already.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop asks the process to shut down, by its PID, and kills it if it has
// not within 15 s.
func (p *proc) stop() error {
	if p.exited() {
		return fmt.Errorf("%s had exited already (%v); its log: %s", p.name, p.err, p.logPath)
	}
	if err := p.cmd.Process.Signal(p.stopSig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	slog.Warn("kill: did not stop within 15 s", "system", p.name, "pid", p.cmd.Process.Pid)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.done
	return nil
}

// logTail returns the last lines of the process's log, for error messages.
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-8):], "\n")
}

// freePort returns a loopback port nobody listens on now. Another program
// could take it before the server does; the server then fails to start and
// says so.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady calls ready until it succeeds, the process exits, or 60 s pass.
func waitReady(ctx context.Context, p *proc, ready func(context.Context) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(tctx)
		cancel()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited while starting (%v):\n%s", p.name, p.err, p.logTail())
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after 60 s: %w\n%s", p.name, err, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dialReady succeeds once something accepts connections on addr.
func dialReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// postgresBin finds the folder of PostgreSQL's server binaries, which
// Debian keeps out of PATH.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("postgres not found (run install.sh)")
}

// postgresUser returns the credential PostgreSQL runs under: it refuses to
// run as root. Debian's package creates the user postgres.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("postgres runs as the user postgres, which is missing (install the postgresql package): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user postgres: gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// versionOf runs a program's version command and returns its first line.
func versionOf(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	line, _, _ := bytes.Cut(bytes.TrimSpace(out), []byte("\n"))
	return string(line)
}
