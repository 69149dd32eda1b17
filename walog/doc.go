// Package walog is the write-ahead log of Locking-Center: an append-only
// file of acquire and release records that lets the held keys survive a
// crash or a deploy. It knows nothing of locks beyond the records it is
// handed; the engine decides what is held, the log only makes it durable.
//
// Guarantees:
//   - Acquire and Release return nil only once their record is written and
//     fsynced. Concurrent callers share one write and one fsync (group
//     commit): a single writer goroutine takes every queued record at once.
//   - After a failed write or fsync the log refuses every later record with
//     an error wrapping ErrFailed until the process restarts; it never
//     retries an fsync and pretends the data is safe (see README.md).
//   - Open replays the file and hands back every live holder. A torn final
//     record (the file ends inside it, or in zeroed space) is cut off and
//     logged; anything else that does not decode is corruption, reported as
//     an error wrapping ErrCorrupt that names the file and byte offset.
//   - Compaction rewrites the live holders into a temporary file in the same
//     folder, fsyncs it, renames it over the log and fsyncs the folder, so a
//     crash at any instant leaves the old or the new log whole. It runs
//     beside the writer; appends stall only while the records that arrived
//     during the rewrite are copied over and the rename is made durable.
//
// The file format, the crash assumptions and what to do when the server
// refuses to start are in README.md in this folder.
package walog
