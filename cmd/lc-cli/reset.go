package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/locking-center/locking-center/web/api"
)

// What a reset released is read from the JSON API just before it is made
// (the TCP answer is one byte): it tells the operator what the reset did,
// best effort — when the JSON API cannot be read, lc-cli says only that
// the reset was made.

// heldBefore returns key's holder as the JSON API shows it (nil: not
// held); known is false when the API could not tell.
func (a *app) heldBefore(ctx context.Context, key string) (k *api.KeyDetail, known bool) {
	wapi, err := newWebAPI(a.webAddress, a.tls)
	if err != nil {
		return nil, false
	}
	defer wapi.http.CloseIdleConnections()
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	k, err = wapi.key(fctx, key)
	switch {
	case errors.Is(err, errNotHeld):
		return nil, true
	case err != nil:
		return nil, false
	}
	return k, true
}

// heldBySource returns the keys source holds (among the first 10,000
// held keys: more tells that others were not seen); known is false when
// the API could not tell, or when source is empty (the server resolves it to this
// host's address as it sees it).
func (a *app) heldBySource(ctx context.Context, source string) (keys []api.KeyDetail, more, known bool) {
	if source == "" {
		return nil, false, false
	}
	wapi, err := newWebAPI(a.webAddress, a.tls)
	if err != nil {
		return nil, false, false
	}
	defer wapi.http.CloseIdleConnections()
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all, more, err := wapi.keys(fctx)
	if err != nil {
		return nil, false, false
	}
	for _, k := range all {
		if k.Source == source {
			keys = append(keys, k)
		}
	}
	return keys, more, true
}

func (a *app) sayResetKey(key string, before *api.KeyDetail, known bool) {
	switch {
	case !known:
		fmt.Fprintf(a.stdout, "reset key %s: done\n", printable(key))
	case before == nil:
		fmt.Fprintf(a.stdout, "reset key %s: nothing was held\n", printable(key))
	default:
		line := fmt.Sprintf("reset key %s: released (held by %s for %s)", printable(key), printable(before.Source), age(time.Since(before.Since)))
		if before.Waiters > 0 {
			line += fmt.Sprintf("; %d waiting refused", before.Waiters)
		}
		fmt.Fprintln(a.stdout, line)
	}
}

func (a *app) sayResetSource(source string, held []api.KeyDetail, more, known bool) {
	what := source
	if what == "" {
		what = "(this host's address)"
	}
	switch {
	case !known:
		fmt.Fprintf(a.stdout, "reset source %s: done\n", printable(what))
	case len(held) == 0 && more:
		fmt.Fprintf(a.stdout, "reset source %s: done (none of the first 10,000 held keys was its)\n", printable(what))
	case len(held) == 0:
		fmt.Fprintf(a.stdout, "reset source %s: nothing was held (waiters of %s, if any, were refused)\n", printable(what), printable(what))
	default:
		names := make([]string, 0, 5)
		for i, k := range held {
			if i == 5 {
				names = append(names, "…")
				break
			}
			names = append(names, printable(k.Key))
		}
		n := fmt.Sprintf("%d key", len(held))
		if len(held) != 1 {
			n += "s"
		}
		if more {
			n = "at least " + n
		}
		fmt.Fprintf(a.stdout, "reset source %s: released %s (%s)\n", printable(what), n, strings.Join(names, ", "))
	}
}
