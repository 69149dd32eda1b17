package web_test

import (
	"net"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/web"
	"github.com/locking-center/locking-center/wire"
)

// The wiring of main.go: one Metrics fed by the lock table's hooks and the
// TCP server's observer, served by the web handler with the rest.
func ExampleNew() {
	meters := metrics.New(metrics.Options{})
	table := locker.New(locker.Options{OnGrant: meters.ObserveWait, OnRelease: meters.ObserveHold})
	tcp := &wire.Server{Table: table, Observer: meters}
	opts := web.Options{
		Table:         table,
		StuckAfter:    10 * time.Minute,
		Metrics:       meters,
		Connections:   tcp.Connections,
		ListenAddress: ":22120",
		AllowedHosts:  []string{"locks.example.com"}, // WEB_ALLOWED_HOSTS
	}
	ln, err := net.Listen("tcp", opts.ListenAddress)
	if err != nil {
		return
	}
	srv := web.NewHTTPServer(web.New(opts))
	go srv.Serve(opts.Listener(ln)) // bounded to opts.MaxConnections
	// go tcp.Serve(tcpListener) ...
}
