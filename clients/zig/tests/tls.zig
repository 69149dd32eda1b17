//! TLS against the fixture's TLS servers (clients/run-tests):
//! LC_TEST_TLS_ADDRESS (server-authenticated TLS), LC_TEST_MTLS_ADDRESS (a
//! server with TLS_CLIENT_CA) and LC_TEST_TLS_DIR (ca.pem, other-ca.pem,
//! ...). The server certificate is ECDSA P-256 for DNS "localhost" and IP
//! 127.0.0.1; the fixture listens on 127.0.0.1. Zig's TLS checks DNS names
//! only, so these tests dial 127.0.0.1 with the server name "localhost", or
//! dial "localhost" itself. Skipped (loudly) without the fixture; with
//! CI=true they fail instead.
const std = @import("std");
const lc = @import("locking_center");
const common = @import("common.zig");
const testing = std.testing;
const alloc = testing.allocator;

/// The fixture's TLS folder's `file` (owned).
fn tlsFile(file: []const u8) ![]u8 {
    const dir = try common.need("LC_TEST_TLS_DIR");
    defer alloc.free(dir);
    return std.fs.path.join(alloc, &.{ dir, file });
}

fn config(ca: []const u8, server_name: ?[]const u8) !lc.TlsConfig {
    const path = try tlsFile(ca);
    defer alloc.free(path);
    return lc.TlsConfig.init(alloc, .{ .ca_file = path, .server_name = server_name });
}

/// "localhost:PORT" for a "127.0.0.1:PORT" address.
fn byName(buf: []u8, address: []const u8) ![]const u8 {
    const colon = std.mem.lastIndexOfScalar(u8, address, ':') orelse return error.BadAddress;
    return std.fmt.bufPrint(buf, "localhost{s}", .{address[colon..]});
}

/// The handshake alone, with the precise error Zig's TLS gives.
fn handshake(address: []const u8, cfg: *const lc.TlsConfig, name: []const u8) lc.tls.HandshakeError!void {
    const sock = lc.connectHost(alloc, address, 5 * std.time.ns_per_s) catch return error.Unreachable;
    defer std.posix.close(sock);
    var conn: lc.tls.Conn = undefined;
    try conn.handshake(sock, cfg, name, 5 * std.time.ns_per_s);
}

fn openTls(address: []const u8, cfg: *const lc.TlsConfig) lc.SessionError!*lc.Session {
    return lc.Session.open(alloc, address, .{ .ttl_ms = 10_000, .source = "zig-tls", .tls = cfg, .connect_timeout_ns = 5 * std.time.ns_per_s });
}

test "tls: a session locks over TLS with the test CA; the name checked is the one given or the host dialled" {
    const address = try common.need("LC_TEST_TLS_ADDRESS");
    defer alloc.free(address);
    var named = try config("ca.pem", "localhost");
    defer named.deinit();
    var by_host = try config("ca.pem", null);
    defer by_host.deinit();

    // ECDSA P-256 chain, name "localhost" given, dialling 127.0.0.1.
    try handshake(address, &named, "localhost");
    const a = try openTls(address, &named);
    defer a.deinit();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "tls");
    const token = try a.lock(key, .{ .timeout_ns = 10 * std.time.ns_per_s });
    try testing.expect(token > 0);

    // A second session dials "localhost:PORT": the host is the name checked.
    var nb: [64]u8 = undefined;
    const b = try openTls(try byName(&nb, address), &by_host);
    defer b.deinit();
    try testing.expect(try b.tryLock(key) == .busy);
    try a.unlock(key, token);
    const r = try b.tryLock(key);
    try testing.expect(r == .locked and r.locked > token);
    try b.unlock(key, r.locked);
    try a.close();
    try b.close();
}

test "tls: the v1 client over TLS: lock, tryLock, unlock; a timed-out Lock is withdrawn" {
    const address = try common.need("LC_TEST_TLS_ADDRESS");
    defer alloc.free(address);
    var named = try config("ca.pem", "localhost");
    defer named.deinit();
    const client = lc.Client.init(try lc.parseAddress(address), .{ .source = "zig-tls-v1", .tls = &named });
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "tls-v1");
    try testing.expect(try client.tryLock(key));
    try testing.expect(!try client.tryLock(key));
    try client.unlock(key);
    try testing.expectError(error.Refused, client.unlock(key));
    try client.lock(key);
    try client.unlock(key);

    // A Lock that times out hangs up (close_notify, then the socket's write
    // side): the server withdraws the waiter, so the key is not handed to it.
    const s = try openTls(address, &named);
    defer s.deinit();
    const t = try s.lock(key, .{});
    try testing.expectError(error.Timeout, client.lockWith(key, .{ .timeout_ns = 300 * std.time.ns_per_ms }));
    try s.unlock(key, t);
    const r = try s.tryLock(key);
    try testing.expect(r == .locked);
    try s.unlock(key, r.locked);
    try s.close();
}

const Worker = struct {
    s: *lc.Session,
    index: usize,
    failed: std.atomic.Value(bool) = .init(false),

    fn run(w: *Worker) void {
        w.work() catch w.failed.store(true, .release);
    }

    fn work(w: *Worker) !void {
        var kb: [64]u8 = undefined;
        var nb: [16]u8 = undefined;
        const key = common.uniqueKey(&kb, try std.fmt.bufPrint(&nb, "tls-t{d}", .{w.index}));
        var last: u64 = 0;
        for (0..25) |_| {
            const t = try w.s.lock(key, .{ .timeout_ns = 10 * std.time.ns_per_s });
            if (t <= last) return error.TokenNotIncreasing;
            last = t;
            if (try w.s.tryLock(key) != .busy) return error.NotBusy;
            try w.s.unlock(key, t);
        }
    }
};

