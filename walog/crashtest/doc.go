// Package crashtest holds the crash test of the write-ahead log: it builds
// the real server binary, runs it with DATA_PATH under concurrent v1 and
// session clients, kills it with SIGKILL at random moments and restarts it,
// and checks the clients' histories: no key granted to two holders at once,
// fencing tokens strictly increasing per key across restarts and
// compactions, session holds restored disconnected, kept by a resume and
// released at expiry (see crash_test.go). TestCrashRestartUnderLoad
// (load_test.go) runs 18 clients on 8 keys against the failpoint build,
// kills it at each named crash point and checks every cycle's history with
// package history (porcupine); besides the load, one key is held across
// every kill by a grant known to the test, so a restart that loses holds is
// caught in the cycle it happens. TestWaiterDisconnectRaces (hostile_test.go)
// races 10,000 waiter departures against the release over real sockets.
// A short run is the default;
// -crash-cycles=N (or LC_CRASH_CYCLES=N) and -load-cycles=N (LC_LOAD_CYCLES)
// make longer ones; make soak runs 1,000 load cycles. It has no code
// of its own.
package crashtest
