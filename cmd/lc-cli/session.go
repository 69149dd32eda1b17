package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/web/api"
)

// exitSessionLost is the exit status when the session holding the key for
// CMD was lost while CMD ran.
const exitSessionLost = 4

// lockInSession takes key through a new session (Lock, or TryLock when
// try is set), runs child under it, and ends the session after: the key is
// released by the Unlock of its own grant, and whatever the session still
// holds by its Close — or, if lc-cli dies, one TTL later by the server.
func (a *app) lockInSession(ctx context.Context, sigs <-chan os.Signal, op, key string, try bool,
	timeout, ttl time.Duration, conflict int, child []string) (int, error) {
	s, err := client.NewSession(ctx, a.address, client.WithSource(a.source), client.WithTTL(ttl), client.WithTLS(a.tls))
	switch {
	case errors.Is(err, client.ErrRefused):
		return 0, withCode(exitServer, "%s %s: the server at %s refused to open a session (AUTH_TOKEN set? a server without sessions?): %s",
			op, printable(key), a.address, rootCause(err))
	case err != nil:
		return 0, a.describe(op, key, err)
	}

	var token uint64
	if try {
		token, err = retryDisconnected(ctx, func() (uint64, error) { return s.TryLock(ctx, key) })
		switch {
		case errors.Is(err, client.ErrLocked):
			a.endSession(s, key, 0, false)
			a.sayBusy(ctx, key)
			return conflict, nil
		case errors.Is(err, client.ErrRefused):
			a.endSession(s, key, 0, false)
			return 0, withCode(exitNotAcquired, "trylock %s: not acquired: the server answered '-' (see its log)", printable(key))
		case err != nil:
			a.endSession(s, key, 0, false)
			return 0, a.describe(op, key, err)
		}
		select {
		case sig := <-sigs:
			a.endSession(s, key, token, false)
			return signalStatus(sig), nil
		default:
		}
	} else {
		sig, err := a.waitTurn(ctx, sigs, key, timeout, func(ctx context.Context, key string) error {
			var err error
			token, err = retryDisconnected(ctx, func() (uint64, error) { return s.Lock(ctx, key) })
			return err
		})
		if code, err := a.notAcquired(op, key, timeout, sig, err); code >= 0 {
			a.endSession(s, key, 0, false)
			return code, err
		}
		if sig != nil { // granted just as a signal arrived: the user wanted out
			a.endSession(s, key, token, false)
			return signalStatus(sig), nil
		}
	}
	h := hold{token: token, ttl: s.TTL(), lost: s.Done(), lostWhy: s.Err,
		release: func(lostSaid bool) { a.endSession(s, key, token, lostSaid) }}
	return a.runLocked(h, sigs, key, child)
}

// retryDisconnected makes a Lock or TryLock again when the connection
// dropped while it waited: it holds nothing then, and the session resumes
// by itself (the place in the queue is lost with the connection).
func retryDisconnected(ctx context.Context, f func() (uint64, error)) (uint64, error) {
	for {
		tok, err := f()
		if !errors.Is(err, client.ErrDisconnected) || ctx.Err() != nil {
			return tok, err
		}
	}
}

