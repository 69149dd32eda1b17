package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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

// The guard is lc-cli run again in a hidden mode (guardArg) as the parent
// of the command. It exists for one case: lc-cli dying while the command
// runs (SIGKILL, the OOM killer, a crash). The server then releases the
// key one TTL after lc-cli's last frame; the guard outlives lc-cli and
// must have ended every process of the command before that.
//
//	lc-cli ──life pipe──▶ guard ──▶ CMD ──▶ CMD's children...
//	lc-cli ◀─events pipe── guard
//
// Only lc-cli holds the write end of the life pipe: it reads EOF the moment
// lc-cli is gone, however it went. The guard is a child subreaper, so any
// process of the command whose parent dies is adopted by it, not by init:
// every process the command started stays a descendant of the guard, in
// its process group or not. Where the machine gives a writable cgroup v2,
// the command also starts in a cgroup of its own (cloned straight into
// it), which cgroup.kill ends at once, forks in flight included.
//
// On EOF the guard sends SIGTERM to all of them, waits a grace of a tenth
// of the TTL (at most a second), sends SIGKILL until none is left, removes
// the cgroup and exits. The client pings every third of the TTL, so at
// least two thirds of it are left when lc-cli dies: the grace and the kill
// fit well inside.
//
// While lc-cli lives, the guard reports to it on the events pipe, one line
// each: "started PID CGROUP" (CGROUP "-" when none), "error CODE MESSAGE"
// when the command could not run, "stopped" when the command stops, and
// "exit STATUS" (128+n for signal n) when it ends; the guard then exits too.
// lc-cli does everything else as it would for a child of its own: it
// signals the command's process group and hands the terminal over.
const guardArg = "__guard"

// noCgroupEnv, set to 1, makes the guard use no cgroup: the subreaper
// alone. It is there to test that path on machines that have cgroups.
const noCgroupEnv = "LC_CLI_NO_CGROUP"

// The guard's descriptors, passed by lc-cli as ExtraFiles.
const (
	guardLifeFD   = 3
	guardEventsFD = 4
)

// guardGrace is how long the guard waits after SIGTERM before SIGKILL.
func guardGrace(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	return min(ttl/10, time.Second)
}

// guardKillLimit bounds the guard's SIGKILL rounds: past it, whatever is
// left cannot be killed (stuck in the kernel) and the guard says so.
const guardKillLimit = 30 * time.Second

// runAsGuard runs the guard when args (os.Args) ask for it; ok is false
// otherwise.
func runAsGuard(args []string) (code int, ok bool) {
	if len(args) < 2 || args[1] != guardArg {
		return 0, false
	}
	return runGuard(args[2:]), true
}

// guard is the state of the guard process.
type guard struct {
	events *os.File
	name   string // the command's name, for the one line on stderr
	pgid   int
	cg     *cgroup // nil when the command has no cgroup of its own
}

