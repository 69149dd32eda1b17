// Package locker is the lock engine of Locking-Center: it decides who holds
// which key, who waits for it, which session owns what, and which fencing
// token each grant carries — and nothing else (no sockets, files or HTML).
//
// Every key with a holder or a waiter has an entry: its holder (a grant:
// token, owner, since) and its wait queue, a first-in-first-out list, both
// under the entry's mutex. A release hands the key to the head of the queue
// in the same critical section, so nothing can overtake a waiter: there is
// no moment at which a queued key looks free.
//
// A change of the table is planned, recorded, then applied: the entries it
// touches are locked (several at once in key order, so two multi-key
// changes never deadlock), the journal is handed one batch of changes — the
// releases and the grants to the next waiters together — and only once the
// journal has made it durable is the table changed; waiters are told
// (their callbacks run) only after every lock is let go, so a callback may
// write to a socket or call the table. A refused batch changes nothing. That makes the table a function of its
// journal, the shape a replicated state machine needs.
//
// What a change means is decided in one place, State: holds, sessions and
// the highest token, changed only by applying records, with no clock, no
// lock and no connection of its own, refusing a record that contradicts
// it. The engine proposes every batch to its Journal, and each of the
// three journals folds it with State: a table kept in memory folds into a
// State of its own (Table.State), walog's log folds its records with it at
// replay and for its compaction snapshots, and a cluster's raft FSM folds
// every committed entry with it. A batch State refuses is refused by the
// journal and changes nothing in the table.
//
// Guarantees:
//   - A key is held by at most one grant at a time.
//   - Waiters are granted in the order they joined the queue, v1 and
//     session alike; a withdrawn waiter (cancelled, reset, its session gone)
//     is out of the queue at once and is never granted.
//   - Every grant has a fencing token greater than every token the table
//     gave before (Options.TokenFloor carries the high-water mark across
//     restarts).
//   - Whatever releases "a grant" releases that grant only (Release, a
//     session's Unlock and end): never whoever holds the key by then.
//   - The Journal is told of a grant before anyone learns of it, and of a
//     release before it takes effect; if it refuses, nothing changes.
//   - A session's holds are released when it ends: Close, expiry past its
//     TTL, or EndSession.
//   - State for a key is dropped as soon as the key is free and nobody waits.
package locker
