// Package crashtest holds the crash test of the write-ahead log: it builds
// the real server binary, runs it with DATA_PATH under concurrent clients,
// kills it with SIGKILL at random moments and restarts it, and checks the
// clients' histories (see crash_test.go). It has no code of its own.
package crashtest
