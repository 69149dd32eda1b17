//! Sessions against the real server ($LC_TEST_ADDRESS, its JSON API on
//! $LC_TEST_WEB_ADDRESS) and servers of the tests' own ($LC_SERVER_BIN)
//! for restarts and expiry. Skipped when what a test needs is unset.
const std = @import("std");
const lc = @import("locking_center");
const common = @import("common.zig");
const build_options = @import("build_options");
const testing = std.testing;
const alloc = testing.allocator;

fn address() ![]u8 {
    return common.env("LC_TEST_ADDRESS") orelse error.SkipZigTest;
}

fn open(addr: []const u8, source: []const u8) !*lc.Session {
    return lc.Session.open(alloc, addr, .{ .ttl_ms = 10_000, .source = source });
}

fn untilQueued(key: []const u8, n: usize) !void {
    if (common.env("LC_TEST_WEB_ADDRESS")) |w| {
        alloc.free(w);
        try testing.expectEqual(@as(?usize, n), common.waitQueueLen(key, n, 5000));
    } else common.sleepMs(300);
}

test "session: tokens strictly increase; tryLock of a held key is busy" {
    const addr = try address();
    defer alloc.free(addr);
    const s = try open(addr, "zig-tokens");
    defer s.deinit();
    try testing.expect(s.sessionId() != 0);
    try testing.expectEqual(@as(u64, 10_000), s.ttlMs());
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "tokens");
    var last: u64 = 0;
    for (0..20) |_| {
        const t = try s.lock(key, .{});
        try testing.expect(t > last);
        last = t;
        try s.unlock(key, t);
    }
    const r = try s.tryLock(key);
    try testing.expect(r == .locked and r.locked > last);
    try testing.expect(try s.tryLock(key) == .busy);
    try s.unlock(key, r.locked);
    try testing.expectError(error.Refused, s.unlock(key, r.locked));
    try s.close();
    try testing.expectError(error.SessionClosed, s.lock(key, .{}));
}

fn worker(s: *lc.Session, key: []const u8, count: *std.atomic.Value(u32), inside: *std.atomic.Value(u32)) void {
    for (0..5) |_| {
        const t = s.lock(key, .{ .timeout_ns = 20 * std.time.ns_per_s }) catch @panic("lock");
        if (inside.fetchAdd(1, .acq_rel) != 0) @panic("two threads inside the lock");
        _ = count.fetchAdd(1, .acq_rel);
        common.sleepMs(1);
        _ = inside.fetchSub(1, .acq_rel);
        s.unlock(key, t) catch @panic("unlock");
    }
}

test "session: many threads share one session" {
    const addr = try address();
    defer alloc.free(addr);
    const s = try open(addr, "zig-many");
    defer s.deinit();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "many");
    var count = std.atomic.Value(u32).init(0);
    var inside = std.atomic.Value(u32).init(0);
    var threads: [8]std.Thread = undefined;
    for (&threads) |*t| t.* = try std.Thread.spawn(.{}, worker, .{ s, key, &count, &inside });
    for (threads) |t| t.join();
    try testing.expectEqual(@as(u32, 40), count.load(.acquire));
    try s.close();
}

const Waiter = struct {
    s: *lc.Session,
    key: []const u8,
    order: *std.ArrayList(u8),
    mu: *std.Thread.Mutex,
    tag: u8,
    fn run(w: Waiter) void {
        const t = w.s.lock(w.key, .{ .timeout_ns = 20 * std.time.ns_per_s }) catch @panic("lock");
        w.mu.lock();
        w.order.append(alloc, w.tag) catch @panic("out of memory");
        w.mu.unlock();
        w.s.unlock(w.key, t) catch @panic("unlock");
    }
};

test "session: FIFO across sessions" {
    const addr = try address();
    defer alloc.free(addr);
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "fifo");
    const holder = try open(addr, "zig-holder");
    defer holder.deinit();
    const t = try holder.lock(key, .{});
    var order: std.ArrayList(u8) = .empty;
    defer order.deinit(alloc);
    var mu: std.Thread.Mutex = .{};
    var sessions: [3]*lc.Session = undefined;
    var threads: [3]std.Thread = undefined;
    for (0..3) |i| {
        sessions[i] = try open(addr, "zig-fifo");
        threads[i] = try std.Thread.spawn(.{}, Waiter.run, .{Waiter{ .s = sessions[i], .key = key, .order = &order, .mu = &mu, .tag = @intCast('a' + i) }});
        try untilQueued(key, i + 1);
    }
    try holder.unlock(key, t);
    for (threads) |th| th.join();
    for (sessions) |x| x.deinit();
    try testing.expectEqualStrings("abc", order.items);
}

