//! Sessions against a real 3-node cluster, through the fixture
//! clients/run-tests starts: LC_TEST_CLUSTER (the nodes' client ports),
//! LC_TEST_CLUSTER_CONTROL (its HTTP API: /nodes, /kill-leader, /restart,
//! /await-leader) and LC_TEST_LOST_ANSWER_PREFIX. Skipped (loudly) without
//! them; with CI=true they fail instead.
const std = @import("std");
const lc = @import("locking_center");
const common = @import("common.zig");
const testing = std.testing;
const alloc = testing.allocator;

const need = common.need;

/// POST path to the fixture's control API; the parsed JSON answer.
fn control(path: []const u8) !std.json.Parsed(std.json.Value) {
    const ctl = try need("LC_TEST_CLUSTER_CONTROL");
    defer alloc.free(ctl);
    var body: [16 * 1024]u8 = undefined;
    const r = common.http(ctl, "POST", path, &body) orelse return error.FixtureUnreachable;
    if (r.status != 200) return error.FixtureRefused;
    return std.json.parseFromSlice(std.json.Value, alloc, r.body, .{});
}

/// A field ("address" or "web") of the leader, or of a follower that is up (owned).
fn node(leader: bool, field: []const u8) ![]u8 {
    const v = try control("/await-leader");
    defer v.deinit();
    for (v.value.object.get("nodes").?.array.items) |n| {
        const o = n.object;
        if (o.get("leader").?.bool == leader and o.get("up").?.bool) return alloc.dupe(u8, o.get(field).?.string);
    }
    return error.NoSuchNode;
}

/// Waits until key has `want` waiters on the leader (wait queues live there).
fn leaderWaiters(web: []const u8, key: []const u8, want: i64) !void {
    var path_buf: [256]u8 = undefined;
    const path = try std.fmt.bufPrint(&path_buf, "/api/v1/keys/{s}", .{key});
    var body: [16 * 1024]u8 = undefined;
    for (0..500) |_| {
        if (common.http(web, "GET", path, &body)) |r| if (r.status == 200) {
            const v = try std.json.parseFromSlice(std.json.Value, alloc, r.body, .{});
            defer v.deinit();
            if (v.value.object.get("waiters").?.integer == want) return;
        };
        common.sleepMs(20);
    }
    return error.NeverQueued;
}

fn openCluster(addr: []const u8) !*lc.Session {
    return lc.Session.open(alloc, addr, .{ .ttl_ms = 10_000, .source = "zig-cluster", .connect_timeout_ns = 3 * std.time.ns_per_s });
}

const Waiter = struct {
    s: *lc.Session,
    key: []const u8,
    token: std.atomic.Value(u64) = .init(0),
    done: std.atomic.Value(bool) = .init(false),
    failed: std.atomic.Value(bool) = .init(false),

    fn run(w: *Waiter) void {
        if (w.s.lock(w.key, .{ .timeout_ns = 60 * std.time.ns_per_s })) |t| w.token.store(t, .release) else |_| w.failed.store(true, .release);
        w.done.store(true, .release);
    }
};

const holds = 10;

