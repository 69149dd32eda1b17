// Package web serves Locking-Center's second port: the dashboard, the JSON
// API, the Prometheus metrics and the health probes. README.md in this
// folder documents every route.
//
// Guarantees:
//   - Every reset, from a form or from the JSON API, goes through the same
//     engine calls as the TCP actions ResetByKey and ResetBySource
//     (locker.Table.ResetByKey / ResetBySource), and is counted in
//     locking_center_resets_total like a TCP reset. Ending a session goes
//     through locker.Table.EndSession, as its expiry does.
//   - Only requests for a Host the server answers for are served (IP
//     literals, localhost, the listen address's name, the machine's host
//     name, Options.AllowedHosts); others get 421, so a page on another
//     site cannot reach the dashboard by DNS rebinding. /healthz and
//     /readyz answer any Host.
//   - Every state-changing route refuses cross-origin browser requests
//     (net/http.CrossOriginProtection); with a password set, every route
//     but /healthz and /readyz asks for HTTP basic auth (user "admin"), and
//     wrong passwords are logged, at most one line a second.
//   - The banner after a dashboard action shows what that action did: the
//     outcome travels in the redirect sealed with a key of this run, so a
//     made-up link shows no banner.
//   - Keys and sources are raw bytes: HTML output escapes them (templ), JSON
//     output escapes them (encoding/json, which turns bytes that are not
//     UTF-8 into U+FFFD, and then also sends the raw bytes in key_base64 /
//     source_base64), and a key inside a URL path is percent-encoded
//     byte by byte (package keypath), so any key, '/' and non-UTF-8 bytes
//     included, round-trips through /keys/{key} and /api/v1/keys/{key}.
//   - Reads cost what they show, not what the table holds: from 5,000 held
//     keys on, pages, lists and scrapes share a catalog of the keys (one
//     walk, rebuilt in the background at most every tenth of its build
//     time), and read each row they show afresh. The JSON list returns at
//     most MaxLimit keys a page.
//   - The web port's connections are bounded (Options.Listener) and idle
//     ones time out (NewHTTPServer).
//   - On a cluster node (Options.Cluster; cluster.go): every page says which
//     node served it and who leads, and every answer carries X-LC-Leader. A
//     follower never shows its applied state as the leader's: reads carry
//     X-LC-Applied-Index and say "as of index N", and what only the leader
//     knows (wait queues, session connections and clocks) is said to be
//     there, never shown as empty. Every state-changing request, every read
//     with ?consistent=1 and the sessions are served by the leader
//     (Peers.ToLeader, over the cluster port), after this node's Host,
//     password and CSRF checks; one that came from another node is never
//     forwarded again. On the leader, an answer that says nothing changed
//     waits for Cluster.Confirm. A single node's pages and answers are
//     untouched.
package web
