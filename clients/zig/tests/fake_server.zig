//! Client behaviour against a scripted stand-in server on loopback: what
//! goes on the wire, hang-ups on timeout and cancellation, and how odd
//! answers are reported. Runs without the real server.
const std = @import("std");
const posix = std.posix;
const lc = @import("locking_center");
const testing = std.testing;

const Script = enum {
    /// Answer `byte` at once.
    answer,
    /// Close without answering.
    close,
    /// Wait for the client's EOF (hang-up), record it, close.
    expect_hang_up,
    /// Wait for the client's EOF, then answer `byte` anyway.
    answer_after_hang_up,
};

/// A stand-in that serves `count` connections the same way.
const Stand = struct {
    server: std.net.Server,
    thread: std.Thread = undefined,
    script: Script,
    byte: u8 = '+',
    count: usize = 1,
    frames: [4][lc.wire.max_frame]u8 = undefined,
    frame_lens: [4]usize = .{ 0, 0, 0, 0 },
    hung_up: bool = false,

    fn start(self: *Stand) !void {
        self.thread = try std.Thread.spawn(.{}, run, .{self});
    }

    fn address(self: *const Stand) std.net.Address {
        return self.server.listen_address;
    }

    fn frame(self: *const Stand, i: usize) []const u8 {
        return self.frames[i][0..self.frame_lens[i]];
    }

    /// Waits for the stand-in to finish and closes it.
    fn finish(self: *Stand) void {
        self.thread.join();
        self.server.deinit();
    }

    fn run(self: *Stand) void {
        for (0..self.count) |i| {
            const conn = self.server.accept() catch return;
            defer conn.stream.close();
            const fd = conn.stream.handle;
            self.frame_lens[i] = readFrame(fd, &self.frames[i]) catch return;
            switch (self.script) {
                .answer => _ = posix.write(fd, &.{self.byte}) catch {},
                .close => {},
                .expect_hang_up => self.hung_up = seesEof(fd),
                .answer_after_hang_up => {
                    self.hung_up = seesEof(fd);
                    _ = posix.write(fd, &.{self.byte}) catch {};
                },
            }
        }
    }
};

fn listen(script: Script, byte: u8, count: usize) !Stand {
    const addr = try std.net.Address.parseIp("127.0.0.1", 0);
    return .{ .server = try addr.listen(.{}), .script = script, .byte = byte, .count = count };
}

fn readExact(fd: posix.fd_t, buf: []u8) !void {
    var got: usize = 0;
    while (got < buf.len) {
        const n = try posix.read(fd, buf[got..]);
        if (n == 0) return error.EndOfStream;
        got += n;
    }
}

fn readFrame(fd: posix.fd_t, out: *[lc.wire.max_frame]u8) !usize {
    try readExact(fd, out[0..2]);
    const k = out[1];
    try readExact(fd, out[2..][0 .. k + 1]);
    const s = out[2 + k];
    try readExact(fd, out[3 + k ..][0..s]);
    return 3 + @as(usize, k) + s;
}

/// True when the client hangs up (EOF) within 5 s.
fn seesEof(fd: posix.fd_t) bool {
    var fds = [1]posix.pollfd{.{ .fd = fd, .events = posix.POLL.IN, .revents = 0 }};
    const ready = posix.poll(&fds, 5000) catch return false;
    if (ready == 0) return false;
    var b: [1]u8 = undefined;
    const n = posix.read(fd, &b) catch return false;
    return n == 0;
}

test "stand-in: sends the frame and maps '+'" {
    var s = try listen(.answer, '+', 1);
    try s.start();
    const c = lc.Client.init(s.address(), .{ .source = "svc-a" });
    const result = c.lock("abc");
    s.finish();
    try result;
    try testing.expectEqualSlices(u8, "\x01\x03abc\x05svc-a", s.frame(0));
}

test "stand-in: lock answered '-' is Reset, unlock answered '-' is Refused" {
    var s = try listen(.answer, '-', 2);
    try s.start();
    defer s.finish();
    const c = lc.Client.init(s.address(), .{});
    try testing.expectError(error.Reset, c.lock("k"));
    try testing.expectError(error.Refused, c.unlock("k"));
}

test "stand-in: '#' is false for tryLock, NotWon for tryLockOrError" {
    var s = try listen(.answer, '#', 2);
    try s.start();
    defer s.finish();
    const c = lc.Client.init(s.address(), .{});
    try testing.expect(!try c.tryLock("k"));
    try testing.expectError(error.NotWon, c.tryLockOrError("k"));
}

