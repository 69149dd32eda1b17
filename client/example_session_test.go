package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/locking-center/locking-center/client"
)

// ExampleSession shares one session between goroutines: each takes the
// key in turn with Do, and the fencing token it gets grows with every
// grant, so a resource that keeps the highest token seen can refuse a
// holder whose turn has passed.
func ExampleSession() {
	addr, stop := exampleServer()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.NewSession(ctx, addr, client.WithSource("billing"), client.WithTTL(15*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(ctx) // releases whatever the session still holds

	var last uint64
	for range 3 {
		err := s.Do(ctx, "invoices/2026-11", func(ctx context.Context, token uint64) error {
			// ctx ends if the session is lost while this runs: the key is
			// then no longer held, and the work must stop.
			if token <= last {
				return errors.New("token did not grow")
			}
			last = token
			return nil
		})
		fmt.Println("done:", err)
	}

	// TryLock does not wait: a key held by anyone, this session included,
	// is not won.
	tok, _ := s.Lock(ctx, "reports")
	_, err = s.TryLock(ctx, "reports")
	fmt.Println("busy:", errors.Is(err, client.ErrLocked))
	fmt.Println("unlock:", s.Unlock(ctx, "reports", tok))

	select {
	case <-s.Done():
		fmt.Println("lost:", s.Err())
	default:
		fmt.Println("session alive")
	}
	// Output:
	// done: <nil>
	// done: <nil>
	// done: <nil>
	// busy: true
	// unlock: <nil>
	// session alive
}
