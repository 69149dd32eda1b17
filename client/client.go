// Package client is the Go client of Locking-Center. It offers two ways
// to talk to a server.
//
// A Client speaks v1: every call opens one TCP connection, sends one
// frame, reads the one-byte answer and closes. Lock blocks until the key is
// granted; cancelling its context hangs up, and the server withdraws the
// waiter from the queue; a grant that crossed the hang-up is unlocked
// again, so giving up never leaves a ghost behind. A v1 hold has no owner:
// it stays until someone unlocks or resets the key.
//
//	c := client.New("localhost:22119", client.WithSource("billing"))
//	err := c.Do(ctx, "invoices/2026-11", func() error {
//		return closeTheMonth()
//	})
//
// A Session (NewSession) is one connection shared by many goroutines, on
// which every grant has a fencing token and belongs to the session: Unlock
// releases this session's grant only, and the holds end with the session
// (Close, or one TTL after the program stopped being heard from). The
// session pings and resumes by itself and tells the program, through Done
// and Err, when it was lost.
//
//	s, err := client.NewSession(ctx, "localhost:22119", client.WithTTL(15*time.Second))
//	...
//	err = s.Do(ctx, "invoices/2026-11", func(ctx context.Context, token uint64) error {
//		return closeTheMonth(ctx, token) // ctx ends if the session is lost
//	})
//
// Either takes a cluster's nodes instead of one address: a
// comma-separated list ("lc1:22119,lc2:22119,lc3:22119"), or a DNS name
// with several records. Every node proxies to the leader, so each
// connection goes to any node that answers, tried in random order, each
// attempt bounded by WithDialTimeout; a session that loses its node
// resumes through another within its TTL.
//
// Either speaks TLS with WithTLS (a *tls.Config, or TLSFiles' Config from
// PEM files), for a server started with TLS_CERT and TLS_KEY; the
// protocols inside are the same.
//
// Guarantees of both: a request that was not sent is never reported as
// done; a request whose answer was lost is never sent again blindly; an
// Unlock or reset whose answer was lost returns ErrOutcomeUnknown; a
// Session's Lock or TryLock is reissued with its id after the resume
// (SPEC's Reissue), and a Client's (v1) Lock or TryLock whose answer was
// lost returns ErrOutcomeUnknown too, the key perhaps granted to nobody
// who knows (reset or unlock it); any other error from Lock or TryLock
// leaves nothing held; Do unlocks when its function panics.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// Errors returned by the client. Compare with errors.Is.
var (
	// ErrLocked is returned by TryLock when someone else holds the key: the
	// try was not won. Nothing is held.
	ErrLocked = errors.New("locking-center: key is held by someone else")
	// ErrReset is returned by Lock (and Wait, Do) when the server answered
	// '-': the key or the caller's source was reset while it waited, or the
	// server could not make the grant durable. Nothing is held.
	ErrReset = errors.New("locking-center: lock refused (reset while waiting, or not durable)")
	// ErrRefused is returned when the server answered '-' to Unlock, a reset
	// or TryLock (for Unlock: the key was not held), and for requests the
	// client will not send (empty or over-long key or source).
	ErrRefused = errors.New("locking-center: refused")
	// ErrUnreachable wraps every failure to talk to the server: the
	// connection could not be made, broke, or closed without an answer.
	ErrUnreachable = errors.New("locking-center: server unreachable")
)

// DefaultAddress is the server's default lock port.
const DefaultAddress = "localhost:22119"

// Client talks to one server, or to any node of a cluster. It holds no
// connection between calls and is safe for concurrent use.
type Client struct {
	config
	dialer net.Dialer
}

// config is what the options set, for a Client and a Session alike.
type config struct {
	source      string
	dialTimeout time.Duration
	ttl         time.Duration
	auth        string
	logger      *slog.Logger
	tls         *tls.Config // nil: plain TCP (WithTLS)
	res         *net.Resolver
	// endpoints is the address list (setAddresses); addrErr, when the
	// list did not parse, is what every connection attempt returns.
	endpoints []endpoint
	addrErr   error
	// dial replaces the dialer in the package's tests.
	dial func(ctx context.Context, address string) (net.Conn, error)
}

func defaultConfig() config {
	return config{dialTimeout: 5 * time.Second, logger: slog.New(slog.DiscardHandler)}
}

// Option configures a Client or a Session.
type Option func(*config)

