//! Conformance against the real server at $LC_TEST_ADDRESS (the withdrawal
//! checks also read $LC_TEST_WEB_ADDRESS's JSON API). Each test is skipped
//! when LC_TEST_ADDRESS is unset.
const std = @import("std");
const lc = @import("locking_center");
const common = @import("common.zig");
const testing = std.testing;

fn server() !std.net.Address {
    const text = common.env("LC_TEST_ADDRESS") orelse return error.SkipZigTest;
    defer testing.allocator.free(text);
    return lc.parseAddress(text);
}

fn client(addr: std.net.Address, source: []const u8) lc.Client {
    return lc.Client.init(addr, .{ .source = source, .connect_timeout_ns = 2 * std.time.ns_per_s });
}

const twenty_s = 20 * std.time.ns_per_s;

/// Waits until `key` has `n` waiters: exact with the JSON API, otherwise a
/// pause long enough for a loopback connection to queue.
fn untilQueued(key: []const u8, n: usize) void {
    if (common.waitQueueLen(key, n, 5000) == null) common.sleepMs(300);
}

/// With the JSON API: the queue of `key` becomes empty. Then, whatever the
/// API: releasing the holder leaves the key free, so the withdrawn waiter
/// was not handed the lock.
fn expectWithdrawn(holder: lc.Client, key: []const u8) !void {
    if (common.env("LC_TEST_WEB_ADDRESS")) |w| {
        testing.allocator.free(w);
        const got = common.waitQueueLen(key, 0, 5000);
        if (got != 0) {
            std.debug.print("{s}: queue still {?d} (null: JSON API unavailable)\n", .{ key, got });
            return error.WaiterNotWithdrawn;
        }
    }
    try holder.unlock(key);
    try testing.expect(try holder.tryLock(key));
    try holder.unlock(key);
}

test "conformance: lock then unlock" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "lock-unlock");
    const c = client(addr, "zig-a");
    try c.lock(key);
    try c.unlock(key);
    try testing.expectError(error.Refused, c.unlock(key));
}

test "conformance: tryLock on a held key is false" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "trylock");
    const a = client(addr, "zig-a");
    const b = client(addr, "zig-b");
    try testing.expect(try a.tryLock(key));
    try testing.expect(!try b.tryLock(key));
    try testing.expectError(error.NotWon, b.tryLockOrError(key));
    try a.unlock(key);
    try b.tryLockOrError(key);
    try b.unlock(key);
}

const Order = struct {
    mutex: std.Thread.Mutex = .{},
    names: [3][]const u8 = undefined,
    len: usize = 0,
    failed: bool = false,
};

fn queuedLocker(c: lc.Client, key: []const u8, name: []const u8, order: *Order) void {
    c.lockWith(key, .{ .timeout_ns = twenty_s }) catch {
        order.mutex.lock();
        order.failed = true;
        order.mutex.unlock();
        return;
    };
    order.mutex.lock();
    order.names[order.len] = name;
    order.len += 1;
    order.mutex.unlock();
    common.sleepMs(20);
    c.unlock(key) catch {
        order.mutex.lock();
        order.failed = true;
        order.mutex.unlock();
    };
}

test "conformance: waiters are served in FIFO order" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "fifo");
    const holder = client(addr, "zig-holder");
    try holder.lock(key);

    var order: Order = .{};
    const names = [_][]const u8{ "first", "second", "third" };
    var threads: [3]std.Thread = undefined;
    for (names, 0..) |name, i| {
        threads[i] = try std.Thread.spawn(.{}, queuedLocker, .{ client(addr, name), key, name, &order });
        untilQueued(key, i + 1);
    }
    try holder.unlock(key);
    for (threads) |t| t.join();
    try testing.expect(!order.failed);
    try testing.expectEqual(@as(usize, 3), order.len);
    for (names, 0..) |name, i| try testing.expectEqualStrings(name, order.names[i]);
}

fn waitIn(c: lc.Client, key: []const u8, result: *?lc.Error) void {
    c.waitWith(key, .{ .timeout_ns = twenty_s }) catch |err| {
        result.* = err;
    };
}

test "conformance: wait returns when the holder releases" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "wait");
    const a = client(addr, "zig-a");
    try a.lock(key);
    var result: ?lc.Error = null;
    const t = try std.Thread.spawn(.{}, waitIn, .{ client(addr, "zig-b"), key, &result });
    untilQueued(key, 1);
    try a.unlock(key);
    t.join();
    try testing.expectEqual(@as(?lc.Error, null), result);
    // Wait released the key again.
    try testing.expect(try a.tryLock(key));
    try a.unlock(key);
}

