//! The session keys of the shared vectors, byte for byte, and the
//! original server's frames sent to the real server.
const std = @import("std");
const lc = @import("locking_center");
const common = @import("common.zig");
const build_options = @import("build_options");
const wire = lc.wire;
const testing = std.testing;

const Open = struct { name: []const u8, version: u8, ttl_ms: u32, @"resume": []const u8, source: []const u8, auth: []const u8, hex: []const u8 = "", reason: []const u8 = "" };
const OpenAnswer = struct { name: []const u8, hex: []const u8, status: []const u8, ttl_ms: u32, session: []const u8 };
const Request = struct { name: []const u8, action: u8, id: u32, token: []const u8, key: []const u8, hex: []const u8 = "", reason: []const u8 = "" };
const Answer = struct { name: []const u8, hex: []const u8, id: u32, status: []const u8, token: []const u8 };
const Original = struct { name: []const u8, action: u8, key: []const u8, source: []const u8, hex: []const u8 };
const Vectors = struct {
    session_actions: struct { open: u8, lock: u8, unlock: u8, reset_by_key: u8, reset_by_source: u8, trylock: u8, cancel: u8, ping: u8, close: u8 },
    session_open: []Open,
    session_open_answers: []OpenAnswer,
    session_requests: []Request,
    session_answers: []Answer,
    session_invalid: []Request,
    session_open_invalid: []Open,
    original_frames: []Original,
};

fn load() !std.json.Parsed(Vectors) {
    const alloc = testing.allocator;
    const from_env = common.env("LC_VECTORS");
    defer if (from_env) |p| alloc.free(p);
    const path = from_env orelse build_options.default_vectors;
    const text = try std.fs.cwd().readFileAlloc(alloc, path, 1 << 20);
    defer alloc.free(text);
    return std.json.parseFromSlice(Vectors, alloc, text, .{ .ignore_unknown_fields = true, .allocate = .alloc_always });
}

/// A 64-bit value: the vectors write them as decimal strings.
fn big(s: []const u8) !u64 {
    return std.fmt.parseInt(u64, s, 10);
}

fn act(code: u8) !wire.SessionAction {
    return wire.SessionAction.fromCode(code) orelse error.UnknownAction;
}

fn check(name: []const u8, ok: bool) !void {
    if (!ok) {
        std.debug.print("vector {s} differs\n", .{name});
        return error.TestUnexpectedResult;
    }
}

test "session vectors: action codes" {
    const v = try load();
    defer v.deinit();
    const a = v.value.session_actions;
    try testing.expectEqual(a.open, wire.open_action);
    inline for (.{ .{ a.lock, .lock }, .{ a.unlock, .unlock }, .{ a.reset_by_key, .reset_by_key }, .{ a.reset_by_source, .reset_by_source }, .{ a.trylock, .try_lock }, .{ a.cancel, .cancel }, .{ a.ping, .ping }, .{ a.close, .close } }) |pair| {
        try testing.expectEqual(pair[0], @intFromEnum(@as(wire.SessionAction, pair[1])));
    }
}

test "session vectors: every open encodes byte for byte" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.session_open.len > 0);
    for (v.value.session_open) |f| {
        var buf: [wire.max_open]u8 = undefined;
        var want: [wire.max_open]u8 = undefined;
        const got = try wire.encodeOpen(&buf, .{ .version = f.version, .ttl_ms = f.ttl_ms, .resume_id = try big(f.@"resume"), .source = f.source, .auth = f.auth });
        try check(f.name, std.mem.eql(u8, try std.fmt.hexToBytes(&want, f.hex), got));
    }
}

test "session vectors: every open answer decodes" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.session_open_answers.len > 0);
    for (v.value.session_open_answers) |f| {
        var b: [wire.answer_len]u8 = undefined;
        _ = try std.fmt.hexToBytes(&b, f.hex);
        const a = wire.decodeOpenAnswer(&b);
        try check(f.name, a.status == f.status[0] and a.ttl_ms == f.ttl_ms and a.session == try big(f.session));
    }
}

test "session vectors: every request encodes byte for byte" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.session_requests.len > 0);
    for (v.value.session_requests) |f| {
        var buf: [wire.max_request]u8 = undefined;
        var want: [wire.max_request]u8 = undefined;
        const got = try wire.encodeRequest(&buf, try act(f.action), f.id, try big(f.token), f.key);
        try check(f.name, std.mem.eql(u8, try std.fmt.hexToBytes(&want, f.hex), got));
    }
}

test "session vectors: every answer decodes" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.session_answers.len > 0);
    for (v.value.session_answers) |f| {
        var b: [wire.answer_len]u8 = undefined;
        _ = try std.fmt.hexToBytes(&b, f.hex);
        const a = wire.decodeAnswer(&b);
        try check(f.name, a.id == f.id and a.status == f.status[0] and a.token == try big(f.token));
    }
}

test "session vectors: every invalid request is refused" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.session_invalid.len > 0);
    for (v.value.session_invalid) |f| {
        var buf: [wire.max_request]u8 = undefined;
        if (wire.encodeRequest(&buf, try act(f.action), f.id, try big(f.token), f.key)) |_| {
            try check(f.name, false);
        } else |_| {}
    }
}

test "session vectors: every invalid open is refused before connecting" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.session_open_invalid.len > 0);
    for (v.value.session_open_invalid) |f| {
        var buf: [wire.max_open]u8 = undefined;
        if (wire.encodeOpen(&buf, .{ .version = f.version, .ttl_ms = f.ttl_ms, .resume_id = try big(f.@"resume"), .source = f.source, .auth = f.auth })) |_| {
            try check(f.name, false);
        } else |_| {}
        // Port 1: a connection attempt would be Unreachable.
        const r = lc.Session.open(testing.allocator, "127.0.0.1:1", .{ .source = f.source, .auth = f.auth, .ttl_ms = f.ttl_ms });
        if (r) |s| {
            s.deinit();
            try check(f.name, false);
        } else |e| try check(f.name, e == error.SourceTooLong or e == error.AuthTooLong);
    }
}

test "session vectors: the original server's frames are answered" {
    const addr_text = common.env("LC_TEST_ADDRESS") orelse return error.SkipZigTest;
    defer testing.allocator.free(addr_text);
    const addr = try lc.parseAddress(addr_text);
    const v = try load();
    defer v.deinit();
    for (v.value.original_frames) |f| {
        const key = if (f.key.len > 0) f.key else "zig-original-frames";
        const holder = lc.Client.init(addr, .{ .source = f.source });
        try lc.Client.init(addr, .{}).resetByKey(key);
        try holder.lock(key);
        var buf: [300]u8 = undefined;
        const frame = try std.fmt.hexToBytes(&buf, f.hex);
        const stream = try std.net.tcpConnectToAddress(addr);
        defer stream.close();
        _ = try std.posix.write(stream.handle, frame);
        var b: [1]u8 = undefined;
        const n = try std.posix.read(stream.handle, &b);
        try check(f.name, n == 1 and b[0] == '+');
        // The key is free again.
        try check(f.name, try lc.Client.init(addr, .{}).tryLock(key));
        try lc.Client.init(addr, .{}).unlock(key);
    }
}