// runGuard runs the guard: args are the TTL in milliseconds, "--" and the
// command. It returns the guard's exit status (lc-cli reads the command's
// from the events pipe, not from it).
func runGuard(args []string) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(os.Stderr, "lc-cli: "+guardArg+" is lc-cli's own, not a command")
		return exitUsage
	}
	ttlMS, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lc-cli: %s: bad TTL %q\n", guardArg, args[0])
		return exitUsage
	}
	argv := args[2:]
	// The pipes must reach neither the command nor anything it starts:
	// a copy of the life pipe's read end is harmless, but one of the
	// events pipe would keep lc-cli from ever seeing EOF.
	syscall.CloseOnExec(guardLifeFD)
	syscall.CloseOnExec(guardEventsFD)
	life := os.NewFile(guardLifeFD, "life")
	g := &guard{events: os.NewFile(guardEventsFD, "events"), name: argv[0]}

	// lc-cli passes these signals on to the command's group itself; the
	// guard must outlive them (a kill of every "lc-cli" by name, a
	// service manager's SIGTERM to all) to be there if lc-cli dies next.
	// Caught, not ignored: a caught signal is reset for the command at
	// exec, an ignored one would stay ignored in it. The channel is never
	// read; a full channel drops the signal.
	signal.Notify(make(chan os.Signal, 1), forwarded...)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		g.send("error %d cannot become the command's subreaper: %v", exitCannotRun, err)
		return exitCannotRun
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Pdeathsig: if the guard itself is killed, the command is told.
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// The guard is still in lc-cli's process group here: when that group
	// is the terminal's foreground, the command's group takes its place.
	if fd, fg := controllingTTY(); fg {
		attr.Foreground, attr.Ctty = true, fd
	}
	if os.Getenv(noCgroupEnv) != "1" {
		g.cg, _ = newCgroup() // none where the machine gives none
	}
	if g.cg != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, int(g.cg.fd.Fd())
	}
	cmd.SysProcAttr = attr
	// The parent-death signal fires when the thread that started the
	// child ends: keep this goroutine on its thread for good.
	runtime.LockOSThread()
	err = cmd.Start()
	if err != nil && g.cg != nil {
		// Maybe the cgroup refused the clone (an exec error comes back
		// the same way): once more without it. An exec that failed ran
		// nothing of the command, so trying twice is harmless.
		g.cg.remove()
		g.cg = nil
		attr.UseCgroupFD, attr.CgroupFD = false, 0
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = attr
		err = cmd.Start()
	}
	if err != nil {
		code, msg := startFailure(err)
		g.send("error %d %s", code, oneLine(msg))
		return code
	}
	pid := cmd.Process.Pid
	g.pgid = pid
	_ = cmd.Process.Release() // reaped below by wait4(-1), with the orphans
	// Leave lc-cli's group: a kill of that whole group (a CI runner's
	// kill -9 -PGID) must not take the guard with lc-cli.
	_ = unix.Setpgid(0, 0)
	// In a background group from here on, the guard must not be stopped
	// for writing its one line to the terminal. The command was exec'd
	// already: it keeps the default actions.
	signal.Ignore(syscall.SIGTTOU, syscall.SIGTTIN, syscall.SIGTSTP)
	cgName := "-"
	if g.cg != nil {
		cgName = g.cg.dir
	}
	g.send("started %d %s", pid, cgName)

	// The reaper owns wait4(-1): it reaps the command and every orphan
	// adopted meanwhile, reports the command's stops and end, and ends
	// when the guard has no child left.
	stopped := make(chan struct{}, 1)
	ended := make(chan int, 1)
	empty := make(chan struct{})
	go reap(pid, stopped, ended, empty)
	// The life watcher ends at EOF: when lc-cli is gone.
	lcGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, life)
		close(lcGone)
	}()

	for {
		select {
		case <-stopped:
			g.send("stopped")
		case status := <-ended:
			g.send("exit %d", status)
			select {
			case <-lcGone:
				// lc-cli died too: what the command left must not run
				// on after the key is released.
				g.stopAll(time.Duration(ttlMS)*time.Millisecond, empty)
			default:
				// The command ended; lc-cli releases the key. What it
				// left running in the background goes on as it would
				// without lc-cli, out of the guard's cgroup.
				if g.cg != nil {
					g.cg.release()
				}
			}
			return 0
		case <-lcGone:
			g.stopAll(time.Duration(ttlMS)*time.Millisecond, empty)
			fmt.Fprintf(os.Stderr, "lc-cli: lc-cli ended while %s ran: it and every process it started were stopped before the key's release\n",
				printable(g.name))
			return 0
		}
	}
}

// send writes one event line to lc-cli. An error means lc-cli is gone,
// which the life pipe tells too.
func (g *guard) send(format string, args ...any) {
	_, _ = fmt.Fprintf(g.events, format+"\n", args...)
}

// reap reaps every child of the guard until none is left (then it closes
// empty and returns). The command's stops go to stopped (one pending is
// enough: the receiver only needs to know it stopped), its end to ended.
func reap(pid int, stopped chan<- struct{}, ended chan<- int, empty chan<- struct{}) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil: // ECHILD: no child left
			close(empty)
			return
		case got != pid:
			// an orphan of the command, adopted and now reaped
		case ws.Exited():
			ended <- ws.ExitStatus()
		case ws.Signaled():
			ended <- 128 + int(ws.Signal())
		case ws.Stopped():
			select {
			case stopped <- struct{}{}:
			default:
			}
		}
	}
}

