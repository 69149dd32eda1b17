package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/lctest"
)

// freezer passes TCP connections on to a target until frozen; then it
// passes nothing on and closes nothing, as a link that drops every packet.
type freezer struct {
	ln     net.Listener
	target string
	frozen chan struct{} // closed by freeze
	stop   chan struct{} // closed by close: every copy ends
	once   sync.Once
	wg     sync.WaitGroup // the accept loop and every copy

	mu    sync.Mutex // guards conns
	conns []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, frozen: make(chan struct{}), stop: make(chan struct{})}
	f.wg.Go(f.accept)
	return f
}

func (f *freezer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		d, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, d)
		f.mu.Unlock()
		f.wg.Go(func() { f.copy(d, c) })
		f.wg.Go(func() { f.copy(c, d) })
	}
}

// copy passes src on to dst until either ends; once frozen, what it read
// is held until the freezer is closed.
func (f *freezer) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			<-f.stop
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // src ended (io.EOF) or broke
		}
	}
}

func (f *freezer) freeze() { close(f.frozen) }

func (f *freezer) close() {
	f.once.Do(func() {
		close(f.stop)
		f.ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
}

// A leader whose follower went silent — its packets dropped, its
// connections left open — stops without waiting out the transport's
// timeout (10 s) on the RPC in flight to that follower: Close ends raft's
// connections once the shutdown has begun.
func TestCloseDoesNotWaitForASilentPeer(t *testing.T) {
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	fz := newFreezer(t, addrs[2])
	advertise := []string{addrs[0], addrs[1], fz.ln.Addr().String()} // n3 is reached through the freezer
	var peers []string
	for i, a := range advertise {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, a))
	}
	nodes := make([]*testNode, 3)
	for i := range nodes {
		logs := &lctest.SyncBuffer{}
		nodes[i] = &testNode{logs: logs, cfg: Config{
			NodeID: fmt.Sprintf("n%d", i+1), RaftAddress: addrs[i], RaftAdvertise: advertise[i], Peers: strings.Join(peers, ","),
			Token: testToken, RaftDir: t.TempDir(),
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		}}
		nodes[i].start(t)
	}
	t.Cleanup(func() {
		fz.close()
		for _, n := range nodes {
			n.stop(t)
		}
		if t.Failed() {
			for _, n := range nodes {
				t.Logf("logs of %s:\n%s", n.cfg.NodeID, n.logs.String())
			}
		}
	})
	l := leader(t, nodes)
	for l == nodes[2] { // n3's own RPCs do not pass the freezer: another must lead
		if err := l.node.Raft().LeadershipTransfer().Error(); err != nil {
			t.Logf("transfer from n3: %v", err)
		}
		l = leader(t, nodes)
	}
	// Every RPC to n3 from now on waits for an answer that never comes.
	fz.freeze()
	time.Sleep(2 * DefaultHeartbeatTimeout) // heartbeats (every tenth of the timeout) sent into it
	at := time.Now()
	l.stop(t)
	if d := time.Since(at); d > 3*time.Second {
		t.Fatalf("the leader took %v to close with a follower silent (want ≤ 3 s; the transport's timeout is 10 s)", d.Round(time.Millisecond))
	} else {
		t.Logf("closed in %v", d.Round(time.Millisecond))
	}
}
