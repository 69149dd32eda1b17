package main

const exitTable = `Exit status:
  0    done (with -- CMD: CMD's own status instead)
  1    not acquired: trylock found the key held, --timeout passed, or the
       server answered '-' to lock or wait (the key or source was reset)
  2    usage error
  3    server unreachable, or unlock or reset answered '-', or an unlock
       was sent but not answered (it is never sent again)
  4    the session holding KEY for CMD was lost while CMD ran
  126  CMD could not be run; 127 CMD was not found
  128+n  lc-cli (while waiting) or CMD was killed by signal n:
       130 SIGINT (Ctrl-C), 143 SIGTERM
`

const globalFlags = `Global flags (before the command, or among its flags):
  --address HOST:PORT      lock server (default $LC_ADDRESS, $LC_SERVER, then
                           localhost:22119); a cluster: its nodes as a list,
                           a:22119,b:22119,c:22119, or a DNS name with several
                           records; any node that answers is used
  --server HOST:PORT       the same as --address
  --source NAME            name of this requester, at most 127 bytes
                           (default $LC_SOURCE; empty: the server uses your IP)
  --web-address HOST:PORT  JSON API, for "keys" and the waiting status line
                           (default $LC_WEB_ADDRESS, then localhost:22120); a
                           URL such as https://admin:PASSWORD@host:22120 works too;
                           a cluster: a list of its nodes' web ports
  --tls-ca FILE            PEM bundle of the CA that signs the server's certificate
                           (default $LC_TLS_CA; unset: the system's roots)
  --tls-cert FILE          PEM client certificate, for a server with TLS_CLIENT_CA
  --tls-key FILE           its private key (default $LC_TLS_CERT, $LC_TLS_KEY)
  --tls-server-name NAME   name the server's certificate must carry
                           (default $LC_TLS_SERVER_NAME, then each --address host)
                           Any --tls-* flag turns TLS on: the lock port, and the
                           JSON API (https) at a --web-address HOST:PORT
`

const helpMain = `lc-cli: a distributed flock(1) for Locking-Center.

Usage:
  lc-cli [--address HOST:PORT] [--source NAME] COMMAND

Commands:
  lock KEY [--timeout D] [--ttl D] [-- CMD ARGS...]
                                             wait for KEY; run CMD under it
  trylock KEY [--conflict-exit-code N] [--ttl D] [-- CMD ARGS...]
                                             take KEY only if it is free now
  unlock KEY                                 release KEY (any holder's)
  wait KEY [--timeout D]                     wait for KEY's turn, take nothing
  reset key KEY                              drop KEY's holder, refuse its waiters
  reset source [SOURCE]                      release all SOURCE holds and waits
  keys [--web-address HOST:PORT] [--json]    list the held keys
  sessions [--web-address HOST:PORT] [--json]
                                             list the open sessions
  version                                    print the version
  help [COMMAND]                             this text, or a command's

Examples:
  lc-cli lock deploy/prod -- ./deploy.sh --env prod
  lc-cli trylock cron/backup -- /usr/local/bin/backup
  LC_ADDRESS=locks.internal:22119 lc-cli keys
  lc-cli --address locks.internal:22119 --tls-ca ca.pem lock deploy/prod -- ./deploy.sh
  lc-cli --address lc1:22119,lc2:22119,lc3:22119 lock deploy/prod -- ./deploy.sh

` + globalFlags + `
Environment: LC_ADDRESS (or LC_SERVER), LC_SOURCE, LC_WEB_ADDRESS, LC_TLS_CA, LC_TLS_CERT,
LC_TLS_KEY, LC_TLS_SERVER_NAME (defaults of the flags above).
CMD sees LC_KEY (the key it holds), LC_ADDRESS and LC_FENCING_TOKEN (the
grant's fencing token, decimal) in its environment.

` + exitTable + `
Run 'lc-cli COMMAND --help' for a command's flags and examples.
`

const helpLock = `Usage: lc-cli lock KEY [--timeout D] [--ttl D] [-- CMD ARGS...]

Wait in line for KEY (first come, first served) and take it.

With "-- CMD ARGS...", KEY is held through a session while CMD runs (no
shell: use sh -c '...' for one), with this terminal's stdin, stdout and
stderr; KEY is released however CMD ends, and lc-cli exits with CMD's status
(128+n when signal n killed it). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
lc-cli are passed on to CMD. CMD finds the key in $LC_KEY, the server in
$LC_ADDRESS and the grant's fencing token in $LC_FENCING_TOKEN (a number
that grows with every grant: a resource that remembers the highest token it
has seen can refuse a holder whose turn has passed).

The session belongs to this lc-cli: if lc-cli is killed, or its machine
dies, the server releases KEY one TTL later; a killed lc-cli's guard has
ended CMD and every process it started by then. If the session is lost while
CMD runs (the server unreachable past the TTL, or the session ended from
the dashboard), lc-cli says so, sends CMD SIGTERM and exits 4 once CMD has
ended. The release is one Unlock of this grant only: a key reset and taken
by someone else meanwhile is never released by it.

Without CMD, lock takes KEY and exits 0: KEY stays held (a v1 hold, with no
session) until someone runs "lc-cli unlock KEY".

While waiting on a terminal, one status line shows who holds KEY, for how
long, and how many are ahead of you (from the JSON API, see --web-address).
Ctrl-C or SIGTERM while waiting leaves the queue and exits 130 or 143.

Flags (also accepted after KEY):
  --timeout D   give up waiting after D (30s, 5m, or seconds: 30); exit 1.
                0, the default, waits for ever.
  --ttl D       the session's TTL with -- CMD (1s to 10m); default the
                server's SESSION_TTL

` + globalFlags + `
Examples:
  lc-cli lock deploy/prod -- ./deploy.sh --env prod
  lc-cli lock demo --timeout 5m --ttl 30s -- sh -c 'make migrate && make release'
  lc-cli lock maintenance && do-things && lc-cli unlock maintenance

` + exitTable

