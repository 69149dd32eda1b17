//! Sessions (docs/protocol.md, "Sessions"): one TCP connection that carries
//! the requests of many threads at once, answered out of order by id, and
//! that owns the keys it takes.
//!
//! Guarantees:
//! - Every grant comes with its fencing token (what `lock` returns).
//! - A Lock that gives up (timeout, CancelToken) sends Cancel and waits for
//!   the Lock's one answer; a grant that crossed the Cancel is released by
//!   its token, so an error from `lock` always means nothing is held.
//! - Ping goes out whenever nothing was sent for a third of the TTL.
//! - The address may be a list ("h1:p1,h2:p2,h3:p3": a cluster's nodes, any
//!   of which answers); each round tries every address in random order,
//!   every address a name resolves to included, each attempt (connect and
//!   the open's answer) within connect_timeout_ns.
//! - A dropped connection (a restart, a cluster's leader change) is resumed
//!   through any address with a growing back-off between rounds while the
//!   TTL allows, counted from the send time of the last answered request.
//!   Locks and TryLocks pending on it are reissued with their old ids after
//!   the resume (Reissue: a grant made before the drop is answered at once
//!   with its token), so their callers just go on waiting; an Unlock or a
//!   reset fails with error.OutcomeUnknown (never resent blindly), a Close
//!   or Ping with error.Disconnected. After the resume the session releases
//!   any grant of a Lock its caller gave up on.
//! - When the session is lost (the resume refused, the TTL passed), every
//!   pending and later call fails with error.SessionLost; `waitLost`, `err`
//!   and the `on_lost` callback report it.
//!
//! Threads: a session runs a supervisor thread (it writes every frame,
//! sends Pings and resumes) and a reader thread per connection (it matches
//! answers to calls). `close` ends both before it returns. Over TLS both
//! threads use one `tls.Conn`, which serialises them with one mutex around
//! the TLS state (its reader changes the write keys on a KeyUpdate) but
//! never holds it while waiting on the socket (tls.zig, `Conn`): the two
//! threads are kept because a write that waits for room in the socket must
//! not stop the answers from being read. Memory comes
//! from the allocator given to `open`, which must be thread-safe (the
//! general-purpose allocators are).

const std = @import("std");
const posix = std.posix;
const wire = @import("wire.zig");
const root = @import("root.zig");
const tls = @import("tls.zig");

const log = std.log.scoped(.locking_center);

/// Every error a session call can return.
pub const Error = wire.SessionValidationError || error{
    /// A Lock answered '-': the key or this session's source was reset
    /// while waiting (or the grant could not be made durable). Nothing held.
    Reset,
    /// Unlock, a reset or TryLock answered '-'; for Unlock: this session does
    /// not hold that grant. For `open`: the server refused the session (a
    /// wrong auth token, its connection limit).
    Refused,
    /// A byte the server never sends for that request.
    UnexpectedAnswer,
    /// No connection, no answer within the request timeout.
    Unreachable,
    /// A Lock's timeout passed; the waiter was withdrawn, nothing is held.
    Timeout,
    /// A Lock was cancelled through its CancelToken; nothing is held.
    Cancelled,
    /// A Close was sent on a connection that broke before its answer. The
    /// session resumes on its own. (Locks and TryLocks are reissued instead.)
    Disconnected,
    /// An Unlock or a reset whose answer was lost: it may or may not have
    /// taken effect (never resent blindly).
    OutcomeUnknown,
    /// `open`: the TLS handshake failed with every address that answered
    /// (the certificate not signed by the configured CAs or not for the
    /// server name, a server that wants a client certificate); the reason
    /// is logged.
    TlsHandshakeFailed,
    /// `open` with TLS: an address is an IP and the config names no
    /// server: Zig's TLS checks DNS names only.
    ServerNameRequired,
    /// The session ended without Close: its holds are gone.
    SessionLost,
    /// The session was closed.
    SessionClosed,
    OutOfMemory,
};

/// Why a session was lost.
pub const LostReason = enum {
    /// The server answered '-' to the resume: the session had expired, was
    /// ended from the web API, or the server restarted without its log.
    resume_refused,
    /// The TTL passed, counted from the last request the server is known to
    /// have received, without a successful resume.
    ttl_passed,
};

/// Settings of a session, given to `open`.
pub const Options = struct {
    /// The TTL to ask for, in ms; 0 asks for the server's SESSION_TTL. The
    /// server clamps anything else to 1,000 ... 600,000.
    ttl_ms: u32 = 0,
    /// Names the requester (0..127 bytes; empty: the peer's IP). Copied.
    source: []const u8 = "",
    /// The server's AUTH_TOKEN, or empty. Copied.
    auth: []const u8 = "",
    /// TLS on every connection (it must outlive the session); the name
    /// checked is the host of each address unless the config names one.
    /// The handshake counts in connect_timeout_ns. null: plain TCP.
    tls: ?*const tls.Config = null,
    connect_timeout_ns: u64 = 5 * std.time.ns_per_s,
    /// Answer timeout of TryLock, Unlock, the resets and Close.
    request_timeout_ns: u64 = root.default_request_timeout_ns,
    /// Called once, from a session thread, when the session is lost (not
    /// on Close). Keep it short; do not call the session from it.
    on_lost: ?*const fn (ctx: ?*anyopaque, reason: LostReason) void = null,
    on_lost_ctx: ?*anyopaque = null,
};

