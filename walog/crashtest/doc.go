// Package crashtest holds the crash test of the write-ahead log: it builds
// the real server binary, runs it with DATA_PATH under concurrent v1 and
// session clients, kills it with SIGKILL at random moments and restarts it,
// and checks the clients' histories: no key granted to two holders at once,
// fencing tokens strictly increasing per key across restarts and
// compactions, session holds restored disconnected, kept by a resume and
// released at expiry (see crash_test.go). A short run is the default;
// -crash-cycles=N (or LC_CRASH_CYCLES=N) makes a longer one. It has no code
// of its own.
package crashtest
