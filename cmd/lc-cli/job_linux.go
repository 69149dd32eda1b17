package main

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// job is the command run under a lock, in a process group of its own: a
// signal passed on reaches everything it started (sh -c 'a; b' included),
// so nothing is left running after it, and nothing else in lc-cli's own
// group (the calling script, a pipeline) is touched.
//
// When lc-cli runs in the foreground of a terminal, the command's group is
// made the terminal's foreground group, as a shell does for a job: Ctrl-C
// and Ctrl-Z then reach the command once, directly, not twice. When the
// command stops on a terminal (Ctrl-Z, or reading it from the background),
// lc-cli stops too, so that the shell's fg and bg resume both.
type job struct {
	cmd  *exec.Cmd
	pgid int
	// tty is a descriptor of lc-cli's controlling terminal, -1 when it
	// has none among stdin, stdout and stderr.
	tty int
}

func startJob(cmd *exec.Cmd) (*job, error) {
	j := &job{cmd: cmd, tty: -1}
	// Pdeathsig: if lc-cli dies without passing anything on (SIGKILL, a
	// crash), the kernel sends the command SIGTERM, so no orphan runs on.
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	for _, f := range []*os.File{os.Stdin, os.Stdout, os.Stderr} {
		fd := int(f.Fd())
		pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		if err != nil {
			continue // not lc-cli's controlling terminal
		}
		j.tty = fd
		if pg == unix.Getpgrp() {
			attr.Foreground, attr.Ctty = true, fd
		}
		break
	}
	cmd.SysProcAttr = attr
	// The parent-death signal fires when the thread that started the child
	// ends, not the process: keep this goroutine on its thread for good
	// (the thread ends with the process).
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	j.pgid = cmd.Process.Pid
	return j, nil
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
	pid := j.cmd.Process.Pid
	defer j.cmd.Process.Release() // reaped here, not by cmd.Wait
	for {
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(pid, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			j.takeTerminal()
			return exitCannotRun, err
		case ws.Exited():
			j.takeTerminal()
			return ws.ExitStatus(), nil
		case ws.Signaled():
			j.takeTerminal()
			return 128 + int(ws.Signal()), nil
		case ws.Stopped() && j.tty >= 0:
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