/// How long a Lock may wait, and how it can be cancelled.
pub const LockOptions = struct {
    /// Give up with error.Timeout after this long; null waits until granted.
    timeout_ns: ?u64 = null,
    /// Give up with error.Cancelled when this token is cancelled.
    cancel: ?*root.CancelToken = null,
};

/// What a TryLock found.
pub const TryResult = union(enum) {
    /// The key was free and is now held, with this fencing token.
    locked: u64,
    /// Someone holds the key ('#'), this session included.
    busy,
};

const max_pending = 1024;
const min_backoff_ns = 50 * std.time.ns_per_ms;
const max_backoff_ns = std.time.ns_per_s;
/// Rounds over the addresses `open` makes before it gives up.
const open_rounds = 3;
/// Most addresses in one list.
const max_addresses = 16;

const End = enum { lost_resume_refused, lost_ttl_passed, closed };
/// The end of the session as an error, for the supervisor's resume loop.
const EndError = error{ lost_resume_refused, lost_ttl_passed, closed };

fn endOf(e: EndError) End {
    return switch (e) {
        error.lost_resume_refused => .lost_resume_refused,
        error.lost_ttl_passed => .lost_ttl_passed,
        error.closed => .closed,
    };
}

fn endError(e: End) Error {
    return switch (e) {
        .closed => error.SessionClosed,
        else => error.SessionLost,
    };
}

const Kind = enum { user, internal, stray_unlock };

const Call = struct {
    action: wire.SessionAction,
    key_buf: [wire.max_len]u8 = undefined,
    key_len: u8 = 0,
    token: u64,
    kind: Kind,
    id: u32 = 0,
    sent: bool = false,
    sent_at: u64 = 0,
    gave_up: bool = false,
    /// A Lock or TryLock sent on a lost connection: queued again, to be sent
    /// with the same id after the resume.
    reissue: bool = false,
    owner_gone: bool = false,
    done: bool = false,
    status: u8 = 0,
    answer_token: u64 = 0,
    err: ?Error = null,
    cond: std.Thread.Condition = .{},

    fn key(self: *const Call) []const u8 {
        return self.key_buf[0..self.key_len];
    }
};

const Held = struct { token: u64, id: u32 };

const Stray = struct {
    key_buf: [wire.max_len]u8 = undefined,
    key_len: u8 = 0,
    token: u64,

    fn key(self: *const Stray) []const u8 {
        return self.key_buf[0..self.key_len];
    }
};

