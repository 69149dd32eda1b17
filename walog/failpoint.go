//go:build !failpoints

package walog

// Failpoints are named places where a crash test can stop the process
// (see failpoint_on.go, built with -tags failpoints). In the normal build
// failpointsOn is false and failpoint does nothing: the calls inline to
// nothing and the code guarded by failpointsOn is compiled out.
const failpointsOn = false

// failpoint marks the crash point name; see failpoint_on.go.
func failpoint(name string) {}

// failpointFloor is the compaction floor a failpoint build may set; 0
// here (the floor of Options applies).
func failpointFloor() int64 { return 0 }

// sabotaged reports whether a planted bug is switched on; never here.
func sabotaged(string) bool { return false }