test "session: a timeout sends Cancel and withdraws the waiter; so does a CancelToken" {
    const addr = try address();
    defer alloc.free(addr);
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "cancel");
    const a = try open(addr, "zig-a");
    defer a.deinit();
    const b = try open(addr, "zig-b");
    defer b.deinit();
    const t = try a.lock(key, .{});
    try testing.expectError(error.Timeout, b.lock(key, .{ .timeout_ns = 300 * std.time.ns_per_ms }));
    try untilQueued(key, 0);

    var token = try lc.CancelToken.init();
    defer token.deinit();
    const Cancelled = struct {
        fn run(s: *lc.Session, k: []const u8, tok: *lc.CancelToken, out: *?anyerror) void {
            _ = s.lock(k, .{ .cancel = tok }) catch |e| {
                out.* = e;
                return;
            };
            out.* = null;
        }
    };
    var result: ?anyerror = null;
    const th = try std.Thread.spawn(.{}, Cancelled.run, .{ b, key, &token, &result });
    try untilQueued(key, 1);
    token.cancel();
    th.join();
    try testing.expectEqual(@as(?anyerror, error.Cancelled), result);
    try untilQueued(key, 0);
    try a.unlock(key, t);
    // Not granted to a withdrawn waiter: the key is free.
    const r = try a.tryLock(key);
    try testing.expect(r == .locked);
    try testing.expect(b.err() == null);
    try a.close();
    try b.close();
}

test "session: a SIGKILLed holder's keys pass on within TTL + 1 s" {
    const addr = try address();
    defer alloc.free(addr);
    var kbs: [3][64]u8 = undefined;
    var keys: [3][]const u8 = undefined;
    for (&keys, &kbs, 0..) |*k, *b, i| {
        var nb: [16]u8 = undefined;
        k.* = common.uniqueKey(b, try std.fmt.bufPrint(&nb, "killed-{d}", .{i}));
    }
    var child = std.process.Child.init(&.{ build_options.holder_path, addr, keys[0], keys[1], keys[2] }, alloc);
    child.stdout_behavior = .Pipe;
    try child.spawn();
    var line: [16]u8 = undefined;
    var got: usize = 0;
    while (got < 6) {
        const n = try child.stdout.?.read(line[got..]);
        if (n == 0) return error.HolderEndedEarly;
        got += n;
    }
    try testing.expectEqualStrings("READY\n", line[0..6]);
    const s = try open(addr, "zig-next");
    defer s.deinit();
    const Next = struct {
        fn run(sess: *lc.Session, k: []const u8, at: *i128) void {
            const t = sess.lock(k, .{ .timeout_ns = 10 * std.time.ns_per_s }) catch @panic("not granted");
            at.* = std.time.nanoTimestamp();
            sess.unlock(k, t) catch @panic("unlock");
        }
    };
    var granted: [3]i128 = undefined;
    var threads: [3]std.Thread = undefined;
    for (&threads, 0..) |*th, i| th.* = try std.Thread.spawn(.{}, Next.run, .{ s, keys[i], &granted[i] });
    for (keys) |k| try untilQueued(k, 1);
    const killed = std.time.nanoTimestamp();
    try std.posix.kill(child.id, std.posix.SIG.KILL);
    _ = try child.wait();
    for (threads) |th| th.join();
    for (granted) |g| {
        const after_ms = @divTrunc(g - killed, std.time.ns_per_ms);
        std.debug.print("key passed on {d} ms after SIGKILL (TTL 1 s)\n", .{after_ms});
        try testing.expect(after_ms <= 2000);
    }
    try s.close();
}

