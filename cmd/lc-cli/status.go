package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/locking-center/locking-center/web/api"
)

// The status line appears only when the wait lasts (an immediate grant
// draws nothing) and is refreshed about once a second.
const (
	statusDelay = 300 * time.Millisecond
	statusEvery = time.Second
)

// status draws the one line that shows, while lc-cli waits on a terminal,
// who holds the key, for how long and how many are ahead. It is owned by
// waitTurn's goroutine and ends with its context.
type status struct {
	a     *app
	key   string
	start time.Time
	// me is the remote address of this waiter's queue entry once
	// recognised: the client does not tell its local address, so the entry
	// is first matched by source and by the time it joined.
	me    string
	drawn bool
}

// loop draws the line until ctx ends, then erases it.
func (s *status) loop(ctx context.Context) {
	wapi, _ := newWebAPI(s.a.webAddress, s.a.tls) // nil: no holder shown
	if wapi != nil {
		defer wapi.http.CloseIdleConnections()
	}
	t := time.NewTimer(statusDelay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.clear()
			return
		case <-t.C:
		}
		line := s.line(ctx, wapi, time.Now())
		if ctx.Err() != nil {
			s.clear()
			return
		}
		s.draw(line)
		t.Reset(statusEvery)
	}
}

// line reads the JSON API and composes the status text.
func (s *status) line(ctx context.Context, wapi *webAPI, now time.Time) string {
	head := fmt.Sprintf("lc-cli: waiting for %s (%s)", printable(s.key), age(now.Sub(s.start)))
	if wapi == nil {
		return head
	}
	fctx, cancel := context.WithTimeout(ctx, statusEvery)
	defer cancel()
	k, err := wapi.key(fctx, s.key)
	switch {
	case errors.Is(err, errNotHeld):
		return head + ": being handed on"
	case err != nil:
		return head + " (holder unknown: no JSON API at " + wapi.hosts() + ")"
	}
	return head + ": " + s.describe(k, now)
}

// describe tells the holder, its age and our place in the queue.
func (s *status) describe(k *api.KeyDetail, now time.Time) string {
	held := fmt.Sprintf("held by %s for %s", printable(k.Source), age(now.Sub(k.Since)))
	if i := s.place(k.Queue); i >= 0 {
		switch i {
		case 0:
			return held + ", you are next"
		case 1:
			return held + ", 1 ahead of you"
		default:
			return fmt.Sprintf("%s, %d ahead of you", held, i)
		}
	}
	return fmt.Sprintf("%s, %d waiting", held, len(k.Queue))
}

// place returns this waiter's index in queue, or -1 when it is not seen.
func (s *status) place(queue []api.Waiter) int {
	if s.me != "" {
		for i, q := range queue {
			if q.Remote == s.me {
				return i
			}
		}
	}
	idx := -1
	var best time.Duration
	for i, q := range queue {
		if !s.mine(q) {
			continue
		}
		d := q.Since.Sub(s.start)
		if d < 0 {
			d = -d
		}
		if idx < 0 || d < best {
			idx, best = i, d
		}
	}
	if idx >= 0 {
		s.me = queue[idx].Remote
	}
	return idx
}

// mine reports whether q may be this waiter: same source or, without
// one, a source that is the waiter's own IP address.
func (s *status) mine(q api.Waiter) bool {
	if s.a.source != "" {
		return q.Source == s.a.source
	}
	return q.Source == hostOf(q.Remote)
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

// draw replaces the current line with text, cut to the terminal's width.
func (s *status) draw(text string) {
	w := 80
	if s.a.termWidth != nil {
		w = s.a.termWidth()
	}
	if n := utf8.RuneCountInString(text); w > 1 && n > w-1 {
		r := []rune(text)
		text = string(r[:w-2]) + "…"
	}
	fmt.Fprint(s.a.stderr, "\r\x1b[K"+text)
	s.drawn = true
}

func (s *status) clear() {
	if s.drawn {
		fmt.Fprint(s.a.stderr, "\r\x1b[K")
		s.drawn = false
	}
}
