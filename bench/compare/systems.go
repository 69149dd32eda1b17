package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// client is one locker of a system under test. A client serves one
// goroutine; Lock blocks until the key is granted.
type client interface {
	Lock(ctx context.Context, key string) error
	Unlock(ctx context.Context, key string) error
	Close() error
}

// system is one column of the comparison: a way to lock and the server
// behind it.
type system struct {
	name    string
	what    string // one line for the README
	floor   bool   // a floor: "Lock" and "Unlock" are one bare exchange each
	durable bool   // its grants survive a crash of the server
	shared  bool   // many lockers can share one client: workload M applies
	cluster bool   // three nodes: workload F applies, C does not
	connect func(ctx context.Context, id int) (client, error)
}

// The systems, in the order of the table.
var systemNames = []string{
	"floor-connect", "floor-persistent", "floor-session",
	"lc-v1", "lc-session", "lc-v1-tls", "lc-session-tls", "lc-v1-wal", "lc-session-wal",
	"redis", "etcd", "postgres",
	"lc-cluster", "etcd-cluster",
}

// servers are the processes started for one run of the benchmark.
type servers struct {
	tmp      string
	procs    []*proc // in start order; stopped in reverse
	systems  map[string]*system
	clusters map[string]*cluster // the systems of three nodes, by name
	closers  []func() error      // clients of the clusters' own calls, closed before the servers stop
	lcBin    string              // Locking-Center built for this run, once
	versions map[string]string   // program → version line
	skipped  map[string]string   // system → why it is not measured
}

// startServers starts what the chosen systems need, each on free loopback
// ports with its data under tmp. On error, what was started is in s.procs
// and the caller still stops it.
func startServers(ctx context.Context, s *servers, repo string, chosen map[string]bool, redisRetry time.Duration) error {
	s.systems = make(map[string]*system)
	s.clusters = make(map[string]*cluster)
	s.versions = make(map[string]string)
	s.skipped = make(map[string]string)
	want := func(names ...string) bool {
		for _, n := range names {
			if chosen[n] {
				return true
			}
		}
		return false
	}

	if want("floor-connect", "floor-persistent", "floor-session") {
		if err := s.startEcho(ctx); err != nil {
			return err
		}
	}
	if want("lc-v1", "lc-session", "lc-v1-tls", "lc-session-tls", "lc-v1-wal", "lc-session-wal") {
		if err := s.startLC(ctx, repo, want("lc-v1", "lc-session"), want("lc-v1-wal", "lc-session-wal"), want("lc-v1-tls", "lc-session-tls")); err != nil {
			return err
		}
	}
	if want("redis") {
		if err := s.startRedis(ctx, redisRetry); err != nil {
			return err
		}
	}
	if want("etcd") {
		if err := s.startEtcd(ctx); err != nil {
			return err
		}
	}
	if want("postgres") {
		if err := s.startPostgres(ctx); err != nil {
			return err
		}
	}
	if want("lc-cluster") {
		bin, err := s.buildLC(ctx, repo)
		if err != nil {
			return err
		}
		c, err := s.startLCCluster(ctx, bin)
		if err != nil {
			return err
		}
		s.clusters[c.name] = c
	}
	if want("etcd-cluster") {
		bin, err := exec.LookPath("etcd")
		if err != nil {
			return fmt.Errorf("etcd not found (run install.sh): %w", err)
		}
		s.versions["etcd"] = versionOf(bin, "--version")
		c, err := s.startEtcdCluster(ctx, bin)
		if err != nil {
			return err
		}
		s.clusters[c.name] = c
	}
	return nil
}

// stopAll stops every process, last started first, by PID.
func (s *servers) stopAll() error {
	var errs []error
	for _, c := range s.closers {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].stop(); err != nil {
			errs = append(errs, err)
		} else {
			slog.Info("stopped", "system", s.procs[i].name, "pid", s.procs[i].cmd.Process.Pid)
		}
	}
	return errors.Join(errs...)
}