test "conformance: a timeout withdraws the waiter" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "timeout");
    const a = client(addr, "zig-a");
    try a.lock(key);
    const b = client(addr, "zig-b");
    try testing.expectError(error.Timeout, b.lockWith(key, .{ .timeout_ns = 300 * std.time.ns_per_ms }));
    try expectWithdrawn(a, key);
}

fn lockIn(c: lc.Client, key: []const u8, options: lc.WaitOptions, result: *?lc.Error) void {
    c.lockWith(key, options) catch |err| {
        result.* = err;
    };
}

test "conformance: cancellation withdraws the waiter" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "cancel");
    const a = client(addr, "zig-a");
    try a.lock(key);
    var token = try lc.CancelToken.init();
    defer token.deinit();
    var result: ?lc.Error = null;
    const t = try std.Thread.spawn(.{}, lockIn, .{ client(addr, "zig-b"), key, lc.WaitOptions{ .cancel = &token }, &result });
    untilQueued(key, 1);
    token.cancel();
    t.join();
    try testing.expectEqual(@as(?lc.Error, error.Cancelled), result);
    try expectWithdrawn(a, key);
}

test "conformance: reset by key while waiting is the Reset error" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "reset-key");
    const a = client(addr, "zig-a");
    try a.lock(key);
    var result: ?lc.Error = null;
    const t = try std.Thread.spawn(.{}, lockIn, .{ client(addr, "zig-b"), key, lc.WaitOptions{ .timeout_ns = twenty_s }, &result });
    untilQueued(key, 1);
    try a.resetByKey(key);
    t.join();
    try testing.expectEqual(@as(?lc.Error, error.Reset), result);
    // The holder was dropped too; the reset is idempotent.
    try testing.expectError(error.Refused, a.unlock(key));
    try a.resetByKey(key);
}

test "conformance: reset by source fails its waiters and frees its keys" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    var hb: [64]u8 = undefined;
    var sb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "reset-src");
    const held = common.uniqueKey(&hb, "reset-src-held");
    const source = common.uniqueKey(&sb, "src");
    const a = client(addr, "zig-a");
    const s = client(addr, source);
    try a.lock(key);
    try s.lock(held);
    var result: ?lc.Error = null;
    const t = try std.Thread.spawn(.{}, lockIn, .{ s, key, lc.WaitOptions{ .timeout_ns = twenty_s }, &result });
    untilQueued(key, 1);
    try a.resetBySource(source);
    t.join();
    try testing.expectEqual(@as(?lc.Error, error.Reset), result);
    try testing.expect(try a.tryLock(held));
    try a.unlock(held);
    try a.unlock(key);
}

/// The README's v1 idiom: errdefer logs a failed release on error paths,
/// the happy path's `try unlock` reports it.
fn scopedIdiom(c: lc.Client, key: []const u8, fail: bool) !void {
    try c.lock(key);
    errdefer c.unlock(key) catch |err| std.log.warn("unlock {s}: {s}", .{ key, @errorName(err) });
    try testing.expect(!try c.tryLock(key));
    if (fail) return error.WorkFailed;
    try c.unlock(key);
}

test "conformance: the scoped idiom releases the key on both paths" {
    const addr = try server();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "scoped");
    const c = client(addr, "zig-a");
    try scopedIdiom(c, key, false);
    try testing.expectError(error.WorkFailed, scopedIdiom(c, key, true));
    try testing.expect(try c.tryLock(key));
    try c.unlock(key);
}

test "conformance: an over-long key is refused before connecting" {
    // No server needed: an address nothing listens on is never tried, so
    // the error is the validation error, not Unreachable.
    const nowhere = try lc.parseAddress("127.0.0.1:1");
    const c = lc.Client.init(nowhere, .{});
    const long = "k" ** 128;
    try testing.expectError(error.KeyTooLong, c.lock(long));
    const s = lc.Client.init(nowhere, .{ .source = "s" ** 128 });
    try testing.expectError(error.SourceTooLong, s.tryLock("k"));
    // A valid request to the same address is Unreachable.
    try testing.expectError(error.Unreachable, c.unlock("k"));
}