// endSession releases the grant token of key (0: none) and closes the
// session, saying in one line what went wrong, if anything. The Unlock is
// sent once: if its answer is lost, the Close releases what the session
// still holds, and if the Close cannot be confirmed either, the server
// releases it when the TTL passes — nothing is ever sent again blindly.
// lostSaid is true when the loss of the session was already reported.
func (a *app) endSession(s *client.Session, key string, token uint64, lostSaid bool) {
	// A resume after a server restart takes up to a TTL; then the session
	// is lost and Close returns at once.
	ctx, cancel := context.WithTimeout(context.Background(), s.TTL()+releaseTimeout)
	defer cancel()
	var uerr error
	if token != 0 {
		uerr = s.Unlock(ctx, key, token)
	}
	cerr := s.Close(ctx)
	switch {
	case errors.Is(uerr, client.ErrSessionLost) || errors.Is(cerr, client.ErrSessionLost):
		if !lostSaid {
			fmt.Fprintf(a.stderr, "lc-cli: the session holding %s was lost before the release (%s); the server released its holds when it expired\n",
				printable(key), lossReason(s.Err()))
		}
	case errors.Is(uerr, client.ErrNotHeld):
		fmt.Fprintf(a.stderr, "lc-cli: unlock %s: this session no longer held it (reset while the command ran?); nothing else was released\n", printable(key))
	case cerr != nil:
		fmt.Fprintf(a.stderr, "lc-cli: could not close the session at %s (%s); the server releases %s when its TTL (%v) passes\n",
			a.address, rootCause(cerr), printable(key), s.TTL())
	}
}

// lossReason is why a session was lost, without the sentinel's prefix.
func lossReason(err error) string {
	msg := oneLine(err.Error())
	if i := strings.LastIndex(msg, client.ErrSessionLost.Error()+": "); i >= 0 {
		return msg[i+len(client.ErrSessionLost.Error())+2:]
	}
	return msg
}

// sayBusy tells a terminal that trylock found key held, and by whom.
// Scripts (stderr not a terminal) get only the exit status.
func (a *app) sayBusy(ctx context.Context, key string) {
	if !a.errTerm {
		return
	}
	line := fmt.Sprintf("lc-cli: trylock %s: not acquired: held by someone else", printable(key))
	if wapi, err := newWebAPI(a.webAddress, a.tls); err == nil {
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		k, err := wapi.key(fctx, key)
		cancel()
		wapi.http.CloseIdleConnections()
		if err == nil {
			line = fmt.Sprintf("lc-cli: trylock %s: not acquired: held by %s for %s", printable(key), printable(k.Source), age(time.Since(k.Since)))
			if k.Waiters > 0 {
				line += fmt.Sprintf(", %d waiting", k.Waiters)
			}
		}
	}
	fmt.Fprintln(a.stderr, line)
}

func (a *app) cmdSessions(ctx context.Context, args []string) (int, error) {
	fs := a.flagSet("sessions")
	asJSON := fs.Bool("json", false, "print the JSON list")
	pos, _, sep, done, err := a.parse("sessions", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	if len(pos) > 0 || sep {
		return 0, a.usage("sessions", "sessions takes no arguments")
	}
	wapi, err := newWebAPI(a.webAddress, a.tls)
	if err != nil {
		return 0, a.usage("sessions", "%v", err)
	}
	body, _, err := wapi.get(ctx, "/api/v1/sessions", nil)
	if err != nil {
		return 0, withCode(exitServer, "sessions: %w", err)
	}
	var list []api.Session
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, withCode(exitServer, "sessions: the JSON API sent a list that does not decode: %w", err)
	}
	if *asJSON {
		a.stdout.Write(body)
		if len(body) == 0 || body[len(body)-1] != '\n' {
			fmt.Fprintln(a.stdout)
		}
		return exitOK, nil
	}
	writeSessions(a.stdout, list)
	return exitOK, nil
}

// writeSessions prints the sessions as an aligned table.
func writeSessions(w io.Writer, list []api.Session) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no session is open")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tSOURCE\tREMOTE\tSTATE\tTTL\tEXPIRES IN\tHOLDS\tWAITING")
	for _, s := range list {
		state := "connected"
		if !s.Connected {
			state = "disconnected"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", printable(s.Session), printable(s.Source), printable(s.Remote), state,
			ms(s.TTLMillis), ms(s.ExpiresInMillis), s.Holds, s.Waiting)
	}
	tw.Flush()
}

// ms formats milliseconds as a short duration (1.5s, 10s, 2m0s).
func ms(n int64) string {
	d := time.Duration(n) * time.Millisecond
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
