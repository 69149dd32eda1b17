// Package locker is the lock engine of Locking-Center: it decides who holds
// which key and who waits for it, and nothing else (no sockets, files or HTML).
//
// Each key is a buffered channel of capacity one. Sending into it acquires
// the key; receiving from it releases the key. Goroutines blocked sending are
// the key's wait queue, and the Go runtime serves them first in, first out:
// a release hands the slot straight to the oldest live sender, so a TryLock
// arriving at the same moment can never steal a handover.
//
// A goroutine parked on a send cannot be reached by anyone, so beside each
// channel the engine keeps a cancellation registry: every waiter registers
// under its request id with a channel of its own that ResetBySource closes,
// and every waiter also watches the key's reset channel (closed by ResetByKey)
// and its context (cancelled when the client hangs up).
//
// Guarantees:
//   - A key is held by at most one holder at a time.
//   - Waiters are granted in the order they joined the queue.
//   - A waiter that is reset, cancelled or whose context ends never ends up
//     holding the key; a grant that races with such an exit is handed on.
//   - The Journal is told of an acquire before Lock or TryLock returns
//     success, and of a release before the release takes effect; if it
//     refuses, the grant is undone or the release does not happen.
//   - State for a key is dropped as soon as the key is free and nobody waits.
package locker