// WithSource names the requester (a service or host name, at most 127
// bytes). Without it the server uses the client's IP address.
func WithSource(source string) Option { return func(c *config) { c.source = source } }

// WithDialTimeout bounds each connection attempt at one address: the
// name's lookup, the TCP connect and the TLS handshake, and for a session
// the open or resume exchange too (default 5s; 0: only ctx bounds it).
// With an address list, an attempt that fails or times out goes on to the
// next address. The default leaves a cluster's follower time to find a
// new leader (it holds a connection up to LEADER_WAIT for one) while a
// dead address costs a bounded time.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

// WithResolver resolves the names of the address list with r instead of
// net.DefaultResolver (for a resolver of one's own: a DNS server that is
// not the system's, or a test's).
func WithResolver(r *net.Resolver) Option { return func(c *config) { c.res = r } }

// WithTTL asks for a session TTL; the server clamps it to 1s … 10 min, and
// 0, the default, asks for the server's SESSION_TTL. Session only.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithAuthToken presents the server's AUTH_TOKEN when a session opens or
// resumes. Session only: a server with AUTH_TOKEN set refuses v1.
func WithAuthToken(token string) Option { return func(c *config) { c.auth = token } }

// WithLogger receives a session's notes: connection lost, resumed, a stray
// grant released, session lost (default: none). Session only.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New returns a client of the server at address: HOST:PORT, or the
// nodes of a cluster as a comma-separated list ("a:22119,b:22119"), a
// HOST being an IP or a DNS name with one or several records. Each call
// tries the addresses in random order until one connects, and sends its
// frame on that connection only: a frame that was sent is never sent
// again, to that node or another. An address that does not parse makes
// every call return ErrUnreachable saying why.
func New(address string, opts ...Option) *Client {
	c := &Client{config: defaultConfig()}
	for _, o := range opts {
		o(&c.config)
	}
	c.setAddresses(address)
	return c
}

// Source returns the source name the client sends ("" for the peer address).
func (c *Client) Source() string { return c.source }

// Lock waits until key is granted. It returns ErrReset when the server
// refused (reset while waiting), ErrUnreachable, or ctx's error when ctx
// ended first; the client then hangs up and the server withdraws the
// waiter, and a grant that crossed the hang-up is unlocked again. When the
// connection breaks after the frame was sent (the node died, or stopped
// leading), it returns ErrOutcomeUnknown with ErrUnreachable: the key may
// have been granted, and is then held until someone unlocks or resets it.
func (c *Client) Lock(ctx context.Context, key string) error {
	a, err := c.do(ctx, protocol.Lock, key, c.source)
	if err != nil {
		return err
	}
	if a == protocol.AnswerFail {
		return fmt.Errorf("lock %q: %w", key, ErrReset)
	}
	return c.answer("lock", key, a)
}

// TryLock takes key only if it is free now. It returns ErrLocked when
// someone holds it.
func (c *Client) TryLock(ctx context.Context, key string) error {
	a, err := c.do(ctx, protocol.TryLock, key, c.source)
	if err != nil {
		return err
	}
	if a == protocol.AnswerLocked {
		return fmt.Errorf("trylock %q: %w", key, ErrLocked)
	}
	return c.answer("trylock", key, a)
}

// Unlock releases key, whoever holds it (v1 has no owners). It returns
// ErrRefused when the key was not held, and ErrOutcomeUnknown (with
// ErrUnreachable) when the frame was sent but no answer came: the key may
// or may not have been released, and Unlock does not send it again — a
// second Unlock could release the key of whoever took it since.
func (c *Client) Unlock(ctx context.Context, key string) error {
	a, err := c.do(ctx, protocol.Unlock, key, c.source)
	if err != nil {
		return err
	}
	return c.answer("unlock", key, a)
}

// Wait waits for key's turn and releases it at once: it returns when
// everyone queued before the caller is done.
func (c *Client) Wait(ctx context.Context, key string) error {
	if err := c.Lock(ctx, key); err != nil {
		return err
	}
	return c.Unlock(context.WithoutCancel(ctx), key)
}

// ResetByKey drops key's holder and refuses all its waiters.
func (c *Client) ResetByKey(ctx context.Context, key string) error {
	a, err := c.do(ctx, protocol.ResetByKey, key, "")
	if err != nil {
		return err
	}
	return c.answer("reset key", key, a)
}

