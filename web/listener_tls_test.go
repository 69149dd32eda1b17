package web

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/tlsconf/tlstest"
)

// TestListenerTLS: with TLSConfig the web port speaks TLS only, the
// handler sees Request.TLS, and a connection past the bound reads its 503
// inside TLS.
func TestListenerTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "web test CA")
	leaf := ca.Issue(t, tlstest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Logger: slog.New(slog.DiscardHandler), MaxConnections: 1,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{leaf.TLS}}}
	srv := NewHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "no TLS state", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	}))
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(o.Listener(ln)) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		wg.Wait()
	})
	url := "https://" + ln.Addr().String() + "/"
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET over TLS: %s %q", resp.Status, body)
	}
	// hc keeps its connection open: the only slot. Another client is
	// refused, in words it can read.
	// The refusal is written as soon as the handshake is done, before any
	// request (an http.Client may then see it as an answer to nothing):
	// read it off the TLS connection itself.
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatalf("connect past the bound: %v, want a 503 inside TLS", err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	refusal, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(refusal), "HTTP/1.1 503 ") {
		t.Fatalf("past the bound, read %q; want a 503 inside TLS", refusal)
	}
	// Plain HTTP on the TLS port gets no page.
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	tr.CloseIdleConnections() // free the slot
	if resp, err := (&http.Client{Transport: plain, Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP answered 200 on the TLS port")
		}
	}
}
