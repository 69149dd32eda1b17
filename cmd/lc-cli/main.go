// Command lc-cli is the shell's client of Locking-Center: a distributed
// flock(1). It runs a command under a lock and exposes every protocol
// action (lock, trylock, wait, unlock, the two resets) plus a look at the
// held keys and the open sessions.
//
//	lc-cli lock deploy/prod -- ./deploy.sh
//
// Guarantees:
//   - With "-- CMD", the key is held through a session that belongs to this
//     lc-cli: CMD gets the grant's fencing token in LC_FENCING_TOKEN; the
//     key is released when CMD ends, however it ends, by an Unlock of that
//     grant only (a key reset and taken by another meanwhile stays
//     theirs); if lc-cli dies, the server releases it one TTL later,
//     and a guard that outlives lc-cli has ended CMD and every process it
//     started before that (job_linux.go, guard_linux.go).
//     lc-cli exits with CMD's status (128+n when signal n killed it).
//   - If that session is lost while CMD runs, lc-cli says so, sends CMD
//     SIGTERM, and exits 4 once CMD has ended.
//   - An Unlock whose frame may have reached the server is never sent
//     again: a release without an answer is reported (unlock: exit 3).
//   - A lc-cli that is interrupted (SIGINT, SIGTERM, SIGHUP, SIGQUIT) while
//     it still waits withdraws from the queue; it exits 128+n and never
//     runs CMD.
//   - Exit statuses are fixed (README.md, "Exit status"): 0 done, 1 not
//     acquired, 2 usage, 3 server unreachable or an unlock/reset answered
//     '-' (or not answered), 4 the session holding the key for CMD lost.
//
// It speaks the protocol only through package client; the holder shown
// while waiting, what a reset released, and the "keys" and "sessions"
// tables come from the server's JSON API.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/locking-center/locking-center/client"
	"github.com/locking-center/locking-center/client/protocol"
)

// Exit statuses (README.md, "Exit status"). A command run under the lock passes its own.
const (
	exitOK          = 0
	exitNotAcquired = 1
	exitUsage       = 2
	exitServer      = 3
	// exitCannotRun and exitNotFound follow the shells: the command could
	// not be started.
	exitCannotRun = 126
	exitNotFound  = 127
)

// defaultWebAddress is the server's default dashboard and JSON API port.
const defaultWebAddress = "localhost:22120"

// version is stamped at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	if code, ok := runAsGuard(os.Args); ok {
		os.Exit(code)
	}
	a := &app{
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		getenv:  os.Getenv,
		errTerm: isTerminal(os.Stderr),
	}
	a.termWidth = func() int { return termWidth(os.Stderr) }
	os.Exit(a.run(context.Background(), os.Args[1:]))
}

// app is one invocation of lc-cli.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// errTerm is true when stderr is a terminal: only then is the waiting
	// status line drawn.
	errTerm bool
	// termWidth returns stderr's width in columns; nil means 80.
	termWidth func() int

	// Global settings, from flags or the environment (loaded once).
	loaded     bool
	address    string
	source     string
	webAddress string
	// TLS files and name (--tls-*, LC_TLS_*); any of them set turns TLS
	// on for the lock port and the JSON API. tls is what they make
	// (checkGlobals), nil for plain TCP.
	tlsCA, tlsCert, tlsKey, tlsServerName string
	tls                                   *tls.Config
}

// usageError is a bad command line: exit 2, with a hint to the help.
type usageError struct {
	cmd string
	msg string
}

func (e *usageError) Error() string { return e.msg }

func (a *app) usage(cmd, format string, args ...any) *usageError {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// command is one lc-cli command.
type command struct {
	name string
	help string
	run  func(a *app, ctx context.Context, args []string) (int, error)
}

var commands []*command

func init() {
	commands = []*command{
		{"lock", helpLock, (*app).cmdLock},
		{"trylock", helpTryLock, (*app).cmdTryLock},
		{"unlock", helpUnlock, (*app).cmdUnlock},
		{"wait", helpWait, (*app).cmdWait},
		{"reset", helpReset, (*app).cmdReset},
		{"keys", helpKeys, (*app).cmdKeys},
		{"sessions", helpSessions, (*app).cmdSessions},
		{"version", helpVersion, (*app).cmdVersion},
		{"help", helpHelp, (*app).cmdHelp},
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run executes the command line args (without the program name) and
// returns the exit status.
func (a *app) run(ctx context.Context, args []string) int {
	fs := a.flagSet("lc-cli")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(a.stdout, helpMain)
			return exitOK
		}
		return a.fail(a.usage("", "%v", err))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(a.stderr, helpMain)
		return exitUsage
	}
	c := lookup(rest[0])
	if c == nil {
		return a.fail(a.usage("", "unknown command %q", rest[0]))
	}
	code, err := c.run(a, ctx, rest[1:])
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) && ue.cmd == "" {
			ue.cmd = c.name
		}
		return a.fail(err)
	}
	return code
}

