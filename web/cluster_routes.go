package web

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/locking-center/locking-center/web/api"
)

// Membership serves a cluster node's membership routes (SPEC §8.7): the
// functions carry a change out on the leader, forwarding it from a
// follower. Their errors may be a *StatusError, which gives the answer's
// status; any other is a 500.
type Membership struct {
	// Add adds a node (a non-voter, promoted once caught up).
	Add func(id, address string) error
	// Remove removes a member.
	Remove func(id string) error
	// Transfer hands leadership to id ("" for any voter) and returns the
	// leader after it.
	Transfer func(id string) (string, error)
	// JoinAuthorized reports whether proof (api.JoinHeader's value)
	// proves CLUSTER_TOKEN over body.
	JoinAuthorized func(proof string, body []byte) bool
}

// StatusError is an error with the HTTP status it is answered with.
type StatusError struct {
	Status int
	Err    error
}

func (e *StatusError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *StatusError) Unwrap() error { return e.Err }

// registerCluster adds the cluster's routes: the status, and the
// membership routes when opts.Membership is set.
func (s *server) registerCluster(mux *http.ServeMux) {
	if s.opts.Cluster != nil {
		mux.HandleFunc("GET /api/v1/cluster", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, s.opts.Cluster())
		})
	}
	if s.opts.Membership == nil {
		return
	}
	mux.HandleFunc("POST /api/v1/cluster/nodes", s.apiAddNode)
	mux.HandleFunc("DELETE /api/v1/cluster/nodes/{id}", s.apiRemoveNode)
	mux.HandleFunc("POST /api/v1/cluster/transfer", s.apiTransfer)
}

// isJoin reports whether r is a node's join, which proves CLUSTER_TOKEN
// (checked by apiAddNode) instead of showing WEB_PASSWORD.
func (s *server) isJoin(r *http.Request) bool {
	return s.opts.Membership != nil && r.Method == http.MethodPost && r.URL.Path == "/api/v1/cluster/nodes" &&
		r.Header.Get(api.JoinHeader) != ""
}

// apiAddNode serves POST /api/v1/cluster/nodes {"id","address"}.
func (s *server) apiAddNode(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		s.apiFail(w, r, http.StatusRequestEntityTooLarge, errBodyTooLarge)
		return
	}
	via := "api"
	if proof := r.Header.Get(api.JoinHeader); proof != "" {
		if !s.opts.Membership.JoinAuthorized(proof, body) {
			if ok, held := s.authLog.allow(s.now()); ok {
				s.log.Warn("web request refused: a join that does not prove CLUSTER_TOKEN", "peer", r.RemoteAddr, "held_back", held)
			}
			s.apiFail(w, r, http.StatusUnauthorized, errors.New("the join's "+api.JoinHeader+" does not prove CLUSTER_TOKEN (or is older than 5 minutes)"))
			return
		}
		via = "join"
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	fields, err := readStrictObject(w, r, "id", "address")
	if err == nil && (fields["id"] == "" || fields["address"] == "") {
		err = errors.New(`want a JSON body {"id": "...", "address": "host:port"}`)
	}
	if err != nil {
		s.apiFail(w, r, http.StatusBadRequest, err)
		return
	}
	id, address := fields["id"], fields["address"]
	if err := s.opts.Membership.Add(id, address); err != nil {
		s.membershipFail(w, r, "add node", err, "via", via, "node", id, "address", address)
		return
	}
	s.log.Info("cluster node added", "via", via, "node", id, "address", address, "peer", r.RemoteAddr)
	writeJSON(w, http.StatusOK, api.ClusterNode{ID: id, Address: address})
}

// apiRemoveNode serves DELETE /api/v1/cluster/nodes/{id}.
func (s *server) apiRemoveNode(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.opts.Membership.Remove(id); err != nil {
		s.membershipFail(w, r, "remove node", err, "node", id)
		return
	}
	s.log.Info("cluster node removed", "via", "api", "node", id, "peer", r.RemoteAddr)
	writeJSON(w, http.StatusOK, api.ClusterNode{ID: id})
}

// apiTransfer serves POST /api/v1/cluster/transfer {"id"?}: an empty body
// or object hands leadership to any voter.
func (s *server) apiTransfer(w http.ResponseWriter, r *http.Request) {
	fields, err := readStrictObject(w, r, "id")
	if err != nil && r.ContentLength != 0 {
		s.apiFail(w, r, http.StatusBadRequest, err)
		return
	}
	id := fields["id"]
	leader, err := s.opts.Membership.Transfer(id)
	if err != nil {
		s.membershipFail(w, r, "leadership transfer", err, "to", id)
		return
	}
	s.log.Info("cluster leadership handed over", "via", "api", "to", id, "leader", leader, "peer", r.RemoteAddr)
	writeJSON(w, http.StatusOK, api.TransferResult{Leader: leader})
}

func (s *server) membershipFail(w http.ResponseWriter, r *http.Request, what string, err error, attrs ...any) {
	status := http.StatusInternalServerError
	if se, ok := errors.AsType[*StatusError](err); ok {
		status = se.Status
	}
	if status < 500 {
		s.log.Warn("cluster "+what+" refused", append(attrs, "peer", r.RemoteAddr, "err", err)...)
	}
	s.apiFail(w, r, status, fmt.Errorf("%s: %w", what, err))
}
