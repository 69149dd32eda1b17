//go:build failpoints

package cluster

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/locking-center/locking-center/locker"
)

// This file is built only with -tags failpoints, for tests of clients
// and of the cluster: it plants faults the normal build cannot have.
//
// LC_TEST_LOST_ANSWER_PREFIX=p makes the leader SIGKILL itself right
// after a batch granting a key that starts with p is committed on a
// majority and applied here, before any caller is answered: the grant
// exists on the cluster and its '+' is never sent. A client's test uses
// it to lose the answer to a Lock and check that the reissue of the Lock
// (SPEC §7 Reissue) finds the grant. Just before the kill it writes one
// line to standard error, "failpoint lost-answer <key>: SIGKILL".
const failpointsOn = true

// lostAnswerPrefix is read once at start; read-only afterwards.
var lostAnswerPrefix = os.Getenv("LC_TEST_LOST_ANSWER_PREFIX")

func afterCommit(batch []locker.Change) {
	if lostAnswerPrefix == "" {
		return
	}
	for _, c := range batch {
		if c.Grant && strings.HasPrefix(c.Key, lostAnswerPrefix) {
			fmt.Fprintf(os.Stderr, "failpoint lost-answer %s: SIGKILL\n", c.Key)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; nothing more may happen here
		}
	}
}