// ResetBySource refuses every waiter of source and releases every key it
// holds. An empty source means the client's own address, as the server
// sees it.
func (c *Client) ResetBySource(ctx context.Context, source string) error {
	a, err := c.do(ctx, protocol.ResetBySource, "", source)
	if err != nil {
		return err
	}
	return c.answer("reset source", source, a)
}

// Do runs fn while holding key: it locks, calls fn, and unlocks whatever fn
// returns (the unlock is not cancelled by ctx). Errors of fn and of the
// unlock are both returned. When fn panics (or calls runtime.Goexit), the
// key is unlocked first and the panic goes on.
func (c *Client) Do(ctx context.Context, key string, fn func() error) error {
	if err := c.Lock(ctx, key); err != nil {
		return err
	}
	unlock := func() error {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return c.Unlock(uctx, key)
	}
	returned := false
	defer func() {
		if !returned {
			_ = unlock()
		}
	}()
	ferr := fn()
	returned = true
	return errors.Join(ferr, unlock())
}

func (c *Client) answer(op, what string, a byte) error {
	switch a {
	case protocol.AnswerOK:
		return nil
	case protocol.AnswerFail:
		return fmt.Errorf("%s %q: %w", op, what, ErrRefused)
	}
	return fmt.Errorf("%s %q: unexpected answer %q: %w", op, what, a, ErrUnreachable)
}

// do sends one frame and returns the answer byte.
func (c *Client) do(ctx context.Context, a protocol.Action, key, source string) (byte, error) {
	f := protocol.Frame{Action: a, Key: key, Source: source}
	if err := f.Valid(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	var buf [protocol.MaxFrame]byte
	frame, _ := f.Append(buf[:0]) // Valid checked the lengths

	conn, err := c.dialAny(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	// Giving up hangs up: the server reads the end of the stream and
	// withdraws the waiter. Only the write side is closed, so that a grant
	// the server sent just before it noticed is still read (and given back
	// below) instead of left held by nobody.
	stop := context.AfterFunc(ctx, func() {
		if closeWrite(conn) {
			_ = conn.SetReadDeadline(time.Now().Add(hangUpGrace))
			return
		}
		conn.Close()
	})

	if _, err := conn.Write(frame); err != nil {
		stop()
		return 0, c.lost(ctx, a, err)
	}
	var ans [1]byte
	_, err = io.ReadFull(conn, ans[:])
	if !stop() { // given up: a Lock's caller gets ctx's error whatever was read
		if err == nil && ans[0] == protocol.AnswerOK && (a == protocol.Lock || a == protocol.TryLock) {
			if uerr := c.giveBack(ctx, key); uerr != nil {
				return 0, fmt.Errorf("%w; the grant that crossed it could not be given back: %v", ctx.Err(), uerr)
			}
		}
		if a == protocol.Unlock || a == protocol.ResetByKey || a == protocol.ResetBySource {
			if err == nil {
				return ans[0], nil // answered all the same: the outcome is known
			}
			// Sent, and no answer read: whether it took effect is unknown.
			return 0, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
		}
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, c.lost(ctx, a, err)
	}
	return ans[0], nil
}

// dialAny connects to the first address of a round that answers: one
// round, each address once, in random order. Nothing has been sent when it
// fails, so trying the next address is always safe.
func (c *Client) dialAny(ctx context.Context) (net.Conn, error) {
	targets, err := c.targets(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, t := range targets {
		actx, cancel := c.attempt(ctx)
		conn, err := c.connect(ctx, actx, &c.dialer, t)
		cancel()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, err)
	}
	return nil, joinUnreachable(errs)
}

// lost is the error of a request whose frame may have reached the server
// but whose answer did not come (the connection broke: a node died, or
// stopped leading): the outcome is unknown, and the frame is not sent
// again. A Lock or TryLock may have been granted — a v1 grant held by
// nobody who knows, until a reset or an Unlock of the key; an Unlock or a
// reset may have taken effect, and sending it again could release a
// later holder's grant. Only ctx's end is reported as itself.
func (c *Client) lost(ctx context.Context, a protocol.Action, err error) error {
	err = c.broken(ctx, err)
	if ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// hangUpGrace is how long a request given up still reads after closing
// its write side. The server closes at once when it reads the hang-up;
// this bounds the wait for one that does not.
const hangUpGrace = 2 * time.Second

// giveBack unlocks key, granted as the caller gave up: nobody else would.
func (c *Client) giveBack(ctx context.Context, key string) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.dialTimeout+hangUpGrace)
	defer cancel()
	return c.Unlock(uctx, key)
}

func (c *Client) broken(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}