func (s *servers) start(name string, stopSig syscall.Signal, cred *syscall.Credential, env []string, bin string, args ...string) (*proc, error) {
	p, err := startProc(name, filepath.Join(s.tmp, name+".log"), stopSig, cred, s.tmp, env, bin, args...)
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

func (s *servers) startEcho(ctx context.Context) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("echo server: find this program: %w", err)
	}
	var addrs []string
	args := []string{"echo"}
	for _, m := range echoModes {
		port, err := freePort()
		if err != nil {
			return err
		}
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
		args = append(args, string(m)+"="+addrs[len(addrs)-1])
	}
	connectAddr, persistentAddr, sessionAddr := addrs[0], addrs[1], addrs[2]
	p, err := s.start("echo", syscall.SIGTERM, nil, nil, self, args...)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := waitReady(ctx, p, dialReady(a)); err != nil {
			return err
		}
	}
	s.systems["floor-connect"] = &system{
		name: "floor-connect", floor: true,
		what: "connect, 1-byte exchange, server closes: the floor of one request per connection",
		connect: func(context.Context, int) (client, error) {
			return &connectFloor{addr: connectAddr}, nil
		},
	}
	s.systems["floor-session"] = &system{
		name: "floor-session", floor: true, shared: true,
		what:    "the session protocol's frames answered `+` at once by a trivial server, through bench-compare's session driver: what the driver and the framing cost, without a lock table",
		connect: sessionConnect(sessionAddr, nil),
	}
	s.systems["floor-persistent"] = &system{
		name: "floor-persistent", floor: true,
		what: "1-byte ping-pong on one persistent connection: the floor of any request/answer protocol",
		connect: func(ctx context.Context, _ int) (client, error) {
			return dialPersistentFloor(ctx, persistentAddr)
		},
	}
	return nil
}

// lcMode is one Locking-Center process of the benchmark and the two systems
// (v1 and session) that talk to it.
type lcMode struct {
	suffix  string // of the systems' names: "", "-wal", "-tls"
	wal     bool   // with DATA_PATH
	tls     bool   // with TLS_CERT and TLS_KEY
	where   string // for the README
	durable bool
}

// startLC builds Locking-Center and starts one process per chosen mode: in
// memory (mem), with DATA_PATH (wal), in memory over TLS (withTLS).
func (s *servers) startLC(ctx context.Context, repo string, mem, wal, withTLS bool) error {
	bin, err := s.buildLC(ctx, repo)
	if err != nil {
		return err
	}
	var modes []lcMode
	if mem {
		modes = append(modes, lcMode{where: "in memory"})
	}
	if withTLS {
		modes = append(modes, lcMode{suffix: "-tls", tls: true,
			where: "in memory, over TLS (TLS_CERT and TLS_KEY: a P-256 certificate of a CA the benchmark makes at its start; the clients trust that CA and share one tls.ClientSessionCache)"})
	}
	if wal {
		modes = append(modes, lcMode{suffix: "-wal", wal: true, durable: true,
			where: "with DATA_PATH (every grant and release fsynced, group commit)"})
	}
	for _, m := range modes {
		if err := s.startLCMode(ctx, bin, m); err != nil {
			return err
		}
	}
	return nil
}

// buildLC builds Locking-Center from repo into the temporary folder, once
// per run, and returns the binary.
func (s *servers) buildLC(ctx context.Context, repo string) (string, error) {
	if s.lcBin != "" {
		return s.lcBin, nil
	}
	bin := filepath.Join(s.tmp, "locking-center")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build Locking-Center in %s: %w\n%s", repo, err, out)
	}
	s.versions["locking-center"] = versionOf(bin, "version") + " (built from this repository with go build .)"
	s.lcBin = bin
	return bin, nil
}

