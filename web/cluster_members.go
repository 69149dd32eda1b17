package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The cluster page's hand-over and remove buttons (SPEC §8.8): a
// confirmation page, then a form post behind the CSRF check, as the
// resets. They call Options.Membership, as the JSON routes do
// (cluster_routes.go); on a follower they reach the leader (clusterRoute
// forwards every state-changing request).

func (s *server) clusterPageRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /cluster/transfer", s.confirmTransfer)
	mux.HandleFunc("POST /cluster/transfer", s.formTransfer)
	mux.HandleFunc("GET /cluster/remove", s.confirmRemove)
	mux.HandleFunc("POST /cluster/remove", s.formRemove)
}

// errNoMembership answers a membership change on a node that was given no
// way to make one.
var errNoMembership = &StatusError{Status: http.StatusNotImplemented,
	Err: errors.New("membership changes are not available on this node")}

func (s *server) confirmTransfer(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	title := "Hand leadership over"
	if id != "" {
		title += " to " + shown(id)
	}
	s.render(w, r, http.StatusOK, confirmPage(confirmData{chrome: chrome{Title: title, Version: s.opts.Version},
		By: "transfer", Name: id, Cluster: s.clusterStatus(r.Context(), false)}))
}

func (s *server) confirmRemove(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		s.pageError(w, r, http.StatusBadRequest, errors.New("no node given: start from the cluster page"))
		return
	}
	s.render(w, r, http.StatusOK, confirmPage(confirmData{chrome: chrome{Title: "Remove node " + shown(id), Version: s.opts.Version},
		By: "remove", Name: id, Cluster: s.clusterStatus(r.Context(), false)}))
}

// nodeField reads the id field of a membership form; it may be empty only
// for a hand-over.
func nodeField(w http.ResponseWriter, r *http.Request, optional bool) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		return "", fmt.Errorf("bad form: %w", err)
	}
	id := strings.TrimSpace(r.PostForm.Get("id"))
	if id == "" && !optional {
		return "", errors.New(`form field "id" is missing or empty`)
	}
	return id, nil
}

func (s *server) formTransfer(w http.ResponseWriter, r *http.Request) {
	id, err := nodeField(w, r, true)
	if err != nil {
		s.pageError(w, r, http.StatusBadRequest, err)
		return
	}
	err = errNoMembership
	if m := s.opts.Membership; m != nil {
		var leader string
		leader, err = m.Transfer(id)
		s.log.Info("cluster leadership handed over", "via", "dashboard", "to", id, "leader", leader, "peer", r.RemoteAddr, "err", err)
	}
	s.afterMember(w, r, "transfer", id, err)
}

func (s *server) formRemove(w http.ResponseWriter, r *http.Request) {
	id, err := nodeField(w, r, false)
	if err != nil {
		s.pageError(w, r, http.StatusBadRequest, err)
		return
	}
	err = errNoMembership
	if m := s.opts.Membership; m != nil {
		err = m.Remove(id)
		s.log.Info("cluster node removed", "via", "dashboard", "node", id, "peer", r.RemoteAddr, "err", err)
	}
	s.afterMember(w, r, "remove", id, err)
}

// afterMember sends the browser back to the cluster page with the
// outcome sealed in the URL, as afterReset does for the dashboard; an
// error is shown with the status its StatusError gives (500 otherwise).
func (s *server) afterMember(w http.ResponseWriter, r *http.Request, by, id string, err error) {
	if err != nil {
		status := http.StatusInternalServerError
		if se, ok := errors.AsType[*StatusError](err); ok {
			status = se.Status
		}
		s.pageError(w, r, status, err)
		return
	}
	http.Redirect(w, r, "/cluster?done="+s.sealFlash(flash{By: by, Name: id}, s.now()), http.StatusSeeOther)
}
