//go:build !failpoints

package cluster

import "github.com/hashicorp/raft"

// failingLogs is raft's log store as it is, in the normal build; the
// failpoint build can make its writes fail (failwrites_on.go).
func failingLogs(s raft.LogStore) raft.LogStore { return s }