test "cluster: a session holding 10 keys and waiting on 10 more rides through a kill -9 of the leader" {
    const nodes = try need("LC_TEST_CLUSTER");
    defer alloc.free(nodes);
    (try control("/await-leader")).deinit();
    const a = try openCluster(nodes);
    defer a.deinit();
    const b = try openCluster(nodes);
    defer b.deinit();
    var held_buf: [holds][64]u8 = undefined;
    var wait_buf: [holds][64]u8 = undefined;
    var held: [holds][]const u8 = undefined;
    var tokens: [holds]u64 = undefined;
    var btokens: [holds]u64 = undefined;
    var waiters: [holds]Waiter = undefined;
    var threads: [holds]std.Thread = undefined;
    for (0..holds) |i| {
        var nb: [32]u8 = undefined;
        held[i] = common.uniqueKey(&held_buf[i], try std.fmt.bufPrint(&nb, "cl-held-{d}", .{i}));
        tokens[i] = try a.lock(held[i], .{ .timeout_ns = 10 * std.time.ns_per_s });
        const wk = common.uniqueKey(&wait_buf[i], try std.fmt.bufPrint(&nb, "cl-wait-{d}", .{i}));
        btokens[i] = try b.lock(wk, .{ .timeout_ns = 10 * std.time.ns_per_s });
        waiters[i] = .{ .s = a, .key = wk };
    }
    for (0..holds) |i| threads[i] = try std.Thread.spawn(.{}, Waiter.run, .{&waiters[i]});
    defer for (threads) |t| t.join();
    const web = try node(true, "web");
    defer alloc.free(web);
    for (0..holds) |i| try leaderWaiters(web, waiters[i].key, 1);

    var timer = try std.time.Timer.start();
    const killed = try control("/kill-leader");
    defer killed.deinit();
    var pb: [64]u8 = undefined;
    const probe = common.uniqueKey(&pb, "cl-probe");
    const r = try a.tryLock(probe);
    const ms = timer.read() / std.time.ns_per_ms;
    try testing.expect(r == .locked);
    try a.unlock(probe, r.locked);
    std.debug.print("failover: killed {s}; the session answered again {d} ms after the kill -9\n", .{ killed.value.object.get("killed").?.string, ms });

    try testing.expect(a.err() == null and b.err() == null);
    for (0..holds) |i| {
        try testing.expect(try a.tryLock(waiters[i].key) == .busy); // still b's: nothing granted twice
        try testing.expect(try a.tryLock(held[i]) == .busy);
        try testing.expect(!waiters[i].done.load(.acquire));
    }
    for (0..holds) |i| try b.unlock(waiters[i].key, btokens[i]);
    for (0..holds) |i| {
        while (!waiters[i].done.load(.acquire)) common.sleepMs(5);
        try testing.expect(!waiters[i].failed.load(.acquire));
        const t = waiters[i].token.load(.acquire);
        try testing.expect(t > btokens[i]);
        try a.unlock(waiters[i].key, t);
        try a.unlock(held[i], tokens[i]); // the grant made before the kill, same token
    }
    try a.close();
    try b.close();
    (try control("/restart")).deinit();
}

test "cluster: a Lock whose answer was lost gets its grant through the reissue" {
    const nodes = try need("LC_TEST_CLUSTER");
    defer alloc.free(nodes);
    const prefix = try need("LC_TEST_LOST_ANSWER_PREFIX");
    defer alloc.free(prefix);
    (try control("/await-leader")).deinit();
    const s = try openCluster(nodes);
    defer s.deinit();
    var kb: [64]u8 = undefined;
    var key_buf: [128]u8 = undefined;
    const key = try std.fmt.bufPrint(&key_buf, "{s}zig-{s}", .{ prefix, common.uniqueKey(&kb, "lost") });
    var timer = try std.time.Timer.start();
    const token = try s.lock(key, .{ .timeout_ns = 30 * std.time.ns_per_s }); // waiting behind itself would time out
    std.debug.print("lost answer: the reissued Lock got its grant (token {d}) {d} ms after it was sent\n", .{ token, timer.read() / std.time.ns_per_ms });
    try testing.expect(try s.tryLock(key) == .busy);
    try s.unlock(key, token);
    try s.close();
    (try control("/restart")).deinit();
}

test "cluster: a follower's address alone works, and behind a dead one" {
    const nodes = try need("LC_TEST_CLUSTER");
    defer alloc.free(nodes);
    const follower = try node(false, "address");
    defer alloc.free(follower);
    var list_buf: [128]u8 = undefined;
    const list = try std.fmt.bufPrint(&list_buf, "127.0.0.1:1, {s}", .{follower});
    for ([_][]const u8{ follower, list }) |addr| {
        const s = try openCluster(addr);
        defer s.deinit();
        var kb: [64]u8 = undefined;
        const key = common.uniqueKey(&kb, "cl-follower");
        const t = try s.lock(key, .{ .timeout_ns = 10 * std.time.ns_per_s });
        try testing.expect(try s.tryLock(key) == .busy);
        try s.unlock(key, t);
        try s.close();
    }
}