test "session: resume after a restart with DATA_PATH keeps the hold and its token" {
    var dir = testing.tmpDir(.{});
    defer dir.cleanup();
    const dir_path = try dir.dir.realpathAlloc(alloc, ".");
    defer alloc.free(dir_path);
    const wal = try std.fs.path.join(alloc, &.{ dir_path, "wal.log" });
    defer alloc.free(wal);
    var srv = try common.OwnServer.start(wal);
    defer srv.deinit();
    const s = try lc.Session.open(alloc, srv.addr(), .{ .ttl_ms = 5000, .source = "zig-resume" });
    defer s.deinit();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "resume");
    const t = try s.lock(key, .{});
    srv.stop();
    try srv.restart();
    var kb2: [64]u8 = undefined;
    const other = common.uniqueKey(&kb2, "resume-other");
    const r = s.tryLock(other) catch |e| switch (e) {
        error.Disconnected => try s.tryLock(other), // sent on the dying connection
        else => return e,
    };
    try testing.expect(r == .locked and r.locked > t);
    try testing.expect(s.err() == null);
    try testing.expectEqual(@as(?u64, t), common.keyToken(srv.webAddr(), key));
    try s.unlock(key, t);
    try s.unlock(other, r.locked);
    try s.close();
}

var lost_calls = std.atomic.Value(u32).init(0);
fn onLost(ctx: ?*anyopaque, reason: lc.LostReason) void {
    _ = ctx;
    _ = reason;
    _ = lost_calls.fetchAdd(1, .acq_rel);
}

test "session: lost past its TTL is reported" {
    var srv = try common.OwnServer.start(null);
    defer srv.deinit();
    const s = try lc.Session.open(alloc, srv.addr(), .{ .ttl_ms = 1000, .on_lost = onLost });
    defer s.deinit();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "lost");
    const t = try s.lock(key, .{});
    var timer = try std.time.Timer.start();
    srv.stop();
    const e = s.waitLost(5 * std.time.ns_per_s) orelse return error.NotReported;
    const ms = timer.read() / std.time.ns_per_ms;
    std.debug.print("session lost reported {d} ms after the server stopped (TTL 1 s)\n", .{ms});
    try testing.expectEqual(error.SessionLost, e);
    try testing.expectEqual(@as(?lc.LostReason, .ttl_passed), s.lostReason());
    try testing.expect(ms <= 2500);
    try testing.expectEqual(@as(u32, 1), lost_calls.load(.acquire));
    try testing.expectError(error.SessionLost, s.unlock(key, t));
    try testing.expectError(error.SessionLost, s.lock(key, .{}));
    try testing.expectError(error.SessionLost, s.close());
}

test "session: errdefer release frees the key on an error path" {
    const addr = try address();
    defer alloc.free(addr);
    const s = try open(addr, "zig-errdefer");
    defer s.deinit();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "errdefer");
    const Work = struct {
        fn run(sess: *lc.Session, k: []const u8) !void {
            const token = try sess.lock(k, .{});
            errdefer sess.release(k, token);
            return error.WorkFailed;
        }
    };
    try testing.expectError(error.WorkFailed, Work.run(s, key));
    // The queued Unlock is written before this TryLock.
    const r = try s.tryLock(key);
    try testing.expect(r == .locked);
    try s.unlock(key, r.locked);
    try s.close();
}

test "session: ended from the web API, the resume is refused and the loss reported" {
    const addr = try address();
    defer alloc.free(addr);
    const web = common.env("LC_TEST_WEB_ADDRESS") orelse return error.SkipZigTest;
    defer alloc.free(web);
    const s = try open(addr, "zig-ended");
    defer s.deinit();
    var kb: [64]u8 = undefined;
    _ = try s.lock(common.uniqueKey(&kb, "ended"), .{});
    var path: [64]u8 = undefined;
    var body: [256]u8 = undefined;
    const r = common.http(web, "POST", try std.fmt.bufPrint(&path, "/api/v1/sessions/{x:0>16}/end", .{s.sessionId()}), &body) orelse return error.NoAnswer;
    try testing.expectEqual(@as(u16, 200), r.status);
    try testing.expectEqual(@as(?lc.SessionError, error.SessionLost), s.waitLost(5 * std.time.ns_per_s));
    try testing.expectEqual(@as(?lc.LostReason, .resume_refused), s.lostReason());
}
