// Package assets holds the dashboard's static files (style sheet, script,
// icon), embedded in the binary, and serves them.
//
// Each file is served under /assets/NAME; URL returns that path with the
// file's content hash as ?v=, so a page always asks for the bytes it was
// built with. A request carrying the current hash is cached for a year
// (immutable); any other gets an ETag and must revalidate. The files need
// no build step and no network: no JavaScript framework is vendored.
package assets

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed *.css *.js *.svg
var files embed.FS

// asset is one embedded file, read once at start.
type asset struct {
	body        []byte
	hash        string // first 12 hex digits of the SHA-256 of body
	contentType string
}

// byName is filled at init and read-only afterwards.
var byName = func() map[string]asset {
	m := make(map[string]asset)
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic("assets: " + err.Error()) // the embed is part of the binary
	}
	for _, e := range entries {
		body, err := files.ReadFile(e.Name())
		if err != nil {
			panic("assets: " + err.Error())
		}
		sum := sha256.Sum256(body)
		ct := mime.TypeByExtension(path.Ext(e.Name()))
		if ct == "" {
			ct = "application/octet-stream"
		}
		m[e.Name()] = asset{body: body, hash: hex.EncodeToString(sum[:6]), contentType: ct}
	}
	return m
}()

// URL returns the path of the named file with its content hash, for use in
// pages. It panics on a name that is not embedded: that is a programming
// error caught by any test that renders a page.
func URL(name string) string {
	a, ok := byName[name]
	if !ok {
		panic("assets: no embedded file " + name)
	}
	return "/assets/" + name + "?v=" + a.hash
}

// Handler serves GET /assets/NAME.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/assets/")
		a, ok := byName[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("ETag", `"`+a.hash+`"`)
		if r.URL.Query().Get("v") == a.hash {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		// ServeContent answers If-None-Match with 304 and handles ranges.
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	})
}