// fail prints err as one line on stderr and returns its exit status.
func (a *app) fail(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		hint := "lc-cli --help"
		if ue.cmd != "" {
			hint = "lc-cli " + ue.cmd + " --help"
		}
		fmt.Fprintf(a.stderr, "lc-cli: %s (see '%s')\n", ue.msg, hint)
		return exitUsage
	}
	fmt.Fprintf(a.stderr, "lc-cli: %s\n", oneLine(err.Error()))
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitServer
}

// codeError carries the exit status that goes with an error.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func withCode(code int, format string, args ...any) error {
	return &codeError{code: code, err: fmt.Errorf(format, args...)}
}

// flagSet returns a flag set that holds the global flags: they are
// accepted before the command and, for convenience, among the
// command's own flags too. Their defaults come from the environment.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed by fail, help by the caller
	fs.Usage = func() {}
	if !a.loaded {
		a.loaded = true
		a.address = envOr(a.getenv, "LC_ADDRESS", envOr(a.getenv, "LC_SERVER", client.DefaultAddress))
		a.source = a.getenv("LC_SOURCE")
		a.webAddress = envOr(a.getenv, "LC_WEB_ADDRESS", defaultWebAddress)
		a.tlsCA, a.tlsCert = a.getenv("LC_TLS_CA"), a.getenv("LC_TLS_CERT")
		a.tlsKey, a.tlsServerName = a.getenv("LC_TLS_KEY"), a.getenv("LC_TLS_SERVER_NAME")
	}
	fs.StringVar(&a.address, "address", a.address, "lock server HOST:PORT, or a cluster's nodes as a comma-separated list")
	fs.StringVar(&a.address, "server", a.address, "the same as --address")
	fs.StringVar(&a.source, "source", a.source, "name of this requester")
	fs.StringVar(&a.webAddress, "web-address", a.webAddress, "JSON API HOST:PORT or URL")
	fs.StringVar(&a.tlsCA, "tls-ca", a.tlsCA, "PEM bundle of the CA that signs the server's certificate")
	fs.StringVar(&a.tlsCert, "tls-cert", a.tlsCert, "PEM client certificate, for a server with TLS_CLIENT_CA")
	fs.StringVar(&a.tlsKey, "tls-key", a.tlsKey, "PEM key of --tls-cert")
	fs.StringVar(&a.tlsServerName, "tls-server-name", a.tlsServerName, "name the server's certificate must carry")
	return fs
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// parseArgs parses a command's flags, which may stand before or after its
// positional arguments, and splits off the child command after "--".
func parseArgs(fs *flag.FlagSet, args []string) (pos, child []string, sep bool, err error) {
	for i, s := range args {
		if s == "--" {
			args, child, sep = args[:i], args[i+1:], true
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, false, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, child, sep, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parse is parseArgs for command cmd, with -h/--help printing help and
// every other error becoming a usage error. It returns done=true when help
// was printed.
func (a *app) parse(c string, fs *flag.FlagSet, args []string) (pos, child []string, sep, done bool, err error) {
	pos, child, sep, err = parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(a.stdout, lookup(c).help)
		return nil, nil, false, true, nil
	}
	if err != nil {
		return nil, nil, false, false, a.usage(c, "%v", err)
	}
	if err := a.checkGlobals(c); err != nil {
		return nil, nil, false, false, err
	}
	return pos, child, sep, false, nil
}

func (a *app) checkGlobals(c string) error {
	if err := checkAddresses(a.address); err != nil {
		return a.usage(c, "--address %q: %v (from --address, --server, LC_ADDRESS, LC_SERVER or the default %s)", a.address, err, client.DefaultAddress)
	}
	if len(a.source) > protocol.MaxField {
		return a.usage(c, "--source is %d bytes long; at most %d are allowed", len(a.source), protocol.MaxField)
	}
	if a.tlsCA != "" || a.tlsCert != "" || a.tlsKey != "" || a.tlsServerName != "" {
		cfg, err := client.TLSFiles{CA: a.tlsCA, Cert: a.tlsCert, Key: a.tlsKey, ServerName: a.tlsServerName}.Config()
		if err != nil {
			return a.usage(c, "--tls-ca, --tls-cert, --tls-key (or LC_TLS_*): %v", err)
		}
		a.tls = cfg
	}
	return nil
}

// checkAddresses checks an address list: HOST:PORT, or several of them
// separated by commas (the client tries them all).
func checkAddresses(list string) error {
	n := 0
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("want HOST:PORT, or a comma-separated list of them (%q is not)", entry)
		}
		n++
	}
	if n == 0 {
		return errors.New("want HOST:PORT, or a comma-separated list of them")
	}
	return nil
}

