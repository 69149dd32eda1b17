package web_test

import (
	"net/http"
	"time"

	"github.com/locking-center/locking-center/locker"
	"github.com/locking-center/locking-center/web"
	"github.com/locking-center/locking-center/wire"
)

// The wiring of main.go: one Metrics fed by the lock table's hooks and the
// TCP server's observer, served by the web handler with the rest.
func ExampleNew() {
	metrics := web.NewMetrics(web.MetricsOptions{})
	table := locker.New(locker.Options{OnGrant: metrics.ObserveWait, OnRelease: metrics.ObserveHold})
	tcp := &wire.Server{Table: table, Observer: metrics}
	handler := web.New(web.Options{
		Table:       table,
		StuckAfter:  10 * time.Minute,
		Metrics:     metrics,
		Connections: tcp.Connections,
	})
	_ = &http.Server{Addr: ":22120", Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	// go tcp.Serve(tcpListener); go httpServer.ListenAndServe() ...
}
