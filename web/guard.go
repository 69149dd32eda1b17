package web

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
)

// hostPolicy decides which Host headers the web port answers, so that a
// page on another site cannot reach the dashboard through DNS rebinding:
// such a page makes the browser send the attacker's own name as Host, a
// name the server does not know.
//
// Allowed, whatever the port:
//   - an IP address literal (127.0.0.1, [::1], 192.0.2.7): a name that no
//     DNS answer can rebind, so a browser sends it only to a page this
//     server itself served. This also keeps working behind port mapping
//     and NAT (a container's published port), where the address in the
//     URL is not one of the server's own;
//   - "localhost" and any name under ".localhost" (browsers resolve these
//     to loopback themselves, RFC 6761);
//   - the host of the listen address when it is a name;
//   - the machine's host name (os.Hostname) and its first label;
//   - every entry of Options.AllowedHosts: an exact name, "*.example.com"
//     for the names under example.com, or "*" for any Host at all
//     (turns the check off; for a proxy that rewrites Host freely).
//
// Names compare without case and without a final dot.
type hostPolicy struct {
	any      bool
	names    map[string]bool
	suffixes []string // ".example.com" for "*.example.com"
}

func newHostPolicy(listen string, allowed []string) hostPolicy {
	p := hostPolicy{names: map[string]bool{"localhost": true}, suffixes: []string{".localhost"}}
	if h := hostOnly(listen); h != "" {
		p.names[normalHost(h)] = true
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		hn = normalHost(hn)
		p.names[hn] = true
		first, _, _ := strings.Cut(hn, ".")
		p.names[first] = true
	}
	for _, a := range allowed {
		a = normalHost(strings.TrimSpace(a))
		switch {
		case a == "":
		case a == "*":
			p.any = true
		case strings.HasPrefix(a, "*."):
			p.suffixes = append(p.suffixes, a[1:])
		default:
			p.names[normalHost(hostOnly(a))] = true
		}
	}
	return p
}

// allows reports whether a request with this Host header is answered. An
// empty Host (HTTP/1.0 without one) is not what a browser sends and
// passes.
func (p hostPolicy) allows(hostHeader string) bool {
	if p.any || hostHeader == "" {
		return true
	}
	h := hostOnly(hostHeader)
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = normalHost(h)
	if p.names[h] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

// hostOnly strips the port (and IPv6 brackets) from a host[:port].
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

func normalHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// logLimiter keeps a flood of refused requests or connections from
// flooding the log: it lets one line through per interval and counts the
// lines it held back, which the next line reports.
type logLimiter struct {
	interval time.Duration

	// mu guards next and held.
	mu   sync.Mutex
	next time.Time // when the next line may pass
	held int       // lines held back since the last one passed
}

// allow reports whether a line may be written at now and, if so, how many
// were held back before it.
func (l *logLimiter) allow(now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.held++
		return false, 0
	}
	held, l.held = l.held, 0
	l.next = now.Add(l.interval)
	return true, held
}
