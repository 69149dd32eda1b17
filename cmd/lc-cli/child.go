package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/client"
)

// Release retries: the server may be restarting (a deploy, a failover)
// just as the command ends. An Unlock that could not even connect is tried
// again — five attempts, 200ms doubling, cover about three seconds of
// absence; one whose frame was sent is never sent again: v1 has
// no owners, and a second Unlock could release whoever took the key since.
const (
	releaseAttempts = 5
	releaseBackoff  = 200 * time.Millisecond
	releaseTimeout  = 5 * time.Second // per attempt
)

// hold is how the key is held while the command runs.
type hold struct {
	// token is the grant's fencing token, passed as LC_FENCING_TOKEN.
	token uint64
	// ttl is the TTL of the session holding the key: if lc-cli dies, the
	// server releases the key that long after lc-cli's last frame.
	ttl time.Duration
	// lost is closed when the session holding the key ends without lc-cli
	// having asked for it.
	lost <-chan struct{}
	// lostWhy tells why, once lost is closed.
	lostWhy func() error
	// release gives the key back after the command ended; lostSaid tells
	// it that the loss of the hold was already reported.
	release func(lostSaid bool)
}

// runLocked runs argv while key is held, passes the forwarded signals on to
// it, releases key when it ends and returns its exit status. If the hold
// is lost meanwhile, it says so, sends the command SIGTERM and returns
// exitSessionLost once the command has ended.
func (a *app) runLocked(h hold, sigs <-chan os.Signal, key string, argv []string) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "LC_KEY="+key, "LC_ADDRESS="+a.address,
		"LC_FENCING_TOKEN="+strconv.FormatUint(h.token, 10))

	j, err := startJob(cmd, h.ttl)
	if err != nil {
		code, msg := startFailure(err)
		fmt.Fprintf(a.stderr, "lc-cli: cannot run %s: %s\n", printable(argv[0]), msg)
		h.release(false)
		return code, nil
	}

	// The forwarder ends when the command has been waited for.
	waited := make(chan struct{})
	forwarderDone := make(chan struct{})
	var lost bool // written by the forwarder, read after forwarderDone
	go func() {
		defer close(forwarderDone)
		lostc := h.lost
		for {
			select {
			case sig := <-sigs:
				j.signal(sig)
			case <-lostc:
				lost, lostc = true, nil
				fmt.Fprintf(a.stderr, "lc-cli: the session holding %s was lost (%s): %s no longer holds it; stopping it with SIGTERM\n",
					printable(key), lossReason(h.lostWhy()), printable(argv[0]))
				j.signal(syscall.SIGTERM)
			case <-waited:
				return
			}
		}
	}()
	code, werr := j.wait()
	close(waited)
	<-forwarderDone
	if werr != nil {
		fmt.Fprintf(a.stderr, "lc-cli: waiting for %s: %s\n", printable(argv[0]), oneLine(werr.Error()))
	}
	// Signals that arrive during the release stay caught (sigs is still
	// registered), so that lc-cli does not die with the key held.
	h.release(lost)
	if lost {
		return exitSessionLost, nil
	}
	return code, nil
}

// startFailure is the exit status and the reason for a command that could
// not be started: 127 when it was not found, 126 otherwise, as the shells.
func startFailure(err error) (code int, msg string) {
	var se *startError
	switch {
	case errors.As(err, &se):
		return se.code, se.msg
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return exitNotFound, rootCause(err)
	}
	return exitCannotRun, rootCause(err)
}

// releaseOrSay releases a v1 hold of key and prints one line on stderr
// when it cannot. It reports whether the key was released.
func (a *app) releaseOrSay(c *client.Client, key string) bool {
	err := release(c, key, releaseAttempts, releaseBackoff)
	switch {
	case err == nil:
		return true
	case errors.Is(err, client.ErrOutcomeUnknown):
		fmt.Fprintf(a.stderr, "lc-cli: unlock %s: sent, but the server at %s did not answer (%s): %s may or may not be released; not sent again, as a second unlock could release whoever holds it now (see 'lc-cli keys')\n",
			printable(key), a.address, rootCause(err), printable(key))
	case errors.Is(err, client.ErrRefused):
		fmt.Fprintf(a.stderr, "lc-cli: unlock %s: the key was no longer held (reset meanwhile?)\n", printable(key))
	default:
		fmt.Fprintf(a.stderr, "lc-cli: could not release %s at %s after %d attempts: %s; it stays held until 'lc-cli unlock %s' or a reset\n",
			printable(key), a.address, releaseAttempts, rootCause(err), printable(key))
	}
	return false
}

// release unlocks key, trying again with a doubling back-off only while
// the Unlock could not be sent at all.
func release(c *client.Client, key string, attempts int, backoff time.Duration) error {
	for i := 1; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := c.Unlock(ctx, key)
		cancel()
		notSent := (errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded)) &&
			!errors.Is(err, client.ErrOutcomeUnknown)
		if err == nil || !notSent || i >= attempts {
			return err
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}
