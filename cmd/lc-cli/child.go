package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"time"

	"github.com/locking-center/locking-center/client"
)

// Release retries: the server may be restarting (a deploy, a failover)
// just as the command ends. Five attempts, 200ms doubling, cover about
// three seconds of absence before lc-cli gives up and says so.
const (
	releaseAttempts = 5
	releaseBackoff  = 200 * time.Millisecond
	releaseTimeout  = 5 * time.Second // per attempt
)

// runLocked runs argv while key is held, passes the forwarded signals on to
// it, releases key when it ends and returns its exit status.
func (a *app) runLocked(c *client.Client, sigs <-chan os.Signal, key string, argv []string) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "LC_KEY="+key, "LC_ADDRESS="+a.address)

	j, err := startJob(cmd)
	if err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		fmt.Fprintf(a.stderr, "lc-cli: cannot run %s: %s\n", printable(argv[0]), rootCause(err))
		a.releaseOrSay(c, key)
		return code, nil
	}

	// The forwarder ends when the command has been waited for.
	waited := make(chan struct{})
	forwarderDone := make(chan struct{})
	go func() {
		defer close(forwarderDone)
		for {
			select {
			case sig := <-sigs:
				j.signal(sig)
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
	a.releaseOrSay(c, key)
	return code, nil
}

// releaseOrSay releases key, retrying while the server is unreachable, and
// prints one line on stderr when it cannot. It reports whether the key was
// released.
func (a *app) releaseOrSay(c *client.Client, key string) bool {
	err := release(c, key, releaseAttempts, releaseBackoff)
	switch {
	case err == nil:
		return true
	case errors.Is(err, client.ErrRefused):
		fmt.Fprintf(a.stderr, "lc-cli: unlock %s: the key was no longer held (reset while the command ran?)\n", printable(key))
	default:
		fmt.Fprintf(a.stderr, "lc-cli: could not release %s at %s after %d attempts: %s; it stays held until 'lc-cli unlock %s' or a reset\n",
			printable(key), a.address, releaseAttempts, rootCause(err), printable(key))
	}
	return false
}

// release unlocks key, retrying with a doubling back-off as long as the
// server is unreachable.
func release(c *client.Client, key string, attempts int, backoff time.Duration) error {
	for i := 1; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		err := c.Unlock(ctx, key)
		cancel()
		retry := errors.Is(err, client.ErrUnreachable) || errors.Is(err, context.DeadlineExceeded)
		if err == nil || !retry || i >= attempts {
			return err
		}
		time.Sleep(backoff)
		backoff *= 2
	}
}
