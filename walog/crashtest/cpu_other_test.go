//go:build !unix

package crashtest

import "time"

// selfCPU is not measured here: the benchmark reports 0.
func selfCPU() time.Duration { return 0 }
