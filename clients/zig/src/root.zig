//! Client for Locking-Center, a small distributed lock server, on the
//! standard library alone. POSIX systems (Linux, macOS, the BSDs).
//!
//! - `Session` (recommended): one connection shared by many threads, holds
//!   that end with their holder, a fencing token with every grant, Ping and
//!   resume on its own, and a report when the session is lost.
//! - `Client`: the v1 protocol, one request per TCP connection (connect
//!   bounded by poll, one frame, one answer byte). Its holds have no owner:
//!   a key stays held after the program dies, until unlocked or reset.
//! - `TlsConfig`: TLS for both (`.tls = &config`), on std.crypto.tls: the
//!   server's chain checked against a CA bundle, its name checked.
//!
//!     const session = try locking_center.Session.open(gpa, "localhost:22119", .{ .ttl_ms = 10_000 });
//!     defer session.deinit();
//!     const token = try session.lock("invoices/2026-11", .{});
//!     errdefer session.release("invoices/2026-11", token);
//!     // ... work, passing `token` to the resource ...
//!     try session.unlock("invoices/2026-11", token);
//!     try session.close();

const std = @import("std");
const builtin = @import("builtin");
const posix = std.posix;

pub const wire = @import("wire.zig");
pub const Action = wire.Action;
pub const session = @import("session.zig");
pub const Session = session.Session;
pub const SessionError = session.Error;
pub const SessionOptions = session.Options;
pub const LockOptions = session.LockOptions;
pub const TryResult = session.TryResult;
pub const LostReason = session.LostReason;
pub const tls = @import("tls.zig");
pub const TlsConfig = tls.Config;

/// The answer timeout of requests that never wait in a queue (TryLock,
/// Unlock, the resets, Close), the same in every Locking-Center client.
pub const default_request_timeout_ns: u64 = 30 * std.time.ns_per_s;

/// The server's default TCP port.
pub const default_port: u16 = 22119;

/// How long a call that gave up waiting (timeout, cancellation) waits for
/// the server to close after the hang-up. A grant that crossed the hang-up
/// on the wire is still read in that window, so it is not lost.
const hang_up_grace_ms: i32 = 2000;

/// Everything a call can fail with. The outcomes a caller branches on are
/// kept apart: NotWon, Reset, Refused (with the ValidationError names for
/// input refused before sending, see `isRefused`) and Unreachable; Timeout
/// and Cancelled when a wait was given up.
pub const Error = wire.ValidationError || wire.AnswerError || error{
    /// `tryLockOrError` found the key held ('#'). `tryLock` returns false.
    NotWon,
    /// The server could not be reached: connecting failed or timed out, the
    /// connection closed without an answer, or no answer came within the
    /// request timeout.
    Unreachable,
    /// The wait timeout passed; the connection was closed, so the server
    /// has withdrawn the waiter.
    Timeout,
    /// The wait was cancelled through a CancelToken; the connection was
    /// closed, so the server has withdrawn the waiter.
    Cancelled,
    /// TLS: the handshake failed (the server's certificate not signed by
    /// the configured CAs or not for the server name, a server that asks
    /// for a client certificate, an alert); the reason is logged.
    TlsHandshakeFailed,
    /// TLS: no name to check in the server's certificate. The v1 Client
    /// knows only an IP address, and Zig's TLS checks DNS names only: set
    /// `TlsConfig`'s `server_name`.
    ServerNameRequired,
};

/// True for Refused and for input refused before sending.
pub fn isRefused(err: Error) bool {
    return switch (err) {
        error.Refused, error.KeyEmpty, error.KeyTooLong, error.SourceTooLong => true,
        else => false,
    };
}

/// Options given once, at `Client.init`.
pub const Options = struct {
    /// Names the requester (0..127 bytes); empty: the server uses the peer's
    /// IP address. The slice must outlive the client.
    source: []const u8 = "",
    /// Time allowed for the TCP connection to be established.
    connect_timeout_ns: u64 = 5 * std.time.ns_per_s,
    /// Time allowed for the answer of calls that never queue (TryLock,
    /// Unlock, the resets); null waits forever.
    request_timeout_ns: ?u64 = default_request_timeout_ns,
    /// TLS for every connection (it must outlive the client); its
    /// `server_name` must be set. The handshake counts in
    /// `connect_timeout_ns`. null: plain TCP.
    tls: ?*const TlsConfig = null,
};

