//! Helpers shared by the integration tests.
const std = @import("std");
const posix = std.posix;
const lc = @import("locking_center");

/// The value of an environment variable, or null when unset or empty.
/// Caller frees.
pub fn env(name: []const u8) ?[]u8 {
    const v = std.process.getEnvVarOwned(std.testing.allocator, name) catch return null;
    if (v.len == 0) {
        std.testing.allocator.free(v);
        return null;
    }
    return v;
}

/// A key no other run or test uses: zig-<name>-<random hex>. Keys are
/// [a-z0-9-] only, so they go into a URL path unescaped.
pub fn uniqueKey(buf: []u8, name: []const u8) []const u8 {
    return std.fmt.bufPrint(buf, "zig-{s}-{x}", .{ name, std.crypto.random.int(u64) }) catch unreachable;
}

pub fn sleepMs(ms: u64) void {
    std.Thread.sleep(ms * std.time.ns_per_ms);
}

/// The wait-queue length of `key`, which the caller knows is held, from
/// GET /api/v1/keys/{key} on $LC_TEST_WEB_ADDRESS. null when the web
/// address is unset or the API does not answer as the contract says (a 404
/// for a held key means the route is missing).
pub fn queueLen(key: []const u8) ?usize {
    const alloc = std.testing.allocator;
    const web = env("LC_TEST_WEB_ADDRESS") orelse return null;
    defer alloc.free(web);
    const addr = lc.parseAddress(web) catch return null;
    const stream = std.net.tcpConnectToAddress(addr) catch return null;
    defer stream.close();

    var req_buf: [512]u8 = undefined;
    const req = std.fmt.bufPrint(&req_buf, "GET /api/v1/keys/{s} HTTP/1.0\r\nHost: {s}\r\nConnection: close\r\n\r\n", .{ key, web }) catch return null;
    _ = posix.write(stream.handle, req) catch return null;

    var resp_buf: [64 * 1024]u8 = undefined;
    var len: usize = 0;
    while (len < resp_buf.len) {
        const n = posix.read(stream.handle, resp_buf[len..]) catch return null;
        if (n == 0) break;
        len += n;
    }
    const resp = resp_buf[0..len];
    if (!std.mem.startsWith(u8, resp, "HTTP/1.") or resp.len < 12) return null;
    if (!std.mem.eql(u8, resp[9..12], "200")) return null;
    const body_at = std.mem.indexOf(u8, resp, "\r\n\r\n") orelse return null;
    const body = resp[body_at + 4 ..];

    const parsed = std.json.parseFromSlice(std.json.Value, alloc, body, .{}) catch return null;
    defer parsed.deinit();
    if (parsed.value != .object) return null;
    const queue = parsed.value.object.get("queue") orelse return null;
    if (queue != .array) return null;
    return queue.array.items.len;
}

/// Polls `queueLen` until it equals `want` or `deadline_ms` passes; returns
/// the last value seen.
pub fn waitQueueLen(key: []const u8, want: usize, deadline_ms: u64) ?usize {
    var timer = std.time.Timer.start() catch unreachable;
    while (true) {
        const got = queueLen(key);
        if (got == want or timer.read() >= deadline_ms * std.time.ns_per_ms) return got;
        sleepMs(20);
    }
}