const helpTryLock = `Usage: lc-cli trylock KEY [--conflict-exit-code N] [--ttl D] [-- CMD ARGS...]

Take KEY only if it is free right now; never wait (flock -n). On a
terminal, a busy KEY is reported in one line naming its holder.

With "-- CMD ARGS...", hold KEY through a session and run CMD under it
exactly as "lock" does (status, signals, LC_FENCING_TOKEN, release, exit 4
when the session is lost). Without CMD, take KEY and exit 0: it stays held
until "lc-cli unlock KEY".

Flags (also accepted after KEY):
  --conflict-exit-code N   exit status when KEY is held by someone (default 1),
                           so that a script can tell "busy" from a failure
  --ttl D                  the session's TTL with -- CMD (default the server's)

` + globalFlags + `
Examples:
  # a cron job that skips its turn while the previous run still goes on
  lc-cli trylock --conflict-exit-code 0 cron/report -- ./report.sh
  lc-cli trylock deploy/prod || echo "a deploy is already running"

` + exitTable

const helpUnlock = `Usage: lc-cli unlock KEY

Release KEY. There is no ownership check: any client may release any key,
a session's hold included; the first live waiter gets it at once. Exits 3
if KEY was not held, or if the server did not answer once the unlock was
sent: it is not sent again, since a second unlock could release whoever
took KEY meanwhile.

` + globalFlags + `
Example:
  lc-cli unlock maintenance

` + exitTable

const helpWait = `Usage: lc-cli wait KEY [--timeout D]

Wait for KEY's turn and release it at once: return when everyone who queued
for KEY before you is done. Nothing is held afterwards.

Flags (also accepted after KEY):
  --timeout D   give up after D (30s, 5m, or seconds: 30); exit 1

` + globalFlags + `
Example:
  lc-cli wait deploy/prod --timeout 10m && ./smoke-tests.sh

` + exitTable

const helpReset = `Usage: lc-cli reset key KEY
       lc-cli reset source [SOURCE]

Each prints what it released, as the JSON API showed it just before (or
that nothing was held).

reset key KEY drops KEY's holder (a crashed client, say) and answers '-' to
every waiter of KEY: their "lock" exits 1.

reset source SOURCE answers '-' to every waiter from SOURCE on any key, then
releases every key SOURCE holds (each passes to its next waiter). Without
SOURCE it resets --source / $LC_SOURCE, or, when that is empty, your own
IP address as the server sees it.

` + globalFlags + `
Examples:
  lc-cli reset key deploy/prod
  lc-cli reset source build-agent-7

` + exitTable

const helpKeys = `Usage: lc-cli keys [--web-address HOST:PORT] [--json] [--prefix P] [--limit N]

List the held keys as a table: key, holder source, held for, waiters. Read
from the server's JSON API (GET /api/v1/keys) on its web port.

Flags:
  --json        print the API's JSON list as it is, for scripts
  --prefix P    only keys that start with P
  --limit N     at most N keys (default: all)

` + globalFlags + `
Examples:
  lc-cli keys
  lc-cli keys --prefix deploy/ --json | jq -r '.[].key'

` + exitTable

const helpSessions = `Usage: lc-cli sessions [--web-address HOST:PORT] [--json]

List the open sessions, connected or not: id, source, remote address,
state, TTL, time left before expiry, keys held, Locks waiting. Read from the
server's JSON API (GET /api/v1/sessions) on its web port.

Flags:
  --json        print the API's JSON list as it is, for scripts

` + globalFlags + `
Examples:
  lc-cli sessions
  lc-cli sessions --json | jq -r '.[] | select(.connected | not) | .session'

` + exitTable

const helpVersion = `Usage: lc-cli version

Print lc-cli's version.

Example:
  lc-cli version
`

const helpHelp = `Usage: lc-cli help [COMMAND]

Print the overview, or the help of COMMAND (same as lc-cli COMMAND --help).

Example:
  lc-cli help lock
`
