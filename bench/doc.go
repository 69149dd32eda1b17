// Package bench holds Locking-Center's protocol benchmarks: the cost of a
// lock cycle over loopback next to its floor (a bare TCP exchange measured in
// the same run) and the latency of handing a key from one holder to the next.
// Lockers is the load the write-ahead log's throughput benchmarks share;
// Alternating runs it against several servers taking turns, to compare
// them in one run without the machine's drift deciding the comparison.
//
//	go test -run '^$' -bench . -benchtime 3s ./bench
package bench
