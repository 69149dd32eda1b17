//go:build !failpoints

package cluster

import "github.com/locking-center/locking-center/locker"

// Failpoints are test-only faults a build with -tags failpoints can
// plant (see failpoint_on.go). In the normal build they do nothing and
// compile to nothing.
const failpointsOn = false

// afterCommit is called once a batch is committed and applied on the
// leader, before any caller is answered; see failpoint_on.go.
func afterCommit([]locker.Change) {}
