package faulttest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// network is one test's network: a bridge in the root namespace with the
// address .254 of 10.77.<subnet>.0/24, and for node i a namespace with
// eth0 at .(i+1), the other end of a veth pair on the bridge. Names carry
// the test's tag, so tests do not collide, and a run cleans up what an
// aborted run of the same tag left. Each namespace has an nft table whose
// chains drop what a fault says (cut, lossy); heal empties them.
type network struct {
	t      testing.TB
	tag    string // at most 4 characters: interface names have 15
	subnet int
	n      int
}

// maxNodes bounds the nodes of one network (and the names cleaned up).
const maxNodes = 5

// needNet skips the test (loudly) where namespaces cannot be made.
func needNet(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the cluster fault tests need root (network namespaces, veth, nft)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("SKIP: the cluster fault tests need %s (.ci/setup installs iproute2 and nftables)", tool)
		}
	}
}

func (nw *network) ns(i int) string     { return fmt.Sprintf("lcf-%s-n%d", nw.tag, i+1) }
func (nw *network) veth(i int) string   { return fmt.Sprintf("lcf%sv%d", nw.tag, i+1) }
func (nw *network) bridge() string      { return "lcf" + nw.tag + "br" }
func (nw *network) addr(i int) string   { return fmt.Sprintf("10.77.%d.%d", nw.subnet, i+1) }
func (nw *network) hostAddr() string    { return fmt.Sprintf("10.77.%d.254", nw.subnet) }
func (nw *network) exec(i int) []string { return []string{"ip", "netns", "exec", nw.ns(i)} }

// newNetwork makes the bridge and n namespaces; they are removed at the
// end of the test.
func newNetwork(t testing.TB, tag string, subnet, n int) *network {
	t.Helper()
	needNet(t)
	if len(tag) > 4 || n > maxNodes {
		t.Fatalf("network %q of %d nodes: tag of at most 4 characters, at most %d nodes", tag, n, maxNodes)
	}
	nw := &network{t: t, tag: tag, subnet: subnet, n: n}
	nw.remove() // what an aborted run of this tag left
	t.Cleanup(nw.remove)
	br := nw.bridge()
	nw.must("ip", "link", "add", br, "type", "bridge")
	nw.must("ip", "addr", "add", nw.hostAddr()+"/24", "dev", br)
	nw.must("ip", "link", "set", br, "up")
	for i := range n {
		ns, v := nw.ns(i), nw.veth(i)
		nw.must("ip", "netns", "add", ns)
		nw.must("ip", "link", "add", v, "type", "veth", "peer", "name", v+"p")
		nw.must("ip", "link", "set", v+"p", "netns", ns)
		nw.must("ip", "link", "set", v, "master", br, "up")
		nw.must("ip", "-n", ns, "link", "set", v+"p", "name", "eth0")
		nw.must("ip", "-n", ns, "addr", "add", nw.addr(i)+"/24", "dev", "eth0")
		nw.must("ip", "-n", ns, "link", "set", "eth0", "up")
		nw.must("ip", "-n", ns, "link", "set", "lo", "up")
		nw.nft(i, "add table inet lcf\n"+
			"add chain inet lcf out { type filter hook output priority 0; }\n"+
			"add chain inet lcf in { type filter hook input priority 0; }\n")
	}
	return nw
}

// remove deletes every namespace, veth and the bridge of the tag, those
// that exist; errors are ignored (most name nothing).
func (nw *network) remove() {
	for i := range maxNodes {
		_ = exec.Command("ip", "netns", "del", nw.ns(i)).Run()
		_ = exec.Command("ip", "link", "del", nw.veth(i)).Run()
	}
	_ = exec.Command("ip", "link", "del", nw.bridge()).Run()
}

func (nw *network) must(args ...string) {
	nw.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		nw.t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// nft runs an nft script in node i's namespace.
func (nw *network) nft(i int, script string) {
	nw.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", nw.ns(i), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		nw.t.Fatalf("nft in %s: %v\n%s\n%s", nw.ns(i), err, script, out)
	}
}

// cut drops every packet from node a to node b (one way); cut(b, a) too
// makes it a partition. Clients' packets are not touched.
func (nw *network) cut(a, b int) {
	nw.t.Helper()
	nw.nft(a, fmt.Sprintf("add rule inet lcf out ip daddr %s drop\n", nw.addr(b)))
}

// isolate cuts node i from every other node, both ways.
func (nw *network) isolate(i int) {
	nw.t.Helper()
	for j := range nw.n {
		if j != i {
			nw.cut(i, j)
			nw.cut(j, i)
		}
	}
}

// lossy drops pct per cent of node i's packets on eth0, both ways, the
// clients' included: a bad link. (The kernel here has no netem qdisc;
// nft's random numbers drop the same way, without the delay.)
func (nw *network) lossy(i, pct int) {
	nw.t.Helper()
	nw.nft(i, fmt.Sprintf("add rule inet lcf out oifname \"eth0\" numgen random mod 100 < %d drop\n"+
		"add rule inet lcf in iifname \"eth0\" numgen random mod 100 < %d drop\n", pct, pct))
}

// heal removes every drop rule.
func (nw *network) heal() {
	nw.t.Helper()
	for i := range nw.n {
		nw.nft(i, "flush chain inet lcf out\nflush chain inet lcf in\n")
	}
}
