//! The shared wire vectors ($LC_VECTORS, else the repository's
//! wire/testdata/vectors.json), byte for byte.
const std = @import("std");
const lc = @import("locking_center");
const common = @import("common.zig");
const build_options = @import("build_options");
const wire = lc.wire;
const testing = std.testing;

const Frame = struct { name: []const u8, action: u8, key: []const u8, source: []const u8, hex: []const u8 };
const Invalid = struct { name: []const u8, action: u8, key: []const u8, source: []const u8, reason: []const u8 };
const AnswerVector = struct { name: []const u8, hex: []const u8, char: []const u8 };
const Vectors = struct {
    actions: struct { lock: u8, unlock: u8, reset_by_key: u8, reset_by_source: u8, trylock: u8 },
    frames: []Frame,
    invalid: []Invalid,
    answers: []AnswerVector,
};

fn load() !std.json.Parsed(Vectors) {
    const alloc = testing.allocator;
    const from_env = common.env("LC_VECTORS");
    defer if (from_env) |p| alloc.free(p);
    const path = from_env orelse build_options.default_vectors;
    const text = try std.fs.cwd().readFileAlloc(alloc, path, 1 << 20);
    defer alloc.free(text);
    return std.json.parseFromSlice(Vectors, alloc, text, .{
        .ignore_unknown_fields = true,
        .allocate = .alloc_always,
    });
}

fn unhex(buf: []u8, hex: []const u8) ![]u8 {
    return std.fmt.hexToBytes(buf, hex);
}

fn action(code: u8) !lc.Action {
    return lc.Action.fromCode(code) orelse error.UnknownAction;
}

test "vectors: action codes match" {
    const v = try load();
    defer v.deinit();
    const a = v.value.actions;
    try testing.expectEqual(a.lock, @intFromEnum(lc.Action.lock));
    try testing.expectEqual(a.unlock, @intFromEnum(lc.Action.unlock));
    try testing.expectEqual(a.reset_by_key, @intFromEnum(lc.Action.reset_by_key));
    try testing.expectEqual(a.reset_by_source, @intFromEnum(lc.Action.reset_by_source));
    try testing.expectEqual(a.trylock, @intFromEnum(lc.Action.try_lock));
}

test "vectors: every frame encodes byte for byte" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.frames.len > 0);
    for (v.value.frames) |f| {
        var frame_buf: [wire.max_frame]u8 = undefined;
        var want_buf: [wire.max_frame]u8 = undefined;
        const got = wire.encode(&frame_buf, try action(f.action), f.key, f.source) catch |err| {
            std.debug.print("frame {s}: {s}\n", .{ f.name, @errorName(err) });
            return err;
        };
        const want = try unhex(&want_buf, f.hex);
        testing.expectEqualSlices(u8, want, got) catch |err| {
            std.debug.print("frame {s} differs\n", .{f.name});
            return err;
        };
    }
}

test "vectors: every invalid entry is refused by the encoder" {
    const v = try load();
    defer v.deinit();
    try testing.expect(v.value.invalid.len > 0);
    for (v.value.invalid) |f| {
        var buf: [wire.max_frame]u8 = undefined;
        const want: anyerror = if (std.mem.eql(u8, f.reason, "empty key"))
            error.KeyEmpty
        else if (std.mem.startsWith(u8, f.reason, "key"))
            error.KeyTooLong
        else
            error.SourceTooLong;
        testing.expectError(want, wire.encode(&buf, try action(f.action), f.key, f.source)) catch |err| {
            std.debug.print("invalid {s} not refused as {s}\n", .{ f.name, @errorName(want) });
            return err;
        };
    }
}

test "vectors: every invalid entry is refused before connecting" {
    // Port 1 on loopback: nothing listens there, so a connection attempt
    // would give Unreachable. A validation error proves nothing was opened.
    const v = try load();
    defer v.deinit();
    for (v.value.invalid) |f| {
        const c = lc.Client.init(try lc.parseAddress("127.0.0.1:1"), .{ .source = f.source });
        const result: lc.Error!void = switch (try action(f.action)) {
            .lock => c.lock(f.key),
            .unlock => c.unlock(f.key),
            .reset_by_key => c.resetByKey(f.key),
            .reset_by_source => c.resetBySource(f.source),
            .try_lock => c.tryLockOrError(f.key),
        };
        if (result) |_| {
            std.debug.print("invalid {s} was accepted\n", .{f.name});
            return error.TestUnexpectedResult;
        } else |err| {
            if (!lc.isRefused(err) or err == error.Refused) {
                std.debug.print("invalid {s}: got {s}\n", .{ f.name, @errorName(err) });
                return error.TestUnexpectedResult;
            }
        }
    }
}

test "vectors: answers map to outcomes" {
    const v = try load();
    defer v.deinit();
    try testing.expectEqual(@as(usize, 3), v.value.answers.len);
    const all = [_]lc.Action{ .lock, .unlock, .reset_by_key, .reset_by_source, .try_lock };
    for (v.value.answers) |a| {
        var b: [1]u8 = undefined;
        const byte = (try unhex(&b, a.hex))[0];
        try testing.expectEqualSlices(u8, a.char, &.{byte});
        switch (byte) {
            '+' => for (all) |act| try testing.expect(try wire.interpret(act, byte)),
            '-' => for (all) |act| try testing.expectError(
                if (act == .lock) error.Reset else error.Refused,
                wire.interpret(act, byte),
            ),
            '#' => for (all) |act| {
                if (act == .try_lock) {
                    try testing.expect(!try wire.interpret(act, byte));
                } else {
                    try testing.expectError(error.UnexpectedAnswer, wire.interpret(act, byte));
                }
            },
            else => return error.UnknownAnswer,
        }
    }
    try testing.expectError(error.UnexpectedAnswer, wire.interpret(.lock, '?'));
}
