// Package web serves Locking-Center's second port: the dashboard, the JSON
// API, the Prometheus metrics and the health probes.
//
// Guarantees:
//   - Every reset, from a form or from the JSON API, goes through the same
//     engine calls as the TCP actions ResetByKey and ResetBySource
//     (locker.Table.ResetByKey / ResetBySource), and is counted in
//     locking_center_resets_total like a TCP reset.
//   - Every state-changing route refuses cross-origin browser requests
//     (net/http.CrossOriginProtection); with a password set, every route
//     but /healthz and /readyz asks for HTTP basic auth (user "admin").
//   - Keys and sources are raw bytes: HTML output escapes them (templ), JSON
//     output escapes them (encoding/json, which turns bytes that are not
//     UTF-8 into U+FFFD), and a key inside a URL path is percent-encoded
//     byte by byte (package keypath), so any key, '/' and non-UTF-8 bytes included,
//     round-trips through /keys/{key} and /api/v1/keys/{key}.
//   - Reads never block the lock path for long: they walk the table one key
//     at a time (locker.Table.Each) and sort only the page they show.
package web
