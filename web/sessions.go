package web

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web/api"
)

// sessionList returns every open session by source, then id. The number
// of sessions is bounded by the table (locker.Options.MaxSessions).
func (s *server) sessionList() []locker.SessionInfo {
	var out []locker.SessionInfo
	s.opts.Table.Sessions(func(si locker.SessionInfo) bool {
		out = append(out, si)
		return true
	})
	slices.SortFunc(out, func(a, b locker.SessionInfo) int {
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// apiSessions serves GET /api/v1/sessions.
func (s *server) apiSessions(w http.ResponseWriter, _ *http.Request) {
	list := s.sessionList()
	out := make([]api.Session, len(list))
	for i, si := range list {
		out[i] = api.Session{Session: si.ID.String(), Source: si.Source, Remote: si.Remote, Connected: si.Connected,
			TTLMillis: si.TTL.Milliseconds(), ExpiresInMillis: max(si.ExpiresIn, 0).Milliseconds(),
			Holds: si.Holds, Waiting: si.Waiting}
	}
	writeJSON(w, http.StatusOK, out)
}

// errNoSuchSession is a session id that names no open session.
var errNoSuchSession = errors.New("no such session")

// sessionOf parses the {session} of a path: 400 for a malformed id, 404 for
// one that is not open (ended, expired, never opened).
func (s *server) sessionOf(r *http.Request) (locker.SessionID, int, error) {
	raw := r.PathValue("session")
	id, err := locker.ParseSessionID(raw)
	if err != nil {
		return 0, http.StatusBadRequest, fmt.Errorf("session %q: want 16 hex digits", raw)
	}
	if _, ok := s.opts.Table.SessionInfo(id); !ok {
		if r.Method == http.MethodPost {
			if err := s.confirmNothing(); err != nil {
				return 0, http.StatusServiceUnavailable, fmt.Errorf("session %s: %w", id, err)
			}
		}
		return 0, http.StatusNotFound, fmt.Errorf("session %s: %w (it ended, expired or never existed)", id, errNoSuchSession)
	}
	return id, http.StatusOK, nil
}

// apiEndSession serves POST /api/v1/sessions/{session}/end.
func (s *server) apiEndSession(w http.ResponseWriter, r *http.Request) {
	id, status, err := s.sessionOf(r)
	if err != nil {
		s.apiFail(w, r, status, err)
		return
	}
	res, err := s.endSession(id, "api", r)
	if errors.Is(err, errNoSuchSession) {
		s.apiFail(w, r, http.StatusNotFound, err)
		return
	}
	s.apiReset(w, r, res, err)
}

// endSession is every web end of a session: the engine's EndSession,
// logged. A session that ended meanwhile wraps errNoSuchSession.
func (s *server) endSession(id locker.SessionID, via string, r *http.Request) (locker.ResetResult, error) {
	res, err := s.opts.Table.EndSession(id)
	if errors.Is(err, locker.ErrUnknownSession) {
		if cerr := s.confirmNothing(); cerr != nil {
			return res, fmt.Errorf("end session %s: %w", id, cerr)
		}
		return res, fmt.Errorf("session %s: %w (it ended, expired or never existed)", id, errNoSuchSession)
	}
	if err != nil {
		s.log.Error("end session failed", "via", via, "session", id.String(), "peer", r.RemoteAddr, "err", err)
		return res, fmt.Errorf("end session %s: %w", id, err)
	}
	s.log.Info("end session", "via", via, "session", id.String(), "peer", r.RemoteAddr,
		"released", res.Released, "refused", res.Refused)
	return res, nil
}

// sessionsData is the sessions page.
type sessionsData struct {
	chrome
	Sessions []locker.SessionInfo
	Flash    *flash
}

func (s *server) sessionsPage(w http.ResponseWriter, r *http.Request) {
	d := sessionsData{chrome: chrome{Title: "Sessions", Version: s.opts.Version, Live: true}, Sessions: s.sessionList()}
	if isLive(r) {
		s.render(w, r, http.StatusOK, sessionsLive(d))
		return
	}
	d.Flash = s.openFlash(r.URL.Query().Get("done"), s.now())
	s.render(w, r, http.StatusOK, sessionsPage(d))
}

func (s *server) confirmEndSession(w http.ResponseWriter, r *http.Request) {
	id, status, err := s.sessionOf(r)
	if err != nil {
		s.pageError(w, r, status, err)
		return
	}
	si, _ := s.opts.Table.SessionInfo(id)
	d := confirmData{chrome: chrome{Title: "End session " + id.String(), Version: s.opts.Version}, By: "session",
		Name: id.String(), Session: si}
	s.render(w, r, http.StatusOK, confirmPage(d))
}

func (s *server) formEndSession(w http.ResponseWriter, r *http.Request) {
	id, status, err := s.sessionOf(r)
	if err != nil {
		s.pageError(w, r, status, err)
		return
	}
	res, err := s.endSession(id, "dashboard", r)
	if errors.Is(err, errNoSuchSession) {
		s.pageError(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		s.pageError(w, r, failStatus(err), failMessage(err, res))
		return
	}
	done := s.sealFlash(flash{By: "session", Name: id.String(), Released: res.Released, Refused: res.Refused}, s.now())
	http.Redirect(w, r, "/sessions?done="+done, http.StatusSeeOther)
}

// expiry says when a session expires, for pages.
func expiry(d time.Duration) string {
	if d <= 0 {
		return "expiring now"
	}
	return "expires in " + age(d)
}
