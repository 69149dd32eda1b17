package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/client"
)

// deadAddress is a loopback address nobody listens on.
func deadAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestAddressListDeadEntry: a list with a dead address works for v1 and
// sessions, whichever order a call tries them in, and a list of dead
// addresses is unreachable with the reason of each.
func TestAddressListDeadEntry(t *testing.T) {
	addr, _ := serve(t)
	dead := deadAddress(t)
	ctx := context.Background()
	for _, list := range []string{dead + "," + addr, addr + " , " + dead, dead + "," + dead + "," + addr + ","} {
		c := client.New(list)
		for range 8 { // a random order each call: the dead one comes first in some
			if err := c.Lock(ctx, "k"); err != nil {
				t.Fatalf("Lock through %q: %v", list, err)
			}
			if err := c.Unlock(ctx, "k"); err != nil {
				t.Fatalf("Unlock through %q: %v", list, err)
			}
			s, err := client.NewSession(ctx, list)
			if err != nil {
				t.Fatalf("session through %q: %v", list, err)
			}
			if _, err := s.TryLock(ctx, "s"); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	dead2 := deadAddress(t)
	for _, err := range []error{
		client.New(dead+","+dead2).TryLock(ctx, "k"),
		func() error { _, err := client.NewSession(ctx, dead+","+dead2); return err }(),
	} {
		if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), dead2) {
			t.Errorf("only dead addresses: %v; want ErrUnreachable naming both", err)
		}
	}
}

// TestAddressListBad: an address that does not parse is reported, and
// nothing is dialled.
func TestAddressListBad(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []string{"", " , ", "localhost", "a:1,b", ":22119"} {
		err := client.New(bad).Lock(ctx, "k")
		if !errors.Is(err, client.ErrUnreachable) || !strings.Contains(err.Error(), "HOST:PORT") {
			t.Errorf("New(%q).Lock = %v; want ErrUnreachable asking for HOST:PORT", bad, err)
		}
		if _, err := client.NewSession(ctx, bad); !errors.Is(err, client.ErrUnreachable) {
			t.Errorf("NewSession(%q) = %v; want ErrUnreachable", bad, err)
		}
	}
}

// TestDialTimeoutPerAttempt: an address that accepts and never answers
// the open costs one dial timeout, then the next address opens the
// session.
func TestDialTimeoutPerAttempt(t *testing.T) {
	addr, _ := serve(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close() // the kernel completes the handshakes; nobody reads
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 4 {
		s, err := client.NewSession(ctx, silent.Addr().String()+","+addr, client.WithDialTimeout(300*time.Millisecond))
		if err != nil {
			t.Fatalf("session past a silent address: %v", err)
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = client.NewSession(ctx, silent.Addr().String(), client.WithDialTimeout(300*time.Millisecond))
	if !errors.Is(err, client.ErrUnreachable) || ctx.Err() != nil {
		t.Fatalf("session with a silent address only: %v; want ErrUnreachable after the dial timeout", err)
	}
}