/// How long a Lock or Wait may wait, and how it can be cancelled.
pub const WaitOptions = struct {
    /// Give up with error.Timeout after this long (from the call, connecting
    /// included); null waits until granted.
    timeout_ns: ?u64 = null,
    /// Give up with error.Cancelled when this token is cancelled.
    cancel: ?*CancelToken = null,
};

/// Cancels waiting calls from another thread.
///
/// `cancel` writes one byte to a pipe that is never read, so every v1 call
/// polling the token, now or later, wakes up, hangs up its connection (the
/// server withdraws the waiter) and returns error.Cancelled; and it wakes
/// every session Lock waiting under it, which sends Cancel.
pub const CancelToken = struct {
    fds: [2]posix.fd_t,
    cancelled: std.atomic.Value(bool) = .init(false),
    /// Guards `waiters`.
    mu: std.Thread.Mutex = .{},
    /// Session calls waiting under the token (an intrusive list).
    waiters: ?*Waiter = null,

    /// A session call waiting under the token: its mutex and condition.
    pub const Waiter = struct {
        next: ?*Waiter = null,
        mutex: *std.Thread.Mutex,
        cond: *std.Thread.Condition,
    };

    pub fn init() posix.PipeError!CancelToken {
        return .{ .fds = try posix.pipe2(.{ .CLOEXEC = true, .NONBLOCK = true }) };
    }

    /// Closes the pipe; no call may be using the token any more.
    pub fn deinit(self: *CancelToken) void {
        posix.close(self.fds[0]);
        posix.close(self.fds[1]);
    }

    /// Cancels every call waiting under this token, now and later.
    /// Safe from any thread; more than once is fine.
    pub fn cancel(self: *CancelToken) void {
        if (self.cancelled.swap(true, .acq_rel)) return;
        // A full pipe still wakes every poll: nothing is lost if it fails.
        _ = posix.write(self.fds[1], "x") catch {};
        self.mu.lock();
        defer self.mu.unlock();
        var w = self.waiters;
        while (w) |node| : (w = node.next) {
            // Under the waiter's own mutex, so a waiter that has just seen
            // the token uncancelled is already waiting when woken.
            node.mutex.lock();
            node.cond.broadcast();
            node.mutex.unlock();
        }
    }

    pub fn isCancelled(self: *const CancelToken) bool {
        return self.cancelled.load(.acquire);
    }

    /// Registers a session call; call without holding its mutex.
    pub fn addWaiter(self: *CancelToken, node: *Waiter) void {
        self.mu.lock();
        defer self.mu.unlock();
        node.next = self.waiters;
        self.waiters = node;
    }

    pub fn removeWaiter(self: *CancelToken, node: *Waiter) void {
        self.mu.lock();
        defer self.mu.unlock();
        var link = &self.waiters;
        while (link.*) |n| : (link = &n.next) {
            if (n == node) {
                link.* = n.next;
                return;
            }
        }
    }
};

/// Splits "host:port", "[v6]:port", a bare host or IP (port 22119).
fn splitHostPort(text: []const u8) error{InvalidPort}!struct { host: []const u8, port: u16 } {
    if (std.mem.startsWith(u8, text, "[")) {
        const close = std.mem.indexOfScalar(u8, text, ']') orelse return .{ .host = text, .port = default_port };
        const host = text[1..close];
        const rest = text[close + 1 ..];
        if (rest.len == 0) return .{ .host = host, .port = default_port };
        if (rest[0] != ':') return error.InvalidPort;
        return .{ .host = host, .port = std.fmt.parseInt(u16, rest[1..], 10) catch return error.InvalidPort };
    }
    const colon = std.mem.lastIndexOfScalar(u8, text, ':') orelse return .{ .host = text, .port = default_port };
    if (std.mem.indexOfScalar(u8, text, ':') != colon) return .{ .host = text, .port = default_port }; // a bare IPv6
    return .{ .host = text[0..colon], .port = std.fmt.parseInt(u16, text[colon + 1 ..], 10) catch return error.InvalidPort };
}

/// The host of "host:port", "[v6]:port" or a bare host.
pub fn hostOf(address: []const u8) []const u8 {
    const hp = splitHostPort(address) catch return address;
    return hp.host;
}