// oneKey checks that pos is exactly one valid key.
func (a *app) oneKey(c string, pos []string) (string, error) {
	switch {
	case len(pos) == 0:
		return "", a.usage(c, "missing KEY")
	case len(pos) > 1:
		return "", a.usage(c, "unexpected argument %q after KEY (a command to run goes after --)", pos[1])
	case pos[0] == "":
		return "", a.usage(c, "KEY is empty")
	case len(pos[0]) > protocol.MaxField:
		return "", a.usage(c, "KEY is %d bytes long; at most %d are allowed", len(pos[0]), protocol.MaxField)
	}
	return pos[0], nil
}

func (a *app) client() *client.Client {
	return client.New(a.address, client.WithSource(a.source), client.WithTLS(a.tls))
}

// durationFlag is a --timeout: a Go duration ("90s", "2m") or, as with
// flock -w, a number of seconds. Zero means no limit.
type durationFlag struct{ d time.Duration }

func (f *durationFlag) String() string { return f.d.String() }

func (f *durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return errors.New("want a duration such as 30s or 5m, or a number of seconds")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 {
		return errors.New("must not be negative")
	}
	f.d = d
	return nil
}

// describe turns a client error into the one-line reason shown to users.
func (a *app) describe(op, key string, err error) error {
	var verr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verr):
		return withCode(exitServer, "%s %s: the lock server at %s showed a certificate lc-cli does not trust: %s (see --tls-ca and --tls-server-name)",
			op, printable(key), a.address, rootCause(err))
	case errors.Is(err, client.ErrOutcomeUnknown) && (op == "lock" || op == "trylock" || op == "wait"):
		return withCode(exitServer, "%s %s: sent, but the server at %s did not answer (%s): %s may have been granted, held by nobody who knows; not sent again (see 'lc-cli keys'; 'lc-cli unlock %s' releases it)",
			op, printable(key), a.address, rootCause(err), printable(key), printable(key))
	case errors.Is(err, client.ErrOutcomeUnknown):
		return withCode(exitServer, "%s %s: sent, but the server at %s did not answer (%s): it may or may not have taken effect; not sent again",
			op, printable(key), a.address, rootCause(err))
	case errors.Is(err, client.ErrUnreachable) && a.tls != nil:
		return withCode(exitServer, "%s %s: cannot reach the lock server at %s over TLS: %s (is it running, with TLS_CERT? a server with TLS_CLIENT_CA needs --tls-cert and --tls-key)",
			op, printable(key), a.address, rootCause(err))
	case errors.Is(err, client.ErrUnreachable):
		return withCode(exitServer, "%s %s: cannot reach the lock server at %s: %s (is it running? see --address or LC_ADDRESS)",
			op, printable(key), a.address, rootCause(err))
	case errors.Is(err, client.ErrRefused):
		return withCode(exitServer, "%s %s: refused by the server", op, printable(key))
	}
	return withCode(exitServer, "%s %s: %v", op, printable(key), err)
}

// rootCause returns the system's reason behind a network error, without
// the chain of wrappers ("connection refused", "no such host").
func rootCause(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.Error()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// printable returns s as it is when every rune of it is printable, and
// quoted otherwise, so a key cannot send escape sequences to the terminal.
func printable(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\uFFFD' {
			return strconv.Quote(s)
		}
	}
	return s
}

func (a *app) cmdVersion(_ context.Context, args []string) (int, error) {
	fs := a.flagSet("version")
	pos, _, sep, done, err := a.parse("version", fs, args)
	if err != nil || done {
		return exitOK, err
	}
	if len(pos) > 0 || sep {
		return 0, a.usage("version", "version takes no arguments")
	}
	fmt.Fprintln(a.stdout, "lc-cli", versionString())
	return exitOK, nil
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func (a *app) cmdHelp(_ context.Context, args []string) (int, error) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(a.stdout, helpHelp)
		return exitOK, nil
	}
	if len(args) == 0 {
		fmt.Fprint(a.stdout, helpMain)
		return exitOK, nil
	}
	c := lookup(args[0])
	if c == nil {
		return 0, a.usage("", "no help for unknown command %q", args[0])
	}
	fmt.Fprint(a.stdout, c.help)
	return exitOK, nil
}