// stopAll ends every process of the command after lc-cli died: SIGTERM
// (and SIGCONT, for a stopped one) to all, then SIGKILL after the grace
// until none is left. It returns when the guard has no child and the
// cgroup no process, or when guardKillLimit has passed.
func (g *guard) stopAll(ttl time.Duration, empty <-chan struct{}) {
	g.signalAll(syscall.SIGTERM)
	g.signalAll(syscall.SIGCONT)
	grace := time.NewTimer(guardGrace(ttl))
	defer grace.Stop()
	select {
	case <-empty:
	case <-grace.C:
	}
	// Each round kills what the last one missed: a child forked
	// meanwhile is adopted by the guard when its parent dies, and the
	// next round, 10ms later, finds it. SIGKILL needs no more time than
	// the kernel's to end a process: the first round is almost always
	// the last.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.Now().Add(guardKillLimit)
	for {
		select {
		case <-empty:
			// No child left, so no descendant: the cgroup can only
			// hold what was moved into it from outside.
			if g.cg == nil || len(g.cg.procs()) == 0 {
				if g.cg != nil {
					g.cg.remove()
				}
				return
			}
		default:
		}
		if time.Now().After(limit) {
			fmt.Fprintf(os.Stderr, "lc-cli: processes of %s could not be killed within %v\n", printable(g.name), guardKillLimit)
			return
		}
		if g.cg != nil {
			g.cg.kill()
		}
		g.signalAll(syscall.SIGKILL)
		<-tick.C
	}
}

// signalAll sends sig to the command's process group, to every descendant
// of the guard and to every process in the command's cgroup.
func (g *guard) signalAll(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
	pids := descendants(os.Getpid())
	if g.cg != nil {
		pids = append(pids, g.cg.procs()...)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// descendants lists the processes below root in the process tree, read
// from /proc (the parent of each).
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentOf(pid); ppid > 0 {
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := children[root]
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// parentOf returns pid's parent, 0 when it cannot be read (it ended).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// cgroup is a cgroup v2 made for one command, a child of lc-cli's own.
type cgroup struct {
	dir    string
	parent string
	fd     *os.File // the directory, for CLONE_INTO_CGROUP
}

// newCgroup makes a cgroup for the command under the guard's own one. It
// fails where the machine gives no cgroup v2 the guard may write to.
func newCgroup() (*cgroup, error) {
	parent, err := ownCgroupDir()
	if err != nil {
		return nil, err
	}
	dir := fmt.Sprintf("%s/lc-cli-%d", parent, os.Getpid())
	err = os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrExist) {
		// Left by a guard that had this pid and could not clean up:
		// empty, or the rmdir fails and so does the Mkdir.
		_ = os.Remove(dir)
		err = os.Mkdir(dir, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &cgroup{dir: dir, parent: parent, fd: fd}, nil
}

// ownCgroupDir returns the directory of this process's cgroup v2, where
// a cgroup2 file system is mounted.
func ownCgroupDir() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var path string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path, found = p, true
		}
	}
	if !found {
		return "", errors.New("no cgroup v2 in /proc/self/cgroup")
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mi.Close()
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype ...
		f := strings.Fields(sc.Text())
		sep := -1
		for i, s := range f {
			if s == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		root, mount := unescapeMount(f[3]), unescapeMount(f[4])
		rel, ok := strings.CutPrefix(path, root)
		if !ok || (rel != "" && root != "/" && !strings.HasPrefix(rel, "/")) {
			continue // a bind mount of another part of the tree
		}
		return strings.TrimSuffix(mount+"/"+strings.TrimPrefix(rel, "/"), "/"), nil
	}
	return "", errors.New("no cgroup2 file system mounted")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procs lists the processes in the cgroup.
func (c *cgroup) procs() []int {
	b, err := os.ReadFile(c.dir + "/cgroup.procs")
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kill sends SIGKILL to every process in the cgroup at once, where the
// kernel has cgroup.kill (5.14 on); signalAll covers older kernels.
func (c *cgroup) kill() {
	_ = os.WriteFile(c.dir+"/cgroup.kill", []byte("1"), 0)
}

// release moves what is left in the cgroup to the parent cgroup and
// removes it: processes the command left running go on, outside it.
func (c *cgroup) release() {
	for range 100 {
		pids := c.procs()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = os.WriteFile(c.parent+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0)
		}
	}
	c.remove()
}

// remove removes the empty cgroup, waiting up to a second for the kernel
// to let go of the processes that just ended in it.
func (c *cgroup) remove() {
	_ = c.fd.Close()
	deadline := time.Now().Add(time.Second)
	for {
		err := os.Remove(c.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