test "stand-in: resets send the right frames" {
    var s = try listen(.answer, '+', 2);
    try s.start();
    const c = lc.Client.init(s.address(), .{ .source = "me" });
    try c.resetBySource("svc-b");
    try c.resetByKey("k");
    s.finish();
    try testing.expectEqualSlices(u8, "\x04\x00\x05svc-b", s.frame(0));
    try testing.expectEqualSlices(u8, "\x03\x01k\x00", s.frame(1));
}

test "stand-in: closed without an answer is Unreachable" {
    var s = try listen(.close, 0, 1);
    try s.start();
    defer s.finish();
    try testing.expectError(error.Unreachable, lc.Client.init(s.address(), .{}).unlock("k"));
}

test "stand-in: refused connection is Unreachable" {
    var s = try listen(.close, 0, 0);
    const addr = s.address();
    s.server.deinit();
    try testing.expectError(error.Unreachable, lc.Client.init(addr, .{}).lock("k"));
}

test "stand-in: unexpected answer byte" {
    var s = try listen(.answer, '?', 1);
    try s.start();
    defer s.finish();
    try testing.expectError(error.UnexpectedAnswer, lc.Client.init(s.address(), .{}).unlock("k"));
}

test "stand-in: request timeout gives Unreachable" {
    var s = try listen(.expect_hang_up, 0, 1);
    try s.start();
    defer s.finish();
    const c = lc.Client.init(s.address(), .{ .request_timeout_ns = 100 * std.time.ns_per_ms });
    try testing.expectError(error.Unreachable, c.unlock("k"));
}

test "stand-in: timeout hangs up so the server withdraws" {
    var s = try listen(.expect_hang_up, 0, 1);
    try s.start();
    var timer = try std.time.Timer.start();
    const c = lc.Client.init(s.address(), .{});
    try testing.expectError(error.Timeout, c.lockWith("k", .{ .timeout_ns = 200 * std.time.ns_per_ms }));
    try testing.expect(timer.read() >= 200 * std.time.ns_per_ms);
    s.finish();
    try testing.expect(s.hung_up);
}

fn cancelLater(token: *lc.CancelToken) void {
    std.Thread.sleep(150 * std.time.ns_per_ms);
    token.cancel();
}

test "stand-in: cancel from another thread hangs up" {
    var s = try listen(.expect_hang_up, 0, 1);
    try s.start();
    var token = try lc.CancelToken.init();
    defer token.deinit();
    const t = try std.Thread.spawn(.{}, cancelLater, .{&token});
    const c = lc.Client.init(s.address(), .{});
    try testing.expectError(error.Cancelled, c.lockWith("k", .{ .cancel = &token }));
    t.join();
    s.finish();
    try testing.expect(s.hung_up);
    // A cancelled token stays cancelled: nothing is opened.
    const nowhere = lc.Client.init(try lc.parseAddress("127.0.0.1:1"), .{});
    try testing.expectError(error.Cancelled, nowhere.lockWith("k", .{ .cancel = &token }));
}

test "stand-in: a grant crossing the timeout is kept" {
    var s = try listen(.answer_after_hang_up, '+', 1);
    try s.start();
    const c = lc.Client.init(s.address(), .{});
    const result = c.lockWith("k", .{ .timeout_ns = 100 * std.time.ns_per_ms });
    s.finish();
    try result;
    try testing.expect(s.hung_up); // the '+' came after the hang-up
}

test "stand-in: a tryLock grant crossing the request timeout is kept" {
    // A tryLock has no wait options, only the request timeout. The stand-in
    // answers '+' only after the client's hang-up (say, a slow fsync): the
    // key is this client's and must not be lost.
    var s = try listen(.answer_after_hang_up, '+', 1);
    try s.start();
    const c = lc.Client.init(s.address(), .{ .request_timeout_ns = 200 * std.time.ns_per_ms });
    const result = c.tryLock("k");
    s.finish();
    try testing.expect(try result);
    try testing.expect(s.hung_up); // the '+' came after the hang-up
}

test "stand-in: a tryLock refusal crossing the request timeout stays Unreachable" {
    // Only a crossing '+' changes the outcome.
    var s = try listen(.answer_after_hang_up, '-', 1);
    try s.start();
    const c = lc.Client.init(s.address(), .{ .request_timeout_ns = 200 * std.time.ns_per_ms });
    const result = c.tryLock("k");
    s.finish();
    try testing.expectError(error.Unreachable, result);
    try testing.expect(s.hung_up);
}