test "tls: 8 threads share one TLS session (reader and writer threads on one TLS stream)" {
    const address = try common.need("LC_TEST_TLS_ADDRESS");
    defer alloc.free(address);
    var named = try config("ca.pem", "localhost");
    defer named.deinit();
    const s = try openTls(address, &named);
    defer s.deinit();
    var workers: [8]Worker = undefined;
    var threads: [8]std.Thread = undefined;
    for (0..8) |i| workers[i] = .{ .s = s, .index = i };
    for (0..8) |i| threads[i] = try std.Thread.spawn(.{}, Worker.run, .{&workers[i]});
    for (threads) |t| t.join();
    for (&workers) |*w| try testing.expect(!w.failed.load(.acquire));
    try testing.expect(s.err() == null);
    try s.close();
}

test "tls: the wrong server name is refused" {
    const address = try common.need("LC_TEST_TLS_ADDRESS");
    defer alloc.free(address);
    var wrong = try config("ca.pem", "wrong.invalid");
    defer wrong.deinit();
    try testing.expectError(error.CertificateHostMismatch, handshake(address, &wrong, "wrong.invalid"));
    try testing.expectError(error.TlsHandshakeFailed, openTls(address, &wrong));
    const client = lc.Client.init(try lc.parseAddress(address), .{ .tls = &wrong });
    var kb: [64]u8 = undefined;
    try testing.expectError(error.TlsHandshakeFailed, client.tryLock(common.uniqueKey(&kb, "tls-wrong")));
}

test "tls: a server whose certificate another CA signed is refused" {
    const address = try common.need("LC_TEST_TLS_ADDRESS");
    defer alloc.free(address);
    var other = try config("other-ca.pem", "localhost");
    defer other.deinit();
    // No certificate of the chain leads to a CA of the bundle.
    try testing.expectError(error.TlsCertificateNotVerified, handshake(address, &other, "localhost"));
    try testing.expectError(error.TlsHandshakeFailed, openTls(address, &other));
    const client = lc.Client.init(try lc.parseAddress(address), .{ .tls = &other });
    var kb: [64]u8 = undefined;
    try testing.expectError(error.TlsHandshakeFailed, client.tryLock(common.uniqueKey(&kb, "tls-other")));
}

test "tls: a server that wants a client certificate (TLS_CLIENT_CA) fails the handshake: Zig's TLS cannot send one" {
    const address = try common.need("LC_TEST_MTLS_ADDRESS");
    defer alloc.free(address);
    var named = try config("ca.pem", "localhost");
    defer named.deinit();
    // std.crypto.tls.Client has no client certificate to offer and does
    // not accept the server's CertificateRequest at all: the handshake
    // stops there, before anything is sent inside TLS.
    try testing.expectError(error.TlsUnexpectedMessage, handshake(address, &named, "localhost"));
    try testing.expectError(error.TlsHandshakeFailed, openTls(address, &named));
    const client = lc.Client.init(try lc.parseAddress(address), .{ .tls = &named });
    var kb: [64]u8 = undefined;
    try testing.expectError(error.TlsHandshakeFailed, client.tryLock(common.uniqueKey(&kb, "tls-mtls")));
}

test "tls: an IP address without a server name is refused before connecting" {
    const address = try common.need("LC_TEST_TLS_ADDRESS");
    defer alloc.free(address);
    var by_host = try config("ca.pem", null);
    defer by_host.deinit();
    try testing.expectError(error.ServerNameRequired, openTls(address, &by_host));
    const client = lc.Client.init(try lc.parseAddress(address), .{ .tls = &by_host });
    var kb: [64]u8 = undefined;
    try testing.expectError(error.ServerNameRequired, client.tryLock(common.uniqueKey(&kb, "tls-ip")));
}

test "tls: the system's roots load, or none is reported" {
    if (lc.TlsConfig.init(alloc, .{})) |cfg| {
        var c = cfg;
        c.deinit();
    } else |e| try testing.expectEqual(error.NoCertificates, e);
}

test "tls: a TLS session resumes after a restart with DATA_PATH, its hold and token kept" {
    const tls_dir = try common.need("LC_TEST_TLS_DIR");
    defer alloc.free(tls_dir);
    var dir = testing.tmpDir(.{});
    defer dir.cleanup();
    const dir_path = try dir.dir.realpathAlloc(alloc, ".");
    defer alloc.free(dir_path);
    const wal = try std.fs.path.join(alloc, &.{ dir_path, "wal.log" });
    defer alloc.free(wal);
    var srv = try common.OwnServer.startTls(wal, tls_dir);
    defer srv.deinit();
    var named = try config("ca.pem", "localhost");
    defer named.deinit();
    const s = try lc.Session.open(alloc, srv.addr(), .{ .ttl_ms = 5000, .source = "zig-tls-resume", .tls = &named });
    defer s.deinit();
    var kb: [64]u8 = undefined;
    const key = common.uniqueKey(&kb, "tls-resume");
    const t = try s.lock(key, .{});
    srv.stop();
    try srv.restart();
    var kb2: [64]u8 = undefined;
    const other = common.uniqueKey(&kb2, "tls-resume-other");
    const r = s.tryLock(other) catch |e| switch (e) {
        error.Disconnected => try s.tryLock(other), // sent on the dying connection
        else => return e,
    };
    try testing.expect(r == .locked and r.locked > t);
    try testing.expect(s.err() == null);
    try testing.expect(try s.tryLock(key) == .busy); // still held, by this session
    try s.unlock(key, t); // '+' only for the grant with token t: the token was kept
    try s.unlock(other, r.locked);
    try s.close();
}
