package web

import "net/http"

// routes registers the dashboard's pages.
func (s *server) routes(mux *http.ServeMux) {}