func (s *servers) startLCMode(ctx context.Context, bin string, m lcMode) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	name := "locking-center" + m.suffix
	dataPath := "" // in memory
	if m.wal {
		if err := os.MkdirAll(filepath.Join(s.tmp, "lc-wal"), 0o755); err != nil {
			return fmt.Errorf("DATA_PATH folder: %w", err)
		}
		dataPath = filepath.Join(s.tmp, "lc-wal", "locks.wal")
	}
	env := []string{"BIND_ADDRESS=" + addr, "WEB_ADDRESS=off", "DATA_PATH=" + dataPath}
	var conf *tls.Config // nil: plain TCP
	if m.tls {
		dir := filepath.Join(s.tmp, "lc-tls")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("TLS folder: %w", err)
		}
		certs, err := makeCerts(dir)
		if err != nil {
			return fmt.Errorf("TLS certificates: %w", err)
		}
		env = append(env, "TLS_CERT="+certs.certPath, "TLS_KEY="+certs.keyPath)
		conf = clientTLS(certs.roots)
	}
	p, err := s.start(name, syscall.SIGTERM, nil, env, bin)
	if err != nil {
		return err
	}
	// A TCP connect succeeds on a TLS port too: the probe below is what
	// shows that the server speaks TLS.
	if err := waitReady(ctx, p, dialReady(addr)); err != nil {
		return err
	}
	kind := "one TCP connection per request"
	if m.tls {
		kind = "one TCP connection and so one TLS handshake per request (resumed from the shared session cache once the server has sent a ticket)"
	}
	s.systems["lc-v1"+m.suffix] = &system{
		name: "lc-v1" + m.suffix, durable: m.durable,
		what: "Locking-Center v1, " + kind + ", " + m.where,
		connect: func(_ context.Context, id int) (client, error) {
			return &v1Client{addr: addr, tls: conf, source: "bench-" + strconv.Itoa(id)}, nil
		},
	}
	// Sessions are measured only where the server speaks them.
	probe, err := openSession(ctx, addr, conf, "bench-probe", 0)
	if err == nil {
		err = probe.close()
	}
	if err != nil {
		if m.tls {
			// Over TLS the probe fails as well when the server does not speak
			// TLS: then v1 would fail too.
			return fmt.Errorf("%s: a session over TLS: %w", name, err)
		}
		s.skipped["lc-session"+m.suffix] = fmt.Sprintf("the server does not open a session: %v", err)
		slog.Warn("sessions not measured", "system", "lc-session"+m.suffix, "err", err)
		return nil
	}
	kind = "one persistent connection per client"
	if m.tls {
		kind = "one persistent TLS connection per client (one handshake, when the client connects)"
	}
	s.systems["lc-session"+m.suffix] = &system{
		name: "lc-session" + m.suffix, durable: m.durable, shared: !m.tls,
		what:    "Locking-Center session (action 16), " + kind + ", " + m.where,
		connect: sessionConnect(addr, conf),
	}
	return nil
}

// sessionConnect connects a client with a session of its own to addr (over
// TLS with conf). Its TTL of 60 s outlasts any run: the benchmark sends no
// Ping.
func sessionConnect(addr string, conf *tls.Config) func(context.Context, int) (client, error) {
	return func(ctx context.Context, id int) (client, error) {
		sess, err := openSession(ctx, addr, conf, "bench-"+strconv.Itoa(id), 60_000)
		if err != nil {
			return nil, err
		}
		return &sessionClient{s: sess, own: true, tokens: make(map[string]uint64)}, nil
	}
}

func (s *servers) startRedis(ctx context.Context, retry time.Duration) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found (run install.sh): %w", err)
	}
	// "Redis server v=7.0.15 sha=… malloc=… bits=64 build=…": name and version.
	v := strings.Fields(versionOf(bin, "--version"))
	s.versions["redis"] = strings.Join(v[:min(3, len(v))], " ")
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dir := filepath.Join(s.tmp, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("redis folder: %w", err)
	}
	p, err := s.start("redis", syscall.SIGTERM, nil, nil, bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
	if err != nil {
		return err
	}
	ready := func(ctx context.Context) error {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		return rdb.Ping(ctx).Err()
	}
	if err := waitReady(ctx, p, ready); err != nil {
		return err
	}
	s.systems["redis"] = &system{
		name: "redis",
		what: fmt.Sprintf("Redis SET key value NX PX 30000, retry after a random 0–%v sleep (redsync's way), Lua compare-and-delete release; no persistence (--save '' --appendonly no)", retry),
		connect: func(_ context.Context, id int) (client, error) {
			return newRedisClient(addr, id, retry), nil
		},
	}
	return nil
}

