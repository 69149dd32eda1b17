//! The Locking-Center wire protocol (docs/protocol.md). Nothing here
//! touches a socket, so the shared vectors can check it byte for byte.
//!
//! v1, one request per connection:
//!
//!     request : [action:1][keySize:1][key:keySize][sourceSize:1][source:sourceSize]
//!     answer  : '+' (0x2B) success | '-' (0x2D) failure | '#' (0x23) try-lock not won
//!
//! A session (first byte 16), many requests answered out of order by id,
//! integers big-endian:
//!
//!     open    : [16][version:1 = 1][ttl_ms:4][resume:8][sourceSize:1][source][authSize:1][auth]
//!     answer  : [status:1][ttl_ms:4][session:8]                    (13 bytes)
//!     request : [action:1][id:4][token:8][keySize:1][key]
//!     answer  : [id:4][status:1][token:8]                          (13 bytes)
//!
//! Sizes are signed bytes on the wire, so a key, a source or an auth token
//! is at most 127 bytes (UTF-8 bytes, not characters).

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

/// The first byte of a session's open frame.
pub const open_action: u8 = 16;
/// The session protocol version spoken here.
pub const session_version: u8 = 1;
/// Every answer in a session, the open's included, is this long.
pub const answer_len = 13;
/// The longest open frame.
pub const max_open = 16 + 2 * max_len;
/// The longest session request.
pub const max_request = 14 + max_len;

/// A request inside a session; the value is the byte on the wire.
pub const SessionAction = enum(u8) {
    lock = 1,
    unlock = 2,
    reset_by_key = 3,
    reset_by_source = 4,
    try_lock = 5,
    cancel = 6,
    ping = 7,
    close = 8,

    /// The action for a wire code, or null for an unknown code.
    pub fn fromCode(code: u8) ?SessionAction {
        return std.meta.intToEnum(SessionAction, code) catch null;
    }

    /// True for the actions whose key field needs 1..127 bytes.
    pub fn needsKey(self: SessionAction) bool {
        return switch (self) {
            .lock, .unlock, .reset_by_key, .try_lock => true,
            else => false,
        };
    }
};

/// Input of a session refused before anything is sent.
pub const SessionValidationError = ValidationError || error{
    /// The auth token is longer than 127 bytes.
    AuthTooLong,
};

/// The open frame of a session: a new one (`resume` 0) or a resume.
pub const Open = struct {
    version: u8 = session_version,
    /// The TTL asked for; 0 asks for the server's SESSION_TTL.
    ttl_ms: u32 = 0,
    /// 0 for a new session, else the id of the session to take back.
    resume_id: u64 = 0,
    source: []const u8 = "",
    auth: []const u8 = "",
};

/// Writes the open frame into `buf` and returns the used part.
pub fn encodeOpen(buf: *[max_open]u8, open: Open) SessionValidationError![]const u8 {
    if (open.source.len > max_len) return error.SourceTooLong;
    if (open.auth.len > max_len) return error.AuthTooLong;
    buf[0] = open_action;
    buf[1] = open.version;
    std.mem.writeInt(u32, buf[2..6], open.ttl_ms, .big);
    std.mem.writeInt(u64, buf[6..14], open.resume_id, .big);
    buf[14] = @intCast(open.source.len);
    @memcpy(buf[15..][0..open.source.len], open.source);
    const a = 15 + open.source.len;
    buf[a] = @intCast(open.auth.len);
    @memcpy(buf[a + 1 ..][0..open.auth.len], open.auth);
    return buf[0 .. a + 1 + open.auth.len];
}

/// The answer to an open.
pub const OpenAnswer = struct { status: u8, ttl_ms: u32, session: u64 };

pub fn decodeOpenAnswer(b: *const [answer_len]u8) OpenAnswer {
    return .{
        .status = b[0],
        .ttl_ms = std.mem.readInt(u32, b[1..5], .big),
        .session = std.mem.readInt(u64, b[5..13], .big),
    };
}

/// Checks a session request's key field (ResetBySource carries a source
/// there: 0..127 bytes; Cancel, Ping and Close send none).
pub fn validateRequest(action: SessionAction, key: []const u8) ValidationError!void {
    if (key.len == 0 and action.needsKey()) return error.KeyEmpty;
    if (key.len > max_len) return if (action == .reset_by_source) error.SourceTooLong else error.KeyTooLong;
}

/// Writes one session request into `buf` and returns the used part.
/// Cancel, Ping and Close are sent with an empty key.
pub fn encodeRequest(buf: *[max_request]u8, action: SessionAction, id: u32, token: u64, key: []const u8) ValidationError![]const u8 {
    try validateRequest(action, key);
    const k = switch (action) {
        .cancel, .ping, .close => "",
        else => key,
    };
    buf[0] = @intFromEnum(action);
    std.mem.writeInt(u32, buf[1..5], id, .big);
    std.mem.writeInt(u64, buf[5..13], token, .big);
    buf[13] = @intCast(k.len);
    @memcpy(buf[14..][0..k.len], k);
    return buf[0 .. 14 + k.len];
}

/// One answer in a session.
pub const SessionAnswer = struct { id: u32, status: u8, token: u64 };

pub fn decodeAnswer(b: *const [answer_len]u8) SessionAnswer {
    return .{
        .id = std.mem.readInt(u32, b[0..4], .big),
        .status = b[4],
        .token = std.mem.readInt(u64, b[5..13], .big),
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