/// Connects to `address` ("host:port", names resolved), trying each
/// resolved address in turn within `timeout_ns` each; a non-blocking
/// socket, or error.Unreachable.
pub fn connectHost(gpa: std.mem.Allocator, address: []const u8, timeout_ns: u64) error{ Unreachable, OutOfMemory }!posix.socket_t {
    const hp = splitHostPort(address) catch return error.Unreachable;
    if (std.net.Address.parseIp(hp.host, hp.port)) |ip| {
        return connectAddress(ip, timeout_ns);
    } else |_| {}
    const list = std.net.getAddressList(gpa, hp.host, hp.port) catch |e| switch (e) {
        error.OutOfMemory => return error.OutOfMemory,
        else => return error.Unreachable,
    };
    defer list.deinit();
    // A name with several records (a cluster's nodes): any of them, in random order.
    std.crypto.random.shuffle(std.net.Address, list.addrs);
    for (list.addrs) |a| {
        if (connectAddress(a, timeout_ns)) |sock| return sock else |_| {}
    }
    return error.Unreachable;
}

/// A connected, non-blocking TCP socket to `address`, or error.Unreachable.
fn connectAddress(address: std.net.Address, timeout_ns: u64) error{Unreachable}!posix.socket_t {
    const sock = posix.socket(
        address.any.family,
        posix.SOCK.STREAM | posix.SOCK.NONBLOCK | posix.SOCK.CLOEXEC,
        posix.IPPROTO.TCP,
    ) catch return error.Unreachable;
    errdefer posix.close(sock);
    posix.connect(sock, &address.any, address.getOsSockLen()) catch |err| switch (err) {
        error.WouldBlock => {
            waitWritable(sock, timeout_ns) catch return error.Unreachable; // connect timeout
            posix.getsockoptError(sock) catch return error.Unreachable;
        },
        else => return error.Unreachable,
    };
    // Small frames: send them now rather than wait for Nagle.
    const one: c_int = 1;
    posix.setsockopt(sock, posix.IPPROTO.TCP, posix.TCP.NODELAY, std.mem.asBytes(&one)) catch {};
    if (@hasDecl(posix.SO, "NOSIGPIPE")) {
        posix.setsockopt(sock, posix.SOL.SOCKET, posix.SO.NOSIGPIPE, std.mem.asBytes(&one)) catch {};
    }
    return sock;
}

/// Makes `sock` blocking again (a session's reader blocks in read).
pub fn setBlocking(sock: posix.socket_t) !void {
    const flags = try posix.fcntl(sock, posix.F.GETFL, 0);
    const nonblock: usize = @as(u32, @bitCast(posix.O{ .NONBLOCK = true }));
    _ = try posix.fcntl(sock, posix.F.SETFL, flags & ~nonblock);
}

/// Bounds each blocking send on `sock` (SO_SNDTIMEO).
pub fn setSendTimeout(sock: posix.socket_t, timeout_ns: u64) !void {
    const tv = posix.timeval{
        .sec = @intCast(timeout_ns / std.time.ns_per_s),
        .usec = @intCast((timeout_ns % std.time.ns_per_s) / std.time.ns_per_us),
    };
    try posix.setsockopt(sock, posix.SOL.SOCKET, posix.SO.SNDTIMEO, std.mem.asBytes(&tv));
}

/// Resolves `text` to one address: an IP ("a.b.c.d:port", "[v6]:port",
/// "::1", a bare IP gets port 22119) as it is, or a host name
/// ("localhost:22119") through the resolver, preferring an IPv4 address.
/// A `Session` tries every address a name resolves to; this picks one for
/// `Client.init`.
pub fn parseAddress(text: []const u8) error{ InvalidAddress, InvalidPort, UnknownHost }!std.net.Address {
    const hp = try splitHostPort(text);
    if (std.net.Address.parseIp(hp.host, hp.port)) |ip| return ip else |_| {}
    if (hp.host.len == 0 or std.mem.indexOfAny(u8, hp.host, " /[]") != null) return error.InvalidAddress;
    // The resolver's list and its scratch space fit in a small buffer.
    var scratch: [16 * 1024]u8 = undefined;
    var fba = std.heap.FixedBufferAllocator.init(&scratch);
    const list = std.net.getAddressList(fba.allocator(), hp.host, hp.port) catch return error.UnknownHost;
    defer list.deinit();
    if (list.addrs.len == 0) return error.UnknownHost;
    for (list.addrs) |a| if (a.any.family == posix.AF.INET) return a;
    return list.addrs[0];
}

