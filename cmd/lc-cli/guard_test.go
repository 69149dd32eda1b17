//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone reports whether pid has ended: no such process, or a zombie (it
// has run its last instruction; only its parent's wait is left).
func gone(pid int) bool {
	s := procState(pid)
	return s == "" || s == "Z"
}

// readPID waits for the file at path to hold a pid and returns it.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, "pid file "+filepath.Base(path), func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		_, err = fmt.Sscan(string(b), &pid)
		return err == nil && pid > 0
	})
	return pid
}

// pgrpOf returns the process group of pid, 0 when it cannot be read.
func pgrpOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	var state string
	var ppid, pgrp int
	i := strings.LastIndexByte(string(b), ')')
	if _, err := fmt.Sscan(string(b[i+1:]), &state, &ppid, &pgrp); err != nil {
		return 0
	}
	return pgrp
}

// TestKilledCLIStopsEveryProcess: lc-cli killed with SIGKILL while CMD
// and a grandchild of it run. Every process of CMD — its own group, a
// grandchild that left the group with setsid, one orphaned to whoever
// adopts it — has ended by the time the server reports the key free:
// the key is never free while one of them still runs.
func TestKilledCLIStopsEveryProcess(t *testing.T) {
	t.Parallel()
	scripts := map[string]string{
		// sleep stays in sh's process group.
		"group": `sleep 120 & echo $! > "$1/grandchild.tmp"; mv "$1/grandchild.tmp" "$1/grandchild"; echo $$ > "$1/child"; wait`,
		// setsid (not a group leader) calls setsid() and execs sleep:
		// it leaves the group and the session.
		"setsid": `setsid sleep 120 & echo $! > "$1/grandchild.tmp"; mv "$1/grandchild.tmp" "$1/grandchild"; echo $$ > "$1/child"; wait`,
		// The subshell ends at once: its setsid'd sleep is an orphan,
		// adopted by whoever takes orphans in.
		// sh and sleep ignore SIGTERM: only the SIGKILL after the grace
		// ends them.
		"ignores-term": `trap '' TERM; sleep 120 & echo $! > "$1/grandchild.tmp"; mv "$1/grandchild.tmp" "$1/grandchild"; echo $$ > "$1/child"; wait`,
		"orphan":       `(setsid sleep 120 & echo $! > "$1/grandchild.tmp"; mv "$1/grandchild.tmp" "$1/grandchild"); echo $$ > "$1/child"; exec sleep 120`,
	}
	type variant struct {
		name, script string
		noCgroup     bool // force the fallback: the guard's subreaper alone
		groupKill    bool // SIGKILL to lc-cli's whole process group, not its pid
	}
	var variants []variant
	for _, noCgroup := range []bool{false, true} {
		for _, kind := range []string{"group", "setsid", "orphan", "ignores-term"} {
			variants = append(variants, variant{name: kind, script: scripts[kind], noCgroup: noCgroup})
		}
		variants = append(variants, variant{name: "setsid-groupkill", script: scripts["setsid"], noCgroup: noCgroup, groupKill: true})
	}
	cgroups := machineGivesCgroup(t)
	s := startServer(t)
	for _, v := range variants {
		name := v.name
		if v.noCgroup {
			name = "nocgroup/" + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			key := "guard/" + name
			dir := t.TempDir()
			env := s.env()
			if v.noCgroup {
				env = append(env, "LC_CLI_NO_CGROUP=1")
			}
			cmd, _, _ := cli(env, "lock", key, "--ttl", "1s", "--", "sh", "-c", v.script, "sh", dir)
			// A file, not a pipe: a process that outlives lc-cli must not
			// hold up the wait for it.
			errFile, err := os.Create(filepath.Join(dir, "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer errFile.Close()
			cmd.Stdout, cmd.Stderr = errFile, errFile
			stderr := func() string { b, _ := os.ReadFile(errFile.Name()); return string(b) }
			// A group of its own, so that the group kill reaches lc-cli
			// alone (and its guard, had it stayed in the group).
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			child := readPID(t, filepath.Join(dir, "child"))
			grandchild := readPID(t, filepath.Join(dir, "grandchild"))
			// Whatever the test finds, nothing it started runs on.
			t.Cleanup(func() {
				for _, pid := range []int{child, grandchild} {
					if !gone(pid) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			if v.name == "setsid" || v.name == "orphan" || v.name == "setsid-groupkill" {
				// $! is written before the grandchild's setsid() ran.
				eventually(t, "the grandchild to leave the command's group", func() bool {
					pg := pgrpOf(grandchild)
					return pg != 0 && pg != child
				})
			}
			s.heldBySession(t, key, s.key(t, key).Token)
			// The path under test is the one taken: a cgroup of the
			// command's own where the machine gives one, unless forced off.
			own, cg := cgroupOf(os.Getpid()), cgroupOf(grandchild)
			inOwn := cg != own && strings.HasPrefix(cg, strings.TrimSuffix(own, "/")+"/lc-cli-")
			if want := cgroups && !v.noCgroup; inOwn != want {
				t.Fatalf("grandchild in cgroup %q (the test's %q): in a cgroup of its own %v, want %v", cg, own, inOwn, want)
			}

			killed := time.Now()
			target := cmd.Process.Pid
			if v.groupKill {
				target = -target
			}
			if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			// Poll the key; the moment it is free, every process of the
			// command must have ended already.
			deadline := time.Now().Add(10 * time.Second)
			for s.key(t, key) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("key still held 10s after the kill; stderr %q", stderr())
				}
				time.Sleep(5 * time.Millisecond)
			}
			freed := time.Since(killed)
			for what, pid := range map[string]int{"the command": child, "its grandchild": grandchild} {
				if !gone(pid) {
					t.Errorf("%s (pid %d, state %s) still runs %v after the kill, when the key is already free; stderr %q",
						what, pid, procState(pid), freed, stderr())
				}
			}
			if inOwn {
				dir, err := ownCgroupDir()
				if err != nil {
					t.Fatal(err)
				}
				dir += strings.TrimPrefix(cg, own)
				eventually(t, "the command's cgroup to be removed", func() bool { _, err := os.Stat(dir); return err != nil })
			}
			if e := stderr(); !strings.Contains(e, "lc-cli ended while sh ran") {
				t.Errorf("stderr %q, want the guard's line", e)
			}
			if freed > 2*time.Second {
				t.Errorf("key freed %v after the kill, want within the TTL (1s) + 1s", freed)
			}
		})
	}
}

// machineGivesCgroup reports whether a process here may make a child
// cgroup v2 of its own, as the guard does.
func machineGivesCgroup(t *testing.T) bool {
	cg, err := newCgroup()
	if err != nil {
		t.Logf("no cgroup of its own for the command here (%v): the guard's subreaper alone is tested", err)
		return false
	}
	cg.remove()
	return true
}

// cgroupOf returns pid's cgroup v2 path ("0::" line), "" when unknown.
func cgroupOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

// TestLeftoverAfterTheCommandEnds: a process the command leaves running
// in the background when it ends normally goes on, as it would without
// lc-cli; the key is released when the command ends, and the command's
// cgroup, if it had one, is removed.
func TestLeftoverAfterTheCommandEnds(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	dir := t.TempDir()
	code, _, errOut := run(t, s.env(), "lock", "guard/leftover", "--", "sh", "-c",
		`sleep 120 >/dev/null 2>&1 & echo $! > "$1/leftover"`, "sh", dir)
	if code != 0 {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	pid := readPID(t, filepath.Join(dir, "leftover"))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if gone(pid) {
		t.Fatal("the leftover was stopped when the command ended")
	}
	if own, cg := cgroupOf(os.Getpid()), cgroupOf(pid); cg != own {
		t.Errorf("the leftover is in cgroup %q, want the test's own %q (the command's removed)", cg, own)
	}
	if !s.free(t, "guard/leftover") {
		t.Error("key still held after the command ended")
	}
}
