//go:build !linux

package main

import (
	"os"
	"os/exec"
	"time"
)

// isTerminal is false off Linux: the status line is not drawn there.
func isTerminal(*os.File) bool { return false }

func termWidth(*os.File) int { return 80 }

// job is the command run under a lock. Off Linux it shares lc-cli's
// process group and signals are passed on to the command alone.
type job struct{ cmd *exec.Cmd }

// startJob starts cmd. Off Linux there is no guard: if lc-cli dies, the
// command runs on (ttl is unused).
func startJob(cmd *exec.Cmd, _ time.Duration) (*job, error) { return &job{cmd: cmd}, cmd.Start() }

// startError is never made off Linux (see job_linux.go).
type startError struct {
	code int
	msg  string
}

func (e *startError) Error() string { return e.msg }

// runAsGuard is false off Linux: there is no guard mode.
func runAsGuard([]string) (int, bool) { return 0, false }

func (j *job) signal(sig os.Signal) { _ = j.cmd.Process.Signal(sig) }

// wait returns the command's status (128+n for signal n where known).
func (j *job) wait() (int, error) {
	err := j.cmd.Wait()
	if j.cmd.ProcessState == nil {
		return exitCannotRun, err
	}
	if code := j.cmd.ProcessState.ExitCode(); code >= 0 {
		return code, nil
	}
	return 128 + 15, nil
}
