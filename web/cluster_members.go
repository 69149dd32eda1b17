package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The membership routes of the web port (SPEC §8.7, §8.8): the cluster
// page's hand-over and remove buttons, and their JSON forms. They call
// Options.Cluster.Members; on a follower they reach it at the leader
// (clusterRoute forwards every state-changing request).

func (s *server) clusterMemberRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v1/cluster/transfer", s.apiTransfer)
	mux.HandleFunc("DELETE /api/v1/cluster/nodes/{id}", s.apiRemoveNode)
	mux.HandleFunc("GET /cluster/transfer", s.confirmTransfer)
	mux.HandleFunc("POST /cluster/transfer", s.formTransfer)
	mux.HandleFunc("GET /cluster/remove", s.confirmRemove)
	mux.HandleFunc("POST /cluster/remove", s.formRemove)
}

// errNoMembers answers a membership change on a node that was given no
// way to make one.
var errNoMembers = errors.New("membership changes are not available on this node")

// memberStatus is the status code of a Members error.
func memberStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, errNoMembers):
		return http.StatusNotImplemented
	case errors.Is(err, ErrUnknownNode):
		return http.StatusNotFound
	case errors.Is(err, ErrRefused):
		return http.StatusConflict
	case errors.Is(err, ErrNoLeader):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (s *server) transfer(r *http.Request, id, via string) error {
	m := s.opts.Cluster.Members
	if m == nil {
		return errNoMembers
	}
	err := m.Transfer(r.Context(), id)
	s.log.Info("leadership hand-over", "to", id, "via", via, "peer", r.RemoteAddr, "err", err)
	return err
}

func (s *server) remove(r *http.Request, id, via string) error {
	m := s.opts.Cluster.Members
	if m == nil {
		return errNoMembers
	}
	err := m.Remove(r.Context(), id)
	s.log.Info("node removed from the cluster", "node", id, "via", via, "peer", r.RemoteAddr, "err", err)
	return err
}

// apiTransfer serves POST /api/v1/cluster/transfer with body {"id": …}
// or no body (raft picks the node); it answers the cluster's status.
func (s *server) apiTransfer(w http.ResponseWriter, r *http.Request) {
	id := ""
	if r.ContentLength != 0 {
		fields, err := readStrictObject(w, r, "id")
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, errBodyTooLarge) {
				status = http.StatusRequestEntityTooLarge
			}
			s.apiFail(w, r, status, err)
			return
		}
		id = fields["id"]
	}
	if err := s.transfer(r, id, "api"); err != nil {
		s.apiFail(w, r, memberStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, s.clusterStatus(r.Context(), false))
}

// apiRemoveNode serves DELETE /api/v1/cluster/nodes/{id}; it answers the
// cluster's status.
func (s *server) apiRemoveNode(w http.ResponseWriter, r *http.Request) {
	if err := s.remove(r, r.PathValue("id"), "api"); err != nil {
		s.apiFail(w, r, memberStatus(err), err)
		return
	}
	writeJSON(w, http.StatusOK, s.clusterStatus(r.Context(), false))
}

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
	s.afterMember(w, r, "transfer", id, s.transfer(r, id, "dashboard"))
}

func (s *server) formRemove(w http.ResponseWriter, r *http.Request) {
	id, err := nodeField(w, r, false)
	if err != nil {
		s.pageError(w, r, http.StatusBadRequest, err)
		return
	}
	s.afterMember(w, r, "remove", id, s.remove(r, id, "dashboard"))
}

// afterMember sends the browser back to the cluster page with the
// outcome sealed in the URL, as afterReset does for the dashboard.
func (s *server) afterMember(w http.ResponseWriter, r *http.Request, by, id string, err error) {
	if err != nil {
		status := memberStatus(err)
		if status == http.StatusOK {
			status = http.StatusInternalServerError
		}
		s.pageError(w, r, status, err)
		return
	}
	http.Redirect(w, r, "/cluster?done="+s.sealFlash(flash{By: by, Name: id}, s.now()), http.StatusSeeOther)
}
