// Package faulttest is the fault harness of the cluster mode (SPEC §8.9).
// It has no code outside its tests: they build the real server binary,
// start 3 or 5 nodes, each in a network namespace of its own joined by veth
// pairs to a bridge, and run v1 and session clients through every node
// while they kill, pause, partition and slow nodes down. The clients live
// in the test's own (root) namespace and reach each node on its own link,
// so a node cut off from its peers still hears its clients; a partition
// drops only node-to-node packets (nft rules in the nodes' namespaces).
//
// What it checks, for every run of every fault: every key's history
// (Lock, TryLock, Unlock with their fencing tokens; outcomes not known
// taken as applied or not, until the client settled them) is linearizable
// as one mutex per key (porcupine, through walog/crashtest/history); no
// two clients were ever told '+' for one key while neither had begun to
// release it; a grant acknowledged after another's request was sent has
// the higher token; holds acknowledged before a fault are held after it
// with the same token; a pinging session is never lost; a silent session
// is released no sooner than its TTL after its last frame; a node cut off
// from the majority tells nobody '+' for a request sent after the cut, and
// closes its clients' connections within a second.
//
// It needs root (namespaces, veth, nft) and the ip and nft commands; the
// tests skip, loudly, without them (under CI the skip fails the run).
// LC_CLUSTER_FAULT_RUNS sets the runs of each fault (make cluster-soak).
package faulttest
