package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
)

// forwarded are the signals passed on to a command run under a lock, and
// the ones that make a waiting lc-cli leave the queue.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// catchSignals starts catching the forwarded signals; stop ends it.
func catchSignals() (<-chan os.Signal, func()) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	return sigs, func() { signal.Stop(sigs) }
}

// signalStatus is the exit status of a process ended by sig.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGTERM)
}

func (a *app) cmdLock(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("lock")
	var timeout, ttl durationFlag
	fs.Var(&timeout, "timeout", "give up waiting after D")
	fs.Var(&ttl, "ttl", "TTL of the session holding KEY for CMD")
	pos, child, sep, done, err := a.parse("lock", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	key, err := a.oneKey("lock", pos)
	if err != nil {
		return 0, err
	}
	if err := a.checkCommand("lock", sep, child, ttl.d); err != nil {
		return 0, err
	}

	sigs, stop := catchSignals()
	defer stop()
	if sep {
		return a.lockInSession(ctx, sigs, "lock", key, false, timeout.d, ttl.d, 0, child)
	}

	// Without a command: a v1 hold, which outlives lc-cli.
	c := a.client()
	sig, err := a.waitTurn(ctx, sigs, key, timeout.d, c.Lock)
	if code, err := a.notAcquired("lock", key, timeout.d, sig, err); code >= 0 {
		return code, err
	}
	if sig != nil {
		// Granted just as a signal arrived: the user wanted out.
		a.releaseOrSay(c, key)
		return signalStatus(sig), nil
	}
	return exitOK, nil
}

// checkCommand checks what follows KEY: a command after "--", and --ttl
// only with one (a hold without a command is v1's, with no session).
func (a *app) checkCommand(c string, sep bool, child []string, ttl time.Duration) error {
	switch {
	case sep && len(child) == 0:
		return a.usage(c, "no command after --")
	case !sep && ttl != 0:
		return a.usage(c, "--ttl is for a key held while a command runs (%s KEY --ttl D -- CMD)", c)
	}
	return nil
}

func (a *app) cmdTryLock(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("trylock")
	conflict := fs.Int("conflict-exit-code", exitNotAcquired, "exit status when the key is held")
	var ttl durationFlag
	fs.Var(&ttl, "ttl", "TTL of the session holding KEY for CMD")
	pos, child, sep, done, err := a.parse("trylock", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	key, err := a.oneKey("trylock", pos)
	if err != nil {
		return 0, err
	}
	if *conflict < 0 || *conflict > 255 {
		return 0, a.usage("trylock", "--conflict-exit-code %d: want 0 to 255", *conflict)
	}
	if err := a.checkCommand("trylock", sep, child, ttl.d); err != nil {
		return 0, err
	}
	// Signals are caught from here on so that one arriving between the
	// grant and the start of CMD still leads to a release.
	sigs, stop := catchSignals()
	defer stop()
	if sep {
		return a.lockInSession(ctx, sigs, "trylock", key, true, 0, ttl.d, *conflict, child)
	}

	c := a.client()
	switch err := c.TryLock(ctx, key); {
	case errors.Is(err, client.ErrLocked):
		a.sayBusy(ctx, key)
		return *conflict, nil
	case errors.Is(err, client.ErrRefused):
		return 0, withCode(exitNotAcquired, "trylock %s: not acquired: the server answered '-' (see its log)", printable(key))
	case err != nil:
		return 0, a.describe("trylock", key, err)
	}
	select {
	case sig := <-sigs:
		a.releaseOrSay(c, key)
		return signalStatus(sig), nil
	default:
	}
	return exitOK, nil
}

func (a *app) cmdWait(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("wait")
	var timeout durationFlag
	fs.Var(&timeout, "timeout", "give up waiting after D")
	pos, _, sep, done, err := a.parse("wait", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	key, err := a.oneKey("wait", pos)
	if err != nil {
		return 0, err
	}
	if sep {
		return 0, a.usage("wait", "wait runs no command (use lock KEY -- CMD)")
	}
	sigs, stop := catchSignals()
	defer stop()

	c := a.client()
	sig, err := a.waitTurn(ctx, sigs, key, timeout.d, c.Lock)
	if code, err := a.notAcquired("wait", key, timeout.d, sig, err); code >= 0 {
		return code, err
	}
	// Our turn came: hand it on at once, even if a signal just arrived.
	if !a.releaseOrSay(c, key) {
		return exitServer, nil
	}
	if sig != nil {
		return signalStatus(sig), nil
	}
	return exitOK, nil
}

// notAcquired maps the outcome of waitTurn to an exit status; it returns
// code -1 when the key was granted.
func (a *app) notAcquired(op, key string, timeout time.Duration, sig os.Signal, err error) (int, error) {
	switch {
	case err == nil:
		return -1, nil
	case sig != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		fmt.Fprintf(a.stderr, "lc-cli: %s %s: %s while waiting; left the queue\n", op, printable(key), sigName(sig))
		return signalStatus(sig), nil
	case errors.Is(err, context.DeadlineExceeded):
		return 0, withCode(exitNotAcquired, "%s %s: not acquired within %s; left the queue", op, printable(key), timeout)
	case errors.Is(err, client.ErrReset):
		return 0, withCode(exitNotAcquired, "%s %s: not acquired: the server answered '-' (the key or this source was reset while waiting)", op, printable(key))
	}
	return 0, a.describe(op, key, err)
}

func sigName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}

// waitTurn calls lock (which blocks until key is granted) under a context
// that a signal or the timeout cancels, which closes the connection and so
// withdraws the waiter. sig is the signal that arrived, if any; lock's
// error is returned as it is. While it waits, the status line is drawn
// when stderr is a terminal.
func (a *app) waitTurn(ctx context.Context, sigs <-chan os.Signal, key string, timeout time.Duration,
	lock func(context.Context, string) error) (os.Signal, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lockCtx := ctx
	if timeout > 0 {
		var cancelT context.CancelFunc
		lockCtx, cancelT = context.WithTimeout(ctx, timeout)
		defer cancelT()
	}

	// Both goroutines end, before waitTurn returns, when lock has returned
	// and stopped is cancelled.
	stopped, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var sig os.Signal // written by the watcher, read after wg.Wait
	wg.Go(func() {
		select {
		case sig = <-sigs:
			cancel()
		case <-stopped.Done():
		}
	})
	if a.errTerm {
		st := &status{a: a, key: key, start: time.Now()}
		wg.Go(func() { st.loop(stopped) })
	}
	err := lock(lockCtx, key)
	stop()
	wg.Wait()
	return sig, err
}

func (a *app) cmdUnlock(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("unlock")
	pos, _, sep, done, err := a.parse("unlock", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	key, err := a.oneKey("unlock", pos)
	if err != nil {
		return 0, err
	}
	if sep {
		return 0, a.usage("unlock", "unlock runs no command")
	}
	switch err := a.client().Unlock(ctx, key); {
	case errors.Is(err, client.ErrOutcomeUnknown):
		return 0, withCode(exitServer, "unlock %s: sent, but the server at %s did not answer (%s): the key may or may not be released; not sent again, as a second unlock could release whoever holds it now (see 'lc-cli keys')",
			printable(key), a.address, rootCause(err))
	case errors.Is(err, client.ErrRefused):
		return 0, withCode(exitServer, "unlock %s: the server answered '-': the key was not held", printable(key))
	case err != nil:
		return 0, a.describe("unlock", key, err)
	}
	return exitOK, nil
}

func (a *app) cmdReset(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("reset")
	pos, _, sep, done, err := a.parse("reset", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	if sep {
		return 0, a.usage("reset", "reset runs no command")
	}
	if len(pos) == 0 {
		return 0, a.usage("reset", "want 'reset key KEY' or 'reset source [SOURCE]'")
	}
	c := a.client()
	switch pos[0] {
	case "key":
		key, err := a.oneKey("reset", pos[1:])
		if err != nil {
			return 0, err
		}
		before, known := a.heldBefore(ctx, key)
		if err := c.ResetByKey(ctx, key); err != nil {
			return 0, a.describe("reset key", key, err)
		}
		a.sayResetKey(key, before, known)
	case "source":
		source := a.source
		switch {
		case len(pos) == 2:
			source = pos[1]
		case len(pos) > 2:
			return 0, a.usage("reset", "unexpected argument %q after SOURCE", pos[2])
		}
		if len(source) > protocol.MaxField {
			return 0, a.usage("reset", "SOURCE is %d bytes long; at most %d are allowed", len(source), protocol.MaxField)
		}
		held, more, known := a.heldBySource(ctx, source)
		if err := c.ResetBySource(ctx, source); err != nil {
			what := source
			if what == "" {
				what = "(this host's address)"
			}
			return 0, a.describe("reset source", what, err)
		}
		a.sayResetSource(source, held, more, known)
	default:
		return 0, a.usage("reset", "unknown reset %q: want 'key' or 'source'", pos[0])
	}
	return exitOK, nil
}