/// A session. Made by `open`, ended by `close`, freed by `deinit`. Safe to
/// share between threads (by pointer).
pub const Session = struct {
    gpa: std.mem.Allocator,
    address: []u8,
    source: []u8,
    auth: []u8,
    options: Options,
    id: u64,
    ttl_ns: u64,
    base: std.time.Instant,

    /// Guards every field below.
    mu: std.Thread.Mutex = .{},
    /// Wakes the supervisor: something to send, the connection broke, the
    /// session ended.
    wake: std.Thread.Condition = .{},
    /// Broadcast once, when the session ends.
    ended: std.Thread.Condition = .{},
    sock: ?posix.socket_t = null,
    broken: bool = false,
    queue: std.ArrayList(*Call) = .empty,
    pending: std.AutoHashMapUnmanaged(u32, *Call) = .empty,
    next_id: u32 = 0,
    /// Grants the program holds through this session: key (owned) to the
    /// grant's token and the id of the request that made it.
    held: std.StringHashMapUnmanaged(Held) = .empty,
    /// Ids no new request may take: those of the held grants (Reissue finds a
    /// grant by its request's id) and of the calls queued to be reissued.
    reserved: std.AutoHashMapUnmanaged(u32, void) = .empty,
    /// Grants the session may hold that no caller owns, released after the
    /// resume; token 0 when unknown.
    strays: std.ArrayList(Stray) = .empty,
    /// Send time of the latest request the server answered: the server's
    /// TTL runs out no earlier than confirmed + ttl.
    confirmed: u64 = 0,
    last_sent: u64 = 0,
    ping: ?*Call = null,
    closing: bool = false,
    close_ok: bool = false,
    end: ?End = null,
    /// The end has been told: on_lost has returned (or there is none to call).
    reported: bool = false,
    supervisor: ?std.Thread = null,

    /// Connects to `address` ("host:port", names resolved; a bare host gets
    /// port 22119; or a comma-separated list of them, any that answers) and
    /// opens a session: up to 3 rounds over the addresses, with a back-off
    /// between them.
    pub fn open(gpa: std.mem.Allocator, address: []const u8, options: Options) Error!*Session {
        if (options.source.len > wire.max_len) return error.SourceTooLong;
        if (options.auth.len > wire.max_len) return error.AuthTooLong;
        if (options.tls) |config| {
            var parts = std.mem.splitScalar(u8, address, ',');
            while (parts.next()) |p| _ = try config.serverNameFor(root.hostOf(std.mem.trim(u8, p, " ")));
        }
        const self = try gpa.create(Session);
        errdefer gpa.destroy(self);
        self.* = .{
            .gpa = gpa,
            .address = try gpa.dupe(u8, address),
            .source = &.{},
            .auth = &.{},
            .options = options,
            .id = 0,
            .ttl_ns = 0,
            .base = std.time.Instant.now() catch return error.Unreachable,
        };
        errdefer gpa.free(self.address);
        self.source = try gpa.dupe(u8, options.source);
        errdefer gpa.free(self.source);
        self.auth = try gpa.dupe(u8, options.auth);
        errdefer gpa.free(self.auth);
        var backoff: u64 = min_backoff_ns;
        var round: usize = 1;
        const opened = while (true) : (round += 1) {
            if (self.openConn(0, options.connect_timeout_ns)) |o| break o else |e| switch (e) {
                error.Unreachable, error.UnexpectedAnswer, error.TlsHandshakeFailed => if (round == open_rounds) return e,
                else => return e,
            }
            std.Thread.sleep(backoff / 2 + std.crypto.random.uintLessThan(u64, backoff / 2 + 1));
            backoff = @min(backoff * 2, max_backoff_ns);
        };
        errdefer self.closeLink(opened.link);
        self.id = opened.answer.session;
        self.ttl_ns = @as(u64, opened.answer.ttl_ms) * std.time.ns_per_ms;
        self.confirmed = opened.sent_at;
        self.last_sent = opened.sent_at;
        self.supervisor = std.Thread.spawn(.{}, run, .{ self, opened.link }) catch return error.Unreachable;
        return self;
    }

    /// Ends the session if `close` was not called (a failure is logged:
    /// the server then releases the holds one TTL later) and frees it. No
    /// call may be running on it.
    pub fn deinit(self: *Session) void {
        self.close() catch |e| switch (e) {
            error.SessionLost => {},
            else => log.warn("closing session {x:0>16}: {s}; the server releases its holds when its TTL passes", .{ self.id, @errorName(e) }),
        };
        for (self.queue.items) |c| self.gpa.destroy(c);
        self.queue.deinit(self.gpa);
        var it = self.pending.valueIterator();
        while (it.next()) |c| self.gpa.destroy(c.*);
        self.pending.deinit(self.gpa);
        var keys = self.held.keyIterator();
        while (keys.next()) |k| self.gpa.free(k.*);
        self.held.deinit(self.gpa);
        self.reserved.deinit(self.gpa);
        self.strays.deinit(self.gpa);
        self.gpa.free(self.address);
        self.gpa.free(self.source);
        self.gpa.free(self.auth);
        const gpa = self.gpa;
        gpa.destroy(self);
    }

    /// The session id the server gave (never 0).
    pub fn sessionId(self: *const Session) u64 {
        return self.id;
    }

    /// The TTL the server granted, in ms.
    pub fn ttlMs(self: *const Session) u64 {
        return self.ttl_ns / std.time.ns_per_ms;
    }

    /// Waits (FIFO) until `key` is granted to this session; returns the
    /// grant's fencing token. A key this session already holds waits for
    /// itself (a non-reentrant mutex).
    pub fn lock(self: *Session, key: []const u8, options: LockOptions) Error!u64 {
        try wire.validateRequest(.lock, key);
        if (options.cancel) |t| if (t.isCancelled()) return error.Cancelled;
        const deadline: ?u64 = if (options.timeout_ns) |t| self.now() + t else null;
        const c = try self.submit(.lock, key, 0);
        const a = try self.waitCall(c, deadline, options.cancel);
        return switch (a.status) {
            '+' => a.token,
            '-' => self.refusal(error.Reset),
            else => error.UnexpectedAnswer,
        };
    }

    /// Takes `key` only if it is free right now.
    pub fn tryLock(self: *Session, key: []const u8) Error!TryResult {
        const c = try self.submit(.try_lock, key, 0);
        const a = try self.waitCall(c, self.now() + self.options.request_timeout_ns, null);
        return switch (a.status) {
            '+' => .{ .locked = a.token },
            '#' => .busy,
            '-' => self.refusal(error.Refused),
            else => error.UnexpectedAnswer,
        };
    }

    /// Releases the grant of `key` with fencing token `token`.
    /// error.Refused: this session does not hold that grant (a reset took
    /// it); nothing was released. error.SessionLost: the hold ended with the
    /// session anyway.
    pub fn unlock(self: *Session, key: []const u8, token: u64) Error!void {
        return self.simple(.unlock, key, token);
    }

    /// Releases the grant without waiting for the answer, for `errdefer`:
    /// the Unlock by token is queued and the session settles it (after a
    /// resume if need be); a session already ended holds nothing. A failure
    /// to queue it (out of memory) is logged; the hold then ends with the
    /// session.
    pub fn release(self: *Session, key: []const u8, token: u64) void {
        const c = self.submit(.unlock, key, token) catch |e| switch (e) {
            error.SessionLost, error.SessionClosed => return,
            else => return log.warn("release of {s}: {s}", .{ key, @errorName(e) }),
        };
        self.mu.lock();
        defer self.mu.unlock();
        c.owner_gone = true;
        if (c.done) self.destroyCall(c);
    }

    /// Drops the holder of `key` (whoever it is) and refuses its waiters.
    pub fn resetByKey(self: *Session, key: []const u8) Error!void {
        return self.simple(.reset_by_key, key, 0);
    }

    /// Refuses every waiter from `source` and releases every key it holds
    /// (empty: this connection's IP as the server sees it).
    pub fn resetBySource(self: *Session, source: []const u8) Error!void {
        return self.simple(.reset_by_source, source, 0);
    }

    fn simple(self: *Session, action: wire.SessionAction, key: []const u8, token: u64) Error!void {
        const c = try self.submit(action, key, token);
        const a = try self.waitCall(c, self.now() + self.options.request_timeout_ns, null);
        return switch (a.status) {
            '+' => {},
            '-' => error.Refused,
            else => error.UnexpectedAnswer,
        };
    }

    /// Why the session ended (error.SessionLost or error.SessionClosed), or
    /// null while it lives.
    pub fn err(self: *Session) ?Error {
        self.mu.lock();
        defer self.mu.unlock();
        return if (self.end) |e| endError(e) else null;
    }

    /// Why the session was lost, or null (alive, or closed).
    pub fn lostReason(self: *Session) ?LostReason {
        self.mu.lock();
        defer self.mu.unlock();
        return switch (self.end orelse return null) {
            .lost_resume_refused => .resume_refused,
            .lost_ttl_passed => .ttl_passed,
            .closed => null,
        };
    }

    /// Blocks until the session ends or `timeout_ns` passes (null: no
    /// limit); returns why it ended, or null if it still lives.
    pub fn waitLost(self: *Session, timeout_ns: ?u64) ?Error {
        const deadline: ?u64 = if (timeout_ns) |t| self.now() + t else null;
        self.mu.lock();
        defer self.mu.unlock();
        // A loss is awaited until on_lost has returned, so that what it did is seen.
        while (self.end == null or !self.reported) {
            if (deadline) |d| {
                const n = self.now();
                if (n >= d) return null;
                self.ended.timedWait(&self.mu, d - n) catch {};
            } else self.ended.wait(&self.mu);
        }
        return endError(self.end.?);
    }

    /// Ends the session: its pending Locks are refused, every key it holds
    /// is released at once, and its threads end before this returns. Ok
    /// when already closed; error.SessionLost if it had been lost.
    pub fn close(self: *Session) Error!void {
        const result = self.closeRequest();
        self.finish(.closed);
        if (self.supervisor) |t| {
            t.join();
            self.supervisor = null;
        }
        return result;
    }

    fn closeRequest(self: *Session) Error!void {
        while (true) {
            const c = blk: {
                self.mu.lock();
                defer self.mu.unlock();
                if (self.end) |e| return if (e == .closed) {} else endError(e);
                self.closing = true;
                break :blk try self.pushLocked(.close, "", 0, .user);
            };
            self.wake.signal();
            _ = self.waitCall(c, self.now() + self.options.request_timeout_ns, null) catch |e| switch (e) {
                error.Disconnected => continue, // resumed: send it again
                error.SessionClosed => return,
                else => return e,
            };
            return;
        }
    }

    fn refusal(self: *Session, e: Error) Error {
        self.mu.lock();
        defer self.mu.unlock();
        return if (self.closing) error.SessionClosed else e;
    }

    fn now(self: *const Session) u64 {
        const n = std.time.Instant.now() catch return 0;
        return n.since(self.base);
    }

    fn submit(self: *Session, action: wire.SessionAction, key: []const u8, token: u64) Error!*Call {
        try wire.validateRequest(action, key);
        self.mu.lock();
        defer self.mu.unlock();
        if (self.end) |e| return endError(e);
        const c = try self.pushLocked(action, key, token, .user);
        self.wake.signal();
        return c;
    }

    fn newCall(self: *Session, action: wire.SessionAction, key: []const u8, token: u64, kind: Kind) Error!*Call {
        const c = try self.gpa.create(Call);
        c.* = .{ .action = action, .token = token, .kind = kind, .key_len = @intCast(key.len) };
        @memcpy(c.key_buf[0..key.len], key);
        return c;
    }

    fn pushLocked(self: *Session, action: wire.SessionAction, key: []const u8, token: u64, kind: Kind) Error!*Call {
        const c = try self.newCall(action, key, token, kind);
        errdefer self.gpa.destroy(c);
        try self.queue.append(self.gpa, c);
        return c;
    }

    fn destroyCall(self: *Session, c: *Call) void {
        self.gpa.destroy(c);
    }

    /// Queues the session's own release of a grant nobody owns.
    fn pushStrayUnlock(self: *Session, key: []const u8, token: u64) void {
        _ = self.pushLocked(.unlock, key, token, .stray_unlock) catch {
            // Out of memory: keep it for the next resume instead.
            var st = Stray{ .token = token, .key_len = @intCast(key.len) };
            @memcpy(st.key_buf[0..key.len], key);
            self.strays.append(self.gpa, st) catch log.warn("cannot release stray grant of {s} (out of memory); it ends with the session", .{key});
            return;
        };
        self.wake.signal();
    }

    const Answer = struct { status: u8, token: u64 };

    /// Waits for call `c` (of kind user) until `deadline` or `cancel`; frees
    /// it once its outcome is collected. A Lock that gives up sends Cancel
    /// and waits a request timeout more for its one answer.
    fn waitCall(self: *Session, c: *Call, deadline_in: ?u64, cancel: ?*root.CancelToken) Error!Answer {
        var node: root.CancelToken.Waiter = .{ .mutex = &self.mu, .cond = &c.cond };
        if (cancel) |t| t.addWaiter(&node);
        defer if (cancel) |t| t.removeWaiter(&node);
        var deadline = deadline_in;
        var given_up: ?Error = null;
        self.mu.lock();
        defer self.mu.unlock();
        while (true) {
            if (c.done) {
                defer self.destroyCall(c);
                if (given_up) |g| return g;
                if (c.err) |e| return e;
                return .{ .status = c.status, .token = c.answer_token };
            }
            const n = self.now();
            const expired = if (deadline) |d| n >= d else false;
            if (given_up) |g| {
                if (expired) {
                    self.abandonLocked(c); // a late '+' is still released by its token
                    return g;
                }
            } else if (expired or (cancel != null and cancel.?.isCancelled())) {
                const why: Error = if (expired) error.Timeout else error.Cancelled;
                // A reissue waiting for the resume may find a grant made
                // before the drop: it goes out all the same, a Lock's Cancel
                // right behind it (take), and a grant it finds is given back.
                if (!c.sent and !c.reissue) {
                    self.removeQueued(c);
                    self.destroyCall(c);
                    return why;
                }
                c.gave_up = true;
                switch (c.action) {
                    .lock => {
                        if (c.sent) {
                            _ = self.pushLocked(.cancel, "", c.id, .internal) catch {
                                c.owner_gone = true;
                                return why;
                            };
                            self.wake.signal();
                        }
                        given_up = why;
                        deadline = n + self.options.request_timeout_ns;
                        continue;
                    },
                    .unlock, .reset_by_key, .reset_by_source => {
                        c.owner_gone = true;
                        return error.OutcomeUnknown;
                    },
                    else => {
                        c.owner_gone = true;
                        return error.Unreachable;
                    },
                }
            }
            if (deadline) |d| {
                c.cond.timedWait(&self.mu, d - n) catch {};
            } else c.cond.wait(&self.mu);
        }
    }

    fn removeQueued(self: *Session, c: *Call) void {
        for (self.queue.items, 0..) |q, i| if (q == c) {
            _ = self.queue.orderedRemove(i);
            return;
        };
    }

    /// The owner of `c` goes: the session settles it alone.
    fn abandonLocked(self: *Session, c: *Call) void {
        if (c.done) {
            if ((c.action == .lock or c.action == .try_lock) and c.err == null and c.status == '+')
                self.pushStrayUnlock(c.key(), c.answer_token);
            self.destroyCall(c);
            return;
        }
        c.owner_gone = true;
        c.gave_up = true;
    }

    /// Sets the outcome of `c` and wakes its caller (or frees it).
    fn complete(self: *Session, c: *Call, status: u8, token: u64, e: ?Error) void {
        switch (c.kind) {
            .internal => self.destroyCall(c),
            .stray_unlock => {
                if (e != null) {
                    var st = Stray{ .token = c.token, .key_len = c.key_len };
                    @memcpy(st.key_buf[0..c.key_len], c.key());
                    self.strays.append(self.gpa, st) catch {};
                }
                self.destroyCall(c);
            },
            .user => {
                if (c.owner_gone) return self.destroyCall(c);
                c.done = true;
                c.status = status;
                c.answer_token = token;
                c.err = e;
                c.cond.broadcast();
            },
        }
    }

    fn deliver(self: *Session, a: wire.SessionAnswer) void {
        const kv = self.pending.fetchRemove(a.id) orelse return; // ignored, as the protocol says
        const c = kv.value;
        if (self.pending.count() == max_pending - 2 and self.queue.items.len > 0) self.wake.signal();
        if (c.sent_at > self.confirmed) self.confirmed = c.sent_at;
        if (self.ping == c) self.ping = null;
        if ((c.action == .lock or c.action == .try_lock) and a.status == '+') {
            if (c.gave_up) {
                self.pushStrayUnlock(c.key(), a.token);
            } else {
                self.putHeld(c.key(), a.token, c.id);
            }
        }
        if (c.action == .close and a.status == '+') self.close_ok = true;
        self.complete(c, a.status, a.token, null);
    }

    fn putHeld(self: *Session, key: []const u8, token: u64, id: u32) void {
        // Out of memory loses only the reservation or the stray cleanup's skip.
        self.reserved.put(self.gpa, id, {}) catch {};
        if (self.held.getPtr(key)) |v| {
            _ = self.reserved.remove(v.id);
            self.reserved.put(self.gpa, id, {}) catch {};
            v.* = .{ .token = token, .id = id };
            return;
        }
        const owned = self.gpa.dupe(u8, key) catch return;
        self.held.put(self.gpa, owned, .{ .token = token, .id = id }) catch self.gpa.free(owned);
    }

    fn dropHeld(self: *Session, key: []const u8, token: u64) void {
        const v = self.held.get(key) orelse return;
        if (v.token != token) return;
        _ = self.reserved.remove(v.id);
        if (self.held.fetchRemove(key)) |kv| self.gpa.free(kv.key);
    }

    fn addStray(self: *Session, key: []const u8, token: u64) void {
        var st = Stray{ .token = token, .key_len = @intCast(key.len) };
        @memcpy(st.key_buf[0..key.len], key);
        self.strays.append(self.gpa, st) catch log.warn("cannot track a stray grant of {s} (out of memory)", .{key});
    }

    /// The connection was lost: the Locks and TryLocks a caller still waits
    /// for are queued again, first and in the order they were sent, to be
    /// reissued with their ids; the rest fail or are set aside.
    fn disconnected(self: *Session) void {
        var reissue: std.ArrayList(*Call) = .empty;
        defer reissue.deinit(self.gpa);
        var it = self.pending.valueIterator();
        while (it.next()) |cp| {
            const c = cp.*;
            var e: Error = error.Disconnected;
            switch (c.action) {
                .lock, .try_lock => {
                    if (c.kind == .user and !c.gave_up and !c.owner_gone) {
                        if (reissue.append(self.gpa, c)) |_| {
                            c.sent = false;
                            c.reissue = true;
                            self.reserved.put(self.gpa, c.id, {}) catch {};
                            continue;
                        } else |_| {}
                    }
                    self.addStray(c.key(), 0);
                },
                .unlock => {
                    if (c.kind == .user and c.token != 0) self.addStray(c.key(), c.token);
                    if (c.kind == .user) e = error.OutcomeUnknown;
                },
                .reset_by_key, .reset_by_source => e = error.OutcomeUnknown,
                else => {},
            }
            self.complete(c, 0, 0, e);
        }
        self.pending.clearRetainingCapacity();
        self.ping = null;
        // Pings and Cancels queued for the lost connection mean nothing on
        // the next one.
        var i: usize = 0;
        while (i < self.queue.items.len) {
            const c = self.queue.items[i];
            if (c.action == .cancel or c.action == .ping) {
                _ = self.queue.orderedRemove(i);
                self.destroyCall(c);
            } else i += 1;
        }
        std.mem.sort(*Call, reissue.items, {}, struct {
            fn lt(_: void, a: *Call, b: *Call) bool {
                return a.sent_at < b.sent_at;
            }
        }.lt);
        self.queue.insertSlice(self.gpa, 0, reissue.items) catch {
            // Out of memory: they fail instead (a grant they had is released
            // after the resume).
            for (reissue.items) |c| {
                _ = self.reserved.remove(c.id);
                c.reissue = false;
                self.addStray(c.key(), 0);
                self.complete(c, 0, 0, error.Disconnected);
            }
        };
    }

    /// A resume succeeded: the releases of stray grants go first.
    fn resumed(self: *Session, sent_at: u64) void {
        self.confirmed = sent_at;
        self.last_sent = sent_at;
        var head: std.ArrayList(*Call) = .empty;
        defer head.deinit(self.gpa);
        for (self.strays.items, 0..) |*st, i| {
            if (self.held.get(st.key())) |h| if (st.token == 0 or st.token == h.token) continue;
            if (st.token == 0) {
                var dup = false;
                for (self.strays.items[0..i]) |*prev| {
                    if (prev.token == 0 and std.mem.eql(u8, prev.key(), st.key())) dup = true;
                }
                if (dup) continue;
            }
            const c = self.newCall(.unlock, st.key(), st.token, .stray_unlock) catch continue;
            head.append(self.gpa, c) catch {
                self.destroyCall(c);
                continue;
            };
        }
        self.strays.clearRetainingCapacity();
        self.queue.insertSlice(self.gpa, 0, head.items) catch {
            for (head.items) |c| self.destroyCall(c);
        };
    }

    /// Ends the session for good: every call fails with the reason.
    fn finish(self: *Session, end: End) void {
        var notify: ?LostReason = null;
        {
            self.mu.lock();
            defer self.mu.unlock();
            if (self.end != null) return;
            self.end = end;
            if (self.sock) |s| posix.shutdown(s, .both) catch {};
            const e = endError(end);
            var it = self.pending.valueIterator();
            while (it.next()) |c| self.complete(c.*, 0, 0, e);
            self.pending.clearRetainingCapacity();
            for (self.queue.items) |c| self.complete(c, 0, 0, e);
            self.queue.clearRetainingCapacity();
            self.strays.clearRetainingCapacity();
            var keys = self.held.keyIterator();
            while (keys.next()) |k| self.gpa.free(k.*);
            self.held.clearRetainingCapacity();
            self.reserved.clearRetainingCapacity();
            self.ended.broadcast();
            self.wake.broadcast();
            notify = switch (end) {
                .lost_resume_refused => .resume_refused,
                .lost_ttl_passed => .ttl_passed,
                .closed => null,
            };
            self.reported = notify == null or self.options.on_lost == null;
        }
        if (notify) |r| {
            log.info("session {x:0>16} lost: {s}", .{ self.id, @tagName(r) });
            if (self.options.on_lost) |f| {
                f(self.options.on_lost_ctx, r);
                self.mu.lock();
                self.reported = true;
                self.ended.broadcast();
                self.mu.unlock();
            }
        }
    }

    const Opened = struct { link: tls.Link, answer: wire.OpenAnswer, sent_at: u64 };

    /// Closes the socket and frees the TLS state of a connection no thread uses.
    fn closeLink(self: *Session, link: tls.Link) void {
        posix.close(link.sock);
        if (link.tls) |c| self.gpa.destroy(c);
    }

    /// One round over the addresses, in random order, until one answers
    /// the open; each attempt within limit_ns. A '-' is the server's word
    /// (not retried elsewhere); an address that does not answer (down, or a
    /// node without a leader that closes the connection) is skipped.
    fn openConn(self: *Session, resume_id: u64, limit_ns: u64) Error!Opened {
        var list: [max_addresses][]const u8 = undefined;
        var n: usize = 0;
        var parts = std.mem.splitScalar(u8, self.address, ',');
        while (parts.next()) |p| {
            if (n == max_addresses) break;
            list[n] = std.mem.trim(u8, p, " ");
            n += 1;
        }
        std.crypto.random.shuffle([]const u8, list[0..n]);
        var last: Error = error.Unreachable;
        for (list[0..n]) |a| {
            if (self.openAt(a, resume_id, limit_ns)) |o| return o else |e| switch (e) {
                // A handshake failure says more than a node that is down.
                error.Unreachable, error.UnexpectedAnswer => if (last != error.TlsHandshakeFailed) {
                    last = e;
                },
                error.TlsHandshakeFailed => last = e,
                else => return e,
            }
        }
        return last;
    }

    fn openAt(self: *Session, address: []const u8, resume_id: u64, limit_ns: u64) Error!Opened {
        var buf: [wire.max_open]u8 = undefined;
        const frame = try wire.encodeOpen(&buf, .{
            .ttl_ms = self.options.ttl_ms,
            .resume_id = resume_id,
            .source = self.source,
            .auth = self.auth,
        });
        const deadline = self.now() + limit_ns;
        const sock = try root.connectHost(self.gpa, address, limit_ns);
        var link: tls.Link = .{ .sock = sock };
        errdefer self.closeLink(link);
        if (self.options.tls) |config| {
            const name = try config.serverNameFor(root.hostOf(address));
            const c = try self.gpa.create(tls.Conn);
            link.tls = c;
            try c.connect(sock, config, name, deadline -| self.now());
        }
        const sent_at = self.now();
        try link.send(frame, limit_ns);
        var b: [wire.answer_len]u8 = undefined;
        var got: usize = 0;
        while (got < b.len) {
            const r = link.readNow(b[got..]) catch return error.Unreachable;
            got += r;
            if (r > 0) continue;
            const n = self.now();
            if (n >= deadline) return error.Unreachable;
            var fds = [1]posix.pollfd{.{ .fd = sock, .events = posix.POLL.IN, .revents = 0 }};
            const ready = posix.poll(&fds, root.msCeil(deadline - n)) catch return error.Unreachable;
            if (ready == 0) return error.Unreachable;
        }
        const a = wire.decodeOpenAnswer(&b);
        if (a.status == '+' and a.ttl_ms != 0 and a.session != 0) {
            root.setBlocking(sock) catch return error.Unreachable;
            return .{ .link = link, .answer = a, .sent_at = sent_at };
        }
        if (a.status == '-') return if (resume_id != 0) error.SessionLost else error.Refused;
        return error.UnexpectedAnswer;
    }

    /// The supervisor: serves each connection, resumes after a loss.
    fn run(self: *Session, first: tls.Link) void {
        var link = first;
        while (true) {
            self.serve(link);
            self.closeLink(link);
            {
                self.mu.lock();
                defer self.mu.unlock();
                if (self.end != null) return;
                if (!(self.closing and self.close_ok)) self.disconnected();
            }
            if (self.isClosedOk()) return self.finish(.closed);
            link = self.resumeLoop() catch |e| {
                const closing = blk: {
                    self.mu.lock();
                    defer self.mu.unlock();
                    break :blk self.closing;
                };
                return self.finish(if (closing) .closed else endOf(e));
            };
        }
    }

    fn isClosedOk(self: *Session) bool {
        self.mu.lock();
        defer self.mu.unlock();
        return self.closing and self.close_ok;
    }

    fn resumeLoop(self: *Session) EndError!tls.Link {
        var backoff: u64 = min_backoff_ns;
        while (true) {
            const deadline = blk: {
                self.mu.lock();
                defer self.mu.unlock();
                if (self.end) |e| return endAsError(e);
                break :blk self.confirmed + self.ttl_ns;
            };
            const n = self.now();
            if (n >= deadline) return error.lost_ttl_passed;
            if (self.openConn(self.id, @min(deadline - n, self.options.connect_timeout_ns))) |o| {
                self.mu.lock();
                defer self.mu.unlock();
                self.resumed(o.sent_at);
                log.info("session {x:0>16} resumed", .{self.id});
                return o.link;
            } else |e| switch (e) {
                error.SessionLost => return error.lost_resume_refused,
                else => {},
            }
            const jitter = std.crypto.random.uintLessThan(u64, 20 * std.time.ns_per_ms);
            const left = deadline -| self.now();
            self.mu.lock();
            defer self.mu.unlock();
            if (self.end == null) self.wake.timedWait(&self.mu, @min(backoff + jitter, left)) catch {};
            backoff = @min(backoff * 2, max_backoff_ns);
        }
    }

    fn serve(self: *Session, link: tls.Link) void {
        const sock = link.sock;
        {
            self.mu.lock();
            defer self.mu.unlock();
            if (self.end != null) return;
            self.sock = sock;
            self.broken = false;
        }
        const reader = std.Thread.spawn(.{}, readLoop, .{ self, link }) catch null;
        if (reader != null) self.writeLoop(link);
        {
            self.mu.lock();
            defer self.mu.unlock();
            self.broken = true;
            self.sock = null;
        }
        posix.shutdown(sock, .both) catch {};
        if (reader) |r| r.join();
    }

    fn readLoop(self: *Session, link: tls.Link) void {
        var buf: [64 * wire.answer_len]u8 = undefined;
        var have: usize = 0;
        while (true) {
            const n = link.read(buf[have..]) catch break;
            have += n;
            var at: usize = 0;
            self.mu.lock();
            while (have - at >= wire.answer_len) : (at += wire.answer_len) {
                self.deliver(wire.decodeAnswer(buf[at..][0..wire.answer_len]));
            }
            self.mu.unlock();
            std.mem.copyForwards(u8, buf[0 .. have - at], buf[at..have]);
            have -= at;
        }
        self.mu.lock();
        self.broken = true;
        self.mu.unlock();
        self.wake.broadcast();
    }

    fn writeLoop(self: *Session, link: tls.Link) void {
        const ping_every = self.ttl_ns / 3;
        const dead_after = self.ttl_ns / 3; // a Ping unanswered this long: the connection is dead
        root.setSendTimeout(link.sock, @max(ping_every, std.time.ns_per_s)) catch {};
        var out: std.ArrayList(u8) = .empty;
        defer out.deinit(self.gpa);
        self.mu.lock();
        defer self.mu.unlock();
        while (true) {
            if (self.end != null or self.broken) return;
            const n = self.now();
            if (self.ping) |p| if (p.sent and n - p.sent_at >= dead_after) return;
            if (self.ping == null and (n - self.last_sent >= ping_every or n - self.confirmed >= ping_every)) {
                self.ping = self.pushLocked(.ping, "", 0, .internal) catch null;
            }
            out.clearRetainingCapacity();
            self.take(&out, n) catch return; // out of memory: drop the connection and resume
            if (out.items.len > 0) {
                self.mu.unlock();
                const ok = if (link.send(out.items, std.math.maxInt(u64))) true else |_| false;
                self.mu.lock();
                if (!ok) return;
                continue;
            }
            const wait: u64 = if (self.ping) |p|
                (if (p.sent) (p.sent_at + dead_after) -| n else ping_every)
            else
                (@min(self.last_sent, self.confirmed) + ping_every) -| n;
            self.wake.timedWait(&self.mu, @max(wait, std.time.ns_per_ms)) catch {};
        }
    }

    /// Moves what may be sent from the queue into `out`, giving ids: at most
    /// 1,023 requests pending (the last slot is kept for Ping).
    fn take(self: *Session, out: *std.ArrayList(u8), n: u64) Error!void {
        var i: usize = 0;
        var sent_any = false;
        var buf: [wire.max_request]u8 = undefined;
        while (i < self.queue.items.len) {
            const c = self.queue.items[i];
            const limit: usize = if (c.action == .ping) max_pending else max_pending - 1;
            if (c.action != .cancel and self.pending.count() >= limit) {
                i += 1;
                continue;
            }
            if (c.action == .cancel) {
                const f = wire.encodeRequest(&buf, .cancel, @intCast(c.token), 0, "") catch unreachable;
                try out.appendSlice(self.gpa, f);
                _ = self.queue.orderedRemove(i);
                self.destroyCall(c);
                sent_any = true;
                continue;
            }
            var id: u32 = undefined;
            if (c.reissue and !self.pending.contains(c.id)) {
                id = c.id; // sent again with its old id, reserved until now
            } else {
                id = self.next_id;
                while (self.pending.contains(id) or self.reserved.contains(id)) id +%= 1;
                self.next_id = id +% 1;
            }
            const f = wire.encodeRequest(&buf, c.action, id, c.token, c.key()) catch unreachable; // checked at submit
            try out.appendSlice(self.gpa, f);
            try self.pending.put(self.gpa, id, c);
            if (c.reissue) {
                _ = self.reserved.remove(c.id);
                c.reissue = false;
                if (c.action == .lock and c.gave_up) {
                    // A reissue whose caller gave up before it went out:
                    // withdrawn at once (a grant it finds is given back).
                    const x = wire.encodeRequest(&buf, .cancel, id, 0, "") catch unreachable;
                    try out.appendSlice(self.gpa, x);
                }
            }
            c.id = id;
            c.sent = true;
            c.sent_at = n;
            if (c.action == .unlock and c.token != 0) self.dropHeld(c.key(), c.token);
            _ = self.queue.orderedRemove(i);
            sent_any = true;
        }
        if (sent_any) self.last_sent = n;
    }
};

fn endAsError(e: End) EndError {
    return switch (e) {
        .lost_resume_refused => error.lost_resume_refused,
        .lost_ttl_passed => error.lost_ttl_passed,
        .closed => error.closed,
    };
}
