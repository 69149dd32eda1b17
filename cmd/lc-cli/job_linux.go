package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// job is the command run under a lock, in a process group of its own: a
// signal passed on reaches everything it started (sh -c 'a; b' included),
// and nothing else in lc-cli's own group (the calling script, a pipeline)
// is touched.
//
// Its parent is not lc-cli but a guard (guard_linux.go): lc-cli run again
// in a hidden mode, which outlives lc-cli. If lc-cli dies without passing
// anything on (SIGKILL, the OOM killer, a crash), the guard ends the
// command and every process it started — in its group or not, in its
// cgroup where the machine gives one — well before the server releases
// the key one TTL later: the key is never free while one of them runs.
//
// When lc-cli runs in the foreground of a terminal, the command's group is
// made the terminal's foreground group, as a shell does for a job: Ctrl-C
// and Ctrl-Z then reach the command once, directly, not twice. When the
// command stops on a terminal (Ctrl-Z, or reading it from the background),
// lc-cli stops too, so that the shell's fg and bg resume both.
type job struct {
	guard *exec.Cmd
	// events are the guard's reports (guard_linux.go).
	events *bufio.Reader
	// life is the write end of the pipe whose EOF tells the guard that
	// lc-cli is gone; it is never written, and closed only by the exit
	// (or the garbage collector, once the command has ended).
	life *os.File
	pgid int
	// cgroup is the command's cgroup directory, "" when it has none.
	cgroup string
	// tty is a descriptor of lc-cli's controlling terminal, -1 when it
	// has none among stdin, stdout and stderr.
	tty int
}

// startError is a command that could not be started.
type startError struct {
	code int // exitCannotRun or exitNotFound
	msg  string
}

func (e *startError) Error() string { return e.msg }

// startJob starts the guard, which starts cmd (its Args, Env and standard
// files); ttl is the TTL of the session holding the key.
func startJob(cmd *exec.Cmd, ttl time.Duration) (*job, error) {
	j := &job{tty: -1}
	j.tty, _ = controllingTTY()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("guard pipe: %w", err)
	}
	j.life = lifeW
	evR, evW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, fmt.Errorf("guard pipe: %w", err)
	}
	args := append([]string{os.Args[0], guardArg, strconv.FormatInt(ttl.Milliseconds(), 10), "--"}, cmd.Args...)
	// /proc/self/exe: this very binary, even if a newer one replaced it
	// on disk meanwhile.
	j.guard = &exec.Cmd{Path: "/proc/self/exe", Args: args, Env: cmd.Env,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr,
		ExtraFiles: []*os.File{lifeR, evW}} // fds 3 and 4: guardLifeFD, guardEventsFD
	err = j.guard.Start()
	lifeR.Close()
	evW.Close()
	if err != nil {
		evR.Close()
		lifeW.Close()
		return nil, fmt.Errorf("start the command's guard: %w", err)
	}
	j.events = bufio.NewReader(evR)
	ev, arg, err := j.next()
	switch {
	case err != nil:
		j.reapGuard()
		return nil, err
	case ev == "error":
		j.reapGuard()
		code, msg, _ := strings.Cut(arg, " ")
		se := &startError{code: exitCannotRun, msg: msg}
		if n, err := strconv.Atoi(code); err == nil {
			se.code = n
		}
		return nil, se
	case ev != "started":
		j.reapGuard()
		return nil, fmt.Errorf("the command's guard said %q, want started", ev)
	}
	pid, cg, _ := strings.Cut(arg, " ")
	if j.pgid, err = strconv.Atoi(pid); err != nil || j.pgid <= 0 {
		j.killGroup()
		return nil, fmt.Errorf("the command's guard said started %q", arg)
	}
	if cg != "-" {
		j.cgroup = cg
	}
	return j, nil
}

// next reads the guard's next event: its word and the rest of the line.
func (j *job) next() (ev, arg string, err error) {
	line, err := j.events.ReadString('\n')
	if err != nil {
		return "", "", errors.New("the command's guard ended unexpectedly")
	}
	ev, arg, _ = strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	return ev, arg, nil
}

// reapGuard waits for the guard to exit; it does once it has reported the
// command's end.
func (j *job) reapGuard() {
	_ = j.guard.Wait()
}

// killGroup kills what is left of the command after its guard ended
// unexpectedly: its group, and its cgroup where it has one (orphans
// adopted by the guard went to init with it).
func (j *job) killGroup() {
	if j.pgid > 0 {
		_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
	}
	if j.cgroup != "" {
		_ = os.WriteFile(j.cgroup+"/cgroup.kill", []byte("1"), 0)
	}
	j.reapGuard()
}

// controllingTTY returns a descriptor among stdin, stdout and stderr that
// is lc-cli's controlling terminal (-1 when none is), and whether lc-cli's
// group is that terminal's foreground group.
func controllingTTY() (fd int, foreground bool) {
	for _, f := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		fd := int(f.Fd())
		pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		if err != nil {
			continue // not lc-cli's controlling terminal
		}
		return fd, pg == unix.Getpgrp()
	}
	return -1, false
}

// foregroundOn reports whether fd is a terminal whose foreground process
// group is lc-cli's.
func foregroundOn(fd int) bool {
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// signal passes sig on to the command's process group. The group may be
// gone already: then there is nobody to tell.
func (j *job) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok {
		_ = syscall.Kill(-j.pgid, s)
	}
}

// wait waits for the command to end and returns its status as a shell
// reports it (128+n for signal n). When the command is stopped from the
// terminal (Ctrl-Z), lc-cli stops too, so that the shell sees its job
// stopped and takes the terminal back; on fg or bg both go on.
func (j *job) wait() (int, error) {
	// The life pipe's finalizer must not close it while the command runs.
	defer runtime.KeepAlive(j.life)
	for {
		ev, arg, err := j.next()
		switch {
		case err != nil:
			j.takeTerminal()
			j.killGroup()
			return exitCannotRun, fmt.Errorf("%w; its process group was killed", err)
		case ev == "exit":
			j.takeTerminal()
			j.reapGuard()
			code, err := strconv.Atoi(arg)
			if err != nil {
				return exitCannotRun, fmt.Errorf("the command's guard said exit %q", arg)
			}
			return code, nil
		case ev == "stopped" && j.tty >= 0:
			j.suspend()
		}
	}
}

// suspend stops lc-cli after the command was stopped, then resumes the
// command when lc-cli is continued.
func (j *job) suspend() {
	j.takeTerminal()
	// kill returns before the stop takes hold of every thread: wait for
	// the SIGCONT that ends it, not for kill.
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(syscall.Getpid(), syscall.SIGSTOP)
	<-cont
	// Continued (fg or bg). In the foreground again: hand the terminal
	// back to the command.
	if foregroundOn(j.tty) {
		_ = unix.IoctlSetPointerInt(j.tty, unix.TIOCSPGRP, j.pgid)
	}
	_ = syscall.Kill(-j.pgid, syscall.SIGCONT)
}

// takeTerminal makes lc-cli's group the terminal's foreground group again
// if the command's group still is, so that whoever runs lc-cli (a shell, a
// script) can use the terminal after it.
func (j *job) takeTerminal() {
	if j.tty < 0 {
		return
	}
	if pg, err := unix.IoctlGetInt(j.tty, unix.TIOCGPGRP); err != nil || pg != j.pgid {
		return
	}
	// A background group may set the foreground group only while it
	// ignores SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(j.tty, unix.TIOCSPGRP, unix.Getpgrp())
}
