//! The Locking-Center wire protocol (SPEC §1): one frame out, one byte back.
//!
//!     request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
//!     answer  : '+' (0x2B) success | '-' (0x2D) failure | '#' (0x23) try-lock not won
//!
//! Sizes are signed bytes on the wire, so a key or a source is at most 127
//! bytes of UTF-8. Nothing here touches a socket, so the shared vectors can
//! check it byte for byte.

const std = @import("std");

/// The longest key or source the protocol carries, in bytes.
pub const max_len = 127;

/// The longest frame: action, two sizes, a full key and a full source.
pub const max_frame = 3 + 2 * max_len;

/// A request type; the value is the byte on the wire.
pub const Action = enum(u8) {
    lock = 1,
    unlock = 2,
    reset_by_key = 3,
    reset_by_source = 4,
    try_lock = 5,

    /// The action for a wire code, or null for an unknown code.
    pub fn fromCode(code: u8) ?Action {
        return std.meta.intToEnum(Action, code) catch null;
    }
};

/// Input refused by the client before anything is sent or opened.
pub const ValidationError = error{
    /// The key is empty (every action but ResetBySource needs one).
    KeyEmpty,
    /// The key is longer than 127 bytes (UTF-8 bytes, not characters).
    KeyTooLong,
    /// The source is longer than 127 bytes.
    SourceTooLong,
};

/// How the server's answer byte maps to a result.
pub const AnswerError = error{
    /// Lock (or Wait) answered '-': the key or the waiter's source was
    /// reset while waiting.
    Reset,
    /// Unlock, a reset or TryLock answered '-'.
    Refused,
    /// A byte the server never sends for this action.
    UnexpectedAnswer,
};

/// Checks `key` and `source` against the limits of `action`.
pub fn validate(action: Action, key: []const u8, source: []const u8) ValidationError!void {
    if (key.len == 0 and action != .reset_by_source) return error.KeyEmpty;
    if (key.len > max_len) return error.KeyTooLong;
    if (source.len > max_len) return error.SourceTooLong;
}

/// Writes the frame for `action` into `buf` and returns the used part.
pub fn encode(buf: *[max_frame]u8, action: Action, key: []const u8, source: []const u8) ValidationError![]const u8 {
    try validate(action, key, source);
    buf[0] = @intFromEnum(action);
    buf[1] = @intCast(key.len);
    @memcpy(buf[2..][0..key.len], key);
    buf[2 + key.len] = @intCast(source.len);
    @memcpy(buf[3 + key.len ..][0..source.len], source);
    return buf[0 .. 3 + key.len + source.len];
}

/// Maps the answer byte of `action`:
///
/// | action | '+' | '-' | '#' |
/// | --- | --- | --- | --- |
/// | lock | true | error.Reset | error.UnexpectedAnswer |
/// | try_lock | true | error.Refused | false |
/// | unlock, reset_by_key, reset_by_source | true | error.Refused | error.UnexpectedAnswer |
pub fn interpret(action: Action, answer: u8) AnswerError!bool {
    return switch (answer) {
        '+' => true,
        '-' => if (action == .lock) error.Reset else error.Refused,
        '#' => if (action == .try_lock) false else error.UnexpectedAnswer,
        else => error.UnexpectedAnswer,
    };
}

test "frame layout" {
    var buf: [max_frame]u8 = undefined;
    try std.testing.expectEqualSlices(u8, &.{ 5, 1, 'k', 1, 's' }, try encode(&buf, .try_lock, "k", "s"));
    try std.testing.expectEqualSlices(u8, &.{ 4, 0, 0 }, try encode(&buf, .reset_by_source, "", ""));
    try std.testing.expectError(error.KeyEmpty, encode(&buf, .unlock, "", ""));
}

test "limits count bytes, not characters" {
    var buf: [max_frame]u8 = undefined;
    const e = "é"; // 2 bytes
    var key: [128]u8 = undefined;
    for (0..64) |i| @memcpy(key[2 * i ..][0..2], e);
    _ = try encode(&buf, .lock, key[0..126], "");
    try std.testing.expectError(error.KeyTooLong, encode(&buf, .lock, &key, ""));
    try std.testing.expectError(error.SourceTooLong, encode(&buf, .lock, "k", &key));
}

test "action codes" {
    for (1..6) |c| try std.testing.expectEqual(@as(u8, @intCast(c)), @intFromEnum(Action.fromCode(@intCast(c)).?));
    try std.testing.expectEqual(@as(?Action, null), Action.fromCode(0));
    try std.testing.expectEqual(@as(?Action, null), Action.fromCode(6));
}
