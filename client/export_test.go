package client

import (
	"context"
	"net"
)

// HangUpGrace is hangUpGrace, for the tests of the client package.
const HangUpGrace = hangUpGrace

// WithDialFunc makes a session dial with dial, for tests with a fake peer.
func WithDialFunc(dial func(ctx context.Context, address string) (net.Conn, error)) Option {
	return func(c *config) { c.dial = dial }
}
