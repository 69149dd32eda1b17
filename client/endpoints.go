package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"
)

// An address is one HOST:PORT or a comma-separated list of them, the
// nodes of a cluster ("a:22119,b:22119,c:22119"); a HOST may be a DNS
// name with several A/AAAA records. Every node of a cluster proxies to its
// leader (docs/cluster.md), so any node that answers will do: a connect
// round resolves every name again (records change: a pod rescheduled, a
// node replaced), takes every address of every entry, and tries them in
// random order, each attempt bounded by WithDialTimeout, until one
// answers.

// Bounds of an address list, so that a mistaken list or a DNS answer
// cannot make one round unbounded.
const (
	// maxEntries is how many entries an address list may have.
	maxEntries = 64
	// maxTargets is how many addresses one round tries at most.
	maxTargets = 256
)

// endpoint is one entry of an address list.
type endpoint struct {
	host, port string
	// tls is the TLS configuration for this entry, its ServerName the
	// entry's host unless WithTLS gave one; nil for plain TCP.
	tls *tls.Config
}

// target is one address a round dials: an IP and port, or the entry as
// written when the tests' dial function replaces the dialer.
type target struct {
	addr string
	ep   *endpoint
}

// parseAddresses splits a comma-separated list of HOST:PORT; blanks
// around the entries are ignored.
func parseAddresses(list string) ([]endpoint, error) {
	var eps []endpoint
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil {
			return nil, fmt.Errorf("address %q: want HOST:PORT: %w", entry, err)
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("address %q: want HOST:PORT", entry)
		}
		if len(eps) == maxEntries {
			return nil, fmt.Errorf("address list %q: more than %d entries", list, maxEntries)
		}
		eps = append(eps, endpoint{host: host, port: port})
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("address %q: want HOST:PORT, or a comma-separated list of them", list)
	}
	return eps, nil
}

// setAddresses parses the address list into c.endpoints, each with its
// TLS configuration. A list that does not parse is kept as c.addrErr,
// which every connection attempt returns.
func (c *config) setAddresses(list string) {
	eps, err := parseAddresses(list)
	if err != nil {
		c.addrErr = fmt.Errorf("%w: %w", ErrUnreachable, err)
		return
	}
	for i := range eps {
		if c.tls == nil {
			continue
		}
		if c.tls.ServerName != "" {
			eps[i].tls = c.tls
			continue
		}
		// Each entry's own name: a.example's certificate need not name
		// b.example. Entries with the same host share one clone.
		for j := range i {
			if eps[j].host == eps[i].host {
				eps[i].tls = eps[j].tls
				break
			}
		}
		if eps[i].tls == nil {
			eps[i].tls = c.tls.Clone()
			eps[i].tls.ServerName = eps[i].host
		}
	}
	c.endpoints = eps
}

// targets resolves the address list for one round and returns every
// address in random order. A name that does not resolve is skipped; the
// error says why when nothing is left.
func (c *config) targets(ctx context.Context) ([]target, error) {
	if c.addrErr != nil {
		return nil, c.addrErr
	}
	var out []target
	seen := make(map[string]bool)
	add := func(addr string, ep *endpoint) {
		if !seen[addr] && len(out) < maxTargets {
			seen[addr] = true
			out = append(out, target{addr: addr, ep: ep})
		}
	}
	var errs []error
	for i := range c.endpoints {
		ep := &c.endpoints[i]
		if _, err := netip.ParseAddr(ep.host); err == nil || c.dial != nil {
			add(net.JoinHostPort(ep.host, ep.port), ep)
			continue
		}
		lctx, cancel := c.attempt(ctx)
		ips, err := c.resolver().LookupNetIP(lctx, "ip", ep.host)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			errs = append(errs, fmt.Errorf("resolving %s: %w", ep.host, err))
			continue
		}
		for _, ip := range ips {
			add(net.JoinHostPort(ip.Unmap().String(), ep.port), ep)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, roundError(errs))
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

func (c *config) resolver() *net.Resolver {
	if c.res != nil {
		return c.res
	}
	return net.DefaultResolver
}

// errAttemptTimeout is the cause of an attempt's context when
// WithDialTimeout ends it (not the caller's context).
var errAttemptTimeout = errors.New("no answer within the dial timeout")

// attempt returns the context of one connection attempt at one address:
// ctx, bounded by the dial timeout.
func (c *config) attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.dialTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, c.dialTimeout, errAttemptTimeout)
}

// connect dials t and makes the TLS handshake when the client has
// WithTLS, both bounded by actx (an attempt's context). It returns an
// error wrapping ErrUnreachable, or ctx's error when the caller's ctx
// ended.
func (c *config) connect(ctx, actx context.Context, d *net.Dialer, t target) (net.Conn, error) {
	var conn net.Conn
	var err error
	if c.dial != nil {
		conn, err = c.dial(actx, t.addr)
	} else {
		conn, err = d.DialContext(actx, "tcp", t.addr)
	}
	if err == nil {
		conn, err = handshake(actx, conn, t.ep.tls)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if errors.Is(context.Cause(actx), errAttemptTimeout) {
			err = fmt.Errorf("%w (%v): %w", errAttemptTimeout, c.dialTimeout, err)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, t.addr, err)
	}
	return conn, nil
}

// backoff is the wait before connect round n+1 (n ≥ 0): doubling from
// minBackoff up to maxBackoff, with jitter (half of it random), so that
// the clients of a node that went down do not all come back in step.
func backoff(n int) time.Duration {
	d := maxBackoff
	if n < 16 {
		d = min(maxBackoff, minBackoff<<n)
	}
	return d/2 + rand.N(d/2+1)
}

// joinUnreachable is the error of a round in which no address answered:
// ErrUnreachable with every address's reason.
func joinUnreachable(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Errorf("%w: no address answered: %w", ErrUnreachable, roundError(errs))
}

// roundError is the reasons of every address of a round, on one line.
type roundError []error

func (e roundError) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e roundError) Unwrap() []error { return e }