/// A Locking-Center client: an address and a source given once. It holds
/// no connection; every call opens its own, so a Client may be shared by
/// threads.
pub const Client = struct {
    address: std.net.Address,
    options: Options,

    pub fn init(address: std.net.Address, options: Options) Client {
        return .{ .address = address, .options = options };
    }

    /// Waits (FIFO) until `key` is granted, without a time limit.
    /// error.Reset if the key or this source is reset while waiting.
    pub fn lock(self: Client, key: []const u8) Error!void {
        return self.lockWith(key, .{});
    }

    /// Like `lock`, with a timeout and/or a CancelToken. If the grant
    /// crosses the timeout or the cancellation on the wire, this returns
    /// success: the key is held and must be unlocked.
    pub fn lockWith(self: Client, key: []const u8, wait_options: WaitOptions) Error!void {
        _ = try self.call(.lock, key, self.options.source, wait_options);
    }

    /// Takes `key` only if it is free right now: true if it is now held by
    /// this client, false if someone holds it ('#').
    pub fn tryLock(self: Client, key: []const u8) Error!bool {
        return self.call(.try_lock, key, self.options.source, null);
    }

    /// `tryLock` that fails with error.NotWon instead of returning false,
    /// for `try` chains.
    pub fn tryLockOrError(self: Client, key: []const u8) Error!void {
        if (!try self.tryLock(key)) return error.NotWon;
    }

    /// Releases `key` (any client may release any key); error.Refused if it
    /// was not held.
    pub fn unlock(self: Client, key: []const u8) Error!void {
        _ = try self.call(.unlock, key, self.options.source, null);
    }

    /// Waits for one's turn on `key` and releases it at once.
    pub fn wait(self: Client, key: []const u8) Error!void {
        return self.waitWith(key, .{});
    }

    /// `wait` with a timeout and/or a CancelToken.
    pub fn waitWith(self: Client, key: []const u8, wait_options: WaitOptions) Error!void {
        try self.lockWith(key, wait_options);
        try self.unlock(key);
    }

    /// Drops the holder of `key` and fails its waiters (error.Reset).
    /// Idempotent.
    pub fn resetByKey(self: Client, key: []const u8) Error!void {
        _ = try self.call(.reset_by_key, key, "", null);
    }

    /// Fails every waiter from `source` (on any key), then releases every
    /// key it holds. Empty `source`: the caller's own IP address.
    pub fn resetBySource(self: Client, source: []const u8) Error!void {
        _ = try self.call(.reset_by_source, "", source, null);
    }

    /// One request: validate, connect, write the frame, read one byte.
    fn call(self: Client, action: Action, key: []const u8, source: []const u8, wait_options: ?WaitOptions) Error!bool {
        // Validation first: nothing is opened for a bad request.
        var buf: [wire.max_frame]u8 = undefined;
        const frame = try wire.encode(&buf, action, key, source);
        const token: ?*CancelToken = if (wait_options) |w| w.cancel else null;
        if (token) |t| if (t.isCancelled()) return error.Cancelled;
        var timer = std.time.Timer.start() catch return error.Unreachable;

        const sock = try self.connect();
        defer posix.close(sock);
        var link: tls.Link = .{ .sock = sock };
        // One request's TLS state, in place on this stack (about 70 KiB):
        // the v1 client allocates nothing.
        var conn: tls.Conn = undefined;
        if (self.options.tls) |config| {
            const name = config.server_name orelse return error.ServerNameRequired;
            try conn.connect(sock, config, name, self.options.connect_timeout_ns);
            link.tls = &conn;
        }
        try link.send(frame, self.options.connect_timeout_ns);

        while (true) {
            // The answer may already be in (TLS reads ahead); the answer
            // wins over a cancellation that arrived with it.
            var answer: [1]u8 = undefined;
            const got = link.readNow(&answer) catch return error.Unreachable; // closed without an answer
            if (got == 1) return wire.interpret(action, answer[0]);

            var timeout_ms: i32 = -1;
            if (wait_options) |w| {
                if (w.timeout_ns) |limit| {
                    const spent = timer.read();
                    if (spent >= limit) return giveUp(link, action, error.Timeout);
                    timeout_ms = msCeil(limit - spent);
                }
            } else if (self.options.request_timeout_ns) |limit| {
                timeout_ms = msCeil(limit);
            }

            var fds = [2]posix.pollfd{
                .{ .fd = sock, .events = posix.POLL.IN, .revents = 0 },
                .{ .fd = if (token) |t| t.fds[0] else -1, .events = posix.POLL.IN, .revents = 0 },
            };
            const ready = posix.poll(&fds, timeout_ms) catch return error.Unreachable;
            if (ready == 0) {
                if (wait_options == null) {
                    // Request timeout. A tryLock's '+' may be on its way (a
                    // slow fsync): hang up and keep a grant that crosses it.
                    if (action == .try_lock) return giveUp(link, action, error.Unreachable);
                    return error.Unreachable;
                }
                continue; // the deadline check above decides
            }
            if (fds[0].revents != 0) continue; // read at the top
            if (fds[1].revents != 0) return giveUp(link, action, error.Cancelled);
        }
    }

    /// A connected, non-blocking TCP socket, or error.Unreachable.
    fn connect(self: Client) Error!posix.socket_t {
        return connectAddress(self.address, self.options.connect_timeout_ns);
    }
};