func (s *servers) startEtcd(ctx context.Context) error {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return fmt.Errorf("etcd not found (run install.sh): %w", err)
	}
	s.versions["etcd"] = versionOf(bin, "--version")
	cport, err := freePort()
	if err != nil {
		return err
	}
	pport, err := freePort()
	if err != nil {
		return err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(cport)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(pport)
	p, err := s.start("etcd", syscall.SIGTERM, nil, nil, bin,
		"--name", "bench", "--data-dir", filepath.Join(s.tmp, "etcd"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--initial-cluster-state", "new",
		"--log-level", "warn", "--logger", "zap")
	if err != nil {
		return err
	}
	endpoint := "127.0.0.1:" + strconv.Itoa(cport)
	ready := func(ctx context.Context) error {
		c, err := newEtcdClient(ctx, endpoint)
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err := waitReady(ctx, p, ready); err != nil {
		return err
	}
	s.systems["etcd"] = &system{
		name: "etcd", durable: true, shared: true,
		what: "etcd concurrency.Mutex, one client and one session (lease) per locker; single member, data on disk",
		connect: func(ctx context.Context, _ int) (client, error) {
			return newEtcdClient(ctx, endpoint)
		},
	}
	return nil
}

func (s *servers) startPostgres(ctx context.Context) error {
	binDir, err := postgresBin()
	if err != nil {
		return err
	}
	s.versions["postgres"] = versionOf(filepath.Join(binDir, "postgres"), "--version")
	cred, err := postgresUser()
	if err != nil {
		return err
	}
	dir := filepath.Join(s.tmp, "pg")
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "run")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("postgres folder: %w", err)
		}
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("postgres folder: %w", err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", filepath.Join(dir, "data"),
		"-U", "postgres", "--auth=trust", "--no-instructions", "-E", "UTF8")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	// SIGINT is PostgreSQL's fast shutdown: it ends the sessions and stops.
	p, err := s.start("postgres", syscall.SIGINT, cred, nil, filepath.Join(binDir, "postgres"),
		"-D", filepath.Join(dir, "data"), "-p", strconv.Itoa(port), "-k", filepath.Join(dir, "run"),
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200")
	if err != nil {
		return err
	}
	dsn := "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable"
	ready := func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	}
	if err := waitReady(ctx, p, ready); err != nil {
		return err
	}
	s.systems["postgres"] = &system{
		name: "postgres",
		what: "PostgreSQL pg_advisory_lock / pg_advisory_unlock on one persistent connection per locker (pgx); fsync settings at their defaults",
		connect: func(ctx context.Context, _ int) (client, error) {
			return newPgClient(ctx, dsn)
		},
	}
	return nil
}

// echoMain is the floors' server, run as this program's "echo" command in a
// process of its own (as every other server is), with MODE=ADDRESS
// arguments, one listener each (see echoModes). It runs until SIGTERM or
// SIGINT.
func echoMain(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var modes []echoMode
	for _, a := range args {
		m, addr, ok := strings.Cut(a, "=")
		if !ok || !slices.Contains(echoModes, echoMode(m)) {
			return fmt.Errorf("echo: argument %q: want MODE=ADDRESS, MODE one of %v", a, echoModes)
		}
		l, err := listenLoopback(addr)
		if err != nil {
			return err
		}
		ls = append(ls, l)
		modes = append(modes, echoMode(m))
	}
	errs := make(chan error, len(ls))
	for i, l := range ls {
		go func() { errs <- serveEcho(l, modes[i]) }()
	}
	<-ctx.Done()
	for _, l := range ls {
		_ = l.Close()
	}
	var all []error
	for range ls {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}
