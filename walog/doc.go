// Package walog is the write-ahead log of Locking-Center: an append-only
// file of grant and release records that lets the held keys, their fencing
// tokens and the highest token ever given survive a crash or a deploy. It
// knows nothing of locks beyond the records it is handed; the engine
// decides what is held, the log only makes it durable.
//
// Guarantees:
//   - Commit (the log's side of locker.Journal) returns nil only once the
//     batch is written and fsynced, as one record: a crash keeps all of it
//     or none. Concurrent callers share one write and one fsync (group
//     commit): whoever writes a batch takes every record queued by then —
//     the writer goroutine, or a lone caller that finds the log idle and
//     writes its own record.
//   - After a failed write or fsync the log refuses every later record with
//     an error wrapping ErrFailed until the process restarts; it never
//     retries an fsync and pretends the data is safe (see README.md).
//   - Open replays the file and hands back every live holder. A torn final
//     record is cut off and logged: the file ends inside it, or it is
//     followed by nothing but zeros and is zeros itself from its start, from
//     a sector boundary inside its frame, or in a whole sector of it (the
//     sectors a power loss did not write). Anything else that does not
//     decode is corruption, reported as an error wrapping ErrCorrupt that
//     names the file and byte offset; so is a whole record that contradicts
//     the ones before it (a grant of a held key, a release of a grant that
//     is not current, a token of 2^63 or more, a session TTL out of range).
//   - Open locks DATA_PATH.lock (flock) until Close: a second process on
//     the same log gets ErrInUse.
//   - Compaction rewrites the live holders into a temporary file in the same
//     folder, fsyncs it, renames it over the log and fsyncs the folder, so a
//     crash at any instant leaves the old or the new log whole. It runs
//     beside the writer; appends stall only while the records that arrived
//     during the rewrite are copied over and the rename is made durable.
//
// The code is in four parts, a file each: opening (open.go), replay
// (replay.go), the group-commit writer (writer.go) and compaction
// (compact.go); log.go holds the Log's fields and counters, format.go the
// record format.
//
// The file format, the crash assumptions and what to do when the server
// refuses to start are in README.md in this folder.
package walog