const send_flags: u32 = if (@hasDecl(posix.MSG, "NOSIGNAL")) posix.MSG.NOSIGNAL else 0;

/// Writes all of `data`; on a non-blocking socket waits at most
/// `timeout_ns` each time the buffer is full (a blocking one is bounded by
/// its SO_SNDTIMEO).
pub fn sendAllTimeout(sock: posix.socket_t, data: []const u8, timeout_ns: u64) error{Unreachable}!void {
    var rest = data;
    while (rest.len > 0) {
        const n = posix.send(sock, rest, send_flags) catch |err| switch (err) {
            error.WouldBlock => {
                try waitWritable(sock, timeout_ns);
                continue;
            },
            else => return error.Unreachable,
        };
        rest = rest[n..];
    }
}

/// Polls until `sock` is writable; error.Unreachable when `timeout_ns` passes first.
fn waitWritable(sock: posix.socket_t, timeout_ns: u64) error{Unreachable}!void {
    var fds = [1]posix.pollfd{.{ .fd = sock, .events = posix.POLL.OUT, .revents = 0 }};
    const ready = posix.poll(&fds, msCeil(timeout_ns)) catch return error.Unreachable;
    if (ready == 0) return error.Unreachable;
}

/// Hangs up a waiting request, or a tryLock past its request timeout:
/// ends the write side (close_notify over TLS, then a shutdown) so the
/// server sees the end of the stream and withdraws the waiter, then reads
/// briefly so a grant that crossed the hang-up is not lost. For a tryLock
/// only a '+' changes `why`. The caller closes the socket.
fn giveUp(link: tls.Link, action: Action, why: Error) Error!bool {
    link.closeWrite(@as(u64, hang_up_grace_ms) * std.time.ns_per_ms) catch return why;
    var timer = std.time.Timer.start() catch return why;
    const grace_ns: u64 = @as(u64, hang_up_grace_ms) * std.time.ns_per_ms;
    while (true) {
        var answer: [1]u8 = undefined;
        const n = link.readNow(&answer) catch return why;
        if (n == 1) {
            if (answer[0] == '+' or (answer[0] == '-' and action != .try_lock)) return wire.interpret(action, answer[0]);
            return why;
        }
        const spent = timer.read();
        if (spent >= grace_ns) return why;
        var fds = [1]posix.pollfd{.{ .fd = link.sock, .events = posix.POLL.IN, .revents = 0 }};
        const ready = posix.poll(&fds, msCeil(grace_ns - spent)) catch return why;
        if (ready == 0) return why;
    }
}

/// Nanoseconds to a poll timeout in milliseconds, rounded up, capped.
pub fn msCeil(ns: u64) i32 {
    const ms = (ns + std.time.ns_per_ms - 1) / std.time.ns_per_ms;
    return @intCast(@min(ms, std.math.maxInt(i32)));
}

test {
    _ = wire;
    _ = session;
    _ = tls;
}

test "parseAddress adds the default port" {
    try std.testing.expectEqual(@as(u16, 22119), (try parseAddress("127.0.0.1")).getPort());
    try std.testing.expectEqual(@as(u16, 7), (try parseAddress("127.0.0.1:7")).getPort());
    try std.testing.expectEqual(@as(u16, 22119), (try parseAddress("[::1]")).getPort());
    try std.testing.expectEqual(@as(u16, 9), (try parseAddress("[::1]:9")).getPort());
    try std.testing.expectEqual(@as(u16, 22119), (try parseAddress("::1")).getPort());
    // Host names are resolved.
    const local = try parseAddress("localhost:22119");
    try std.testing.expectEqual(@as(u16, 22119), local.getPort());
    try std.testing.expectError(error.InvalidPort, parseAddress("localhost:port"));
}

test "isRefused groups the refusals" {
    try std.testing.expect(isRefused(error.Refused));
    try std.testing.expect(isRefused(error.KeyTooLong));
    try std.testing.expect(!isRefused(error.Unreachable));
    try std.testing.expect(!isRefused(error.Reset));
}
