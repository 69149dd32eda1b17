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

/// The fixture's variable (owned), or a skip, or under CI=true a failure.
pub fn need(name: []const u8) ![]u8 {
    if (env(name)) |v| return v;
    const ci = env("CI");
    defer if (ci) |c| std.testing.allocator.free(c);
    if (ci != null and std.mem.eql(u8, ci.?, "true")) {
        std.debug.print("{s} is not set under CI=true (clients/run-tests starts the fixture)\n", .{name});
        return error.FixtureMissing;
    }
    std.debug.print("SKIPPED: {s} is not set (clients/run-tests starts the fixture)\n", .{name});
    return error.SkipZigTest;
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

/// One HTTP/1.0 request to `web`; the status, or null when the web port
/// does not answer. The body is copied into `body_out` (truncated).
pub fn http(web: []const u8, method: []const u8, path: []const u8, body_out: []u8) ?struct { status: u16, body: []u8 } {
    const addr = lc.parseAddress(web) catch return null;
    const stream = std.net.tcpConnectToAddress(addr) catch return null;
    defer stream.close();
    var req_buf: [512]u8 = undefined;
    const req = std.fmt.bufPrint(&req_buf, "{s} {s} HTTP/1.0\r\nHost: {s}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", .{ method, path, web }) catch return null;
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
    const status = std.fmt.parseInt(u16, resp[9..12], 10) catch return null;
    const at = std.mem.indexOf(u8, resp, "\r\n\r\n") orelse return null;
    const body = resp[at + 4 ..];
    const n = @min(body.len, body_out.len);
    @memcpy(body_out[0..n], body[0..n]);
    return .{ .status = status, .body = body_out[0..n] };
}

/// The "token" of held `key` on `web` (GET /api/v1/keys/{key}), or null.
pub fn keyToken(web: []const u8, key: []const u8) ?u64 {
    var path_buf: [256]u8 = undefined;
    const path = std.fmt.bufPrint(&path_buf, "/api/v1/keys/{s}", .{key}) catch return null;
    var body_buf: [16 * 1024]u8 = undefined;
    const r = http(web, "GET", path, &body_buf) orelse return null;
    if (r.status != 200) return null;
    const parsed = std.json.parseFromSlice(std.json.Value, std.testing.allocator, r.body, .{}) catch return null;
    defer parsed.deinit();
    const t = parsed.value.object.get("token") orelse return null;
    return if (t == .integer) @intCast(t.integer) else null;
}

/// A TLS handshake with the lock port at `address` succeeds (server name "localhost").
fn tlsAnswers(address: []const u8, cfg: *const lc.TlsConfig) bool {
    const sock = lc.connectHost(std.testing.allocator, address, std.time.ns_per_s) catch return false;
    defer posix.close(sock);
    var conn: lc.tls.Conn = undefined;
    conn.handshake(sock, cfg, "localhost", std.time.ns_per_s) catch return false;
    return true;
}

fn freePort() !u16 {
    const any = try std.net.Address.parseIp("127.0.0.1", 0);
    var server = try any.listen(.{});
    defer server.deinit();
    return server.listen_address.getPort();
}

/// A server of the test's own, from $LC_SERVER_BIN, on free loopback
/// ports; stopped by PID with SIGTERM.
pub const OwnServer = struct {
    bin: []u8,
    address: [32]u8 = undefined,
    address_len: usize = 0,
    web: [32]u8 = undefined,
    web_len: usize = 0,
    data_path: ?[]const u8,
    /// With TLS (TLS_CERT/TLS_KEY from this folder's server.pem and
    /// server-key.pem): readiness is a TLS handshake with its ca.pem.
    tls_dir: ?[]const u8 = null,
    child: ?std.process.Child = null,

    /// error.SkipZigTest when $LC_SERVER_BIN is unset.
    pub fn start(data_path: ?[]const u8) !OwnServer {
        return startTls(data_path, null);
    }

    /// `start`, speaking TLS with the certificates in `tls_dir` (which must
    /// outlive the server) when it is not null.
    pub fn startTls(data_path: ?[]const u8, tls_dir: ?[]const u8) !OwnServer {
        const bin = env("LC_SERVER_BIN") orelse return error.SkipZigTest;
        var s = OwnServer{ .bin = bin, .data_path = data_path, .tls_dir = tls_dir };
        errdefer std.testing.allocator.free(bin);
        s.address_len = (try std.fmt.bufPrint(&s.address, "127.0.0.1:{d}", .{try freePort()})).len;
        s.web_len = (try std.fmt.bufPrint(&s.web, "127.0.0.1:{d}", .{try freePort()})).len;
        errdefer s.stop(); // a server that started but never became ready
        try s.restart();
        return s;
    }

    pub fn addr(self: *const OwnServer) []const u8 {
        return self.address[0..self.address_len];
    }

    pub fn webAddr(self: *const OwnServer) []const u8 {
        return self.web[0..self.web_len];
    }

    /// Starts it (again, same ports and settings); waits for /readyz 200
    /// (with TLS: for a TLS handshake on the lock port).
    pub fn restart(self: *OwnServer) !void {
        const alloc = std.testing.allocator;
        var env_map = try std.process.getEnvMap(alloc);
        defer env_map.deinit();
        try env_map.put("BIND_ADDRESS", self.addr());
        try env_map.put("WEB_ADDRESS", self.webAddr());
        if (self.data_path) |p| try env_map.put("DATA_PATH", p);
        var cfg: ?lc.TlsConfig = null;
        defer if (cfg) |*c| c.deinit();
        if (self.tls_dir) |d| {
            const cert = try std.fs.path.join(alloc, &.{ d, "server.pem" });
            defer alloc.free(cert);
            const key = try std.fs.path.join(alloc, &.{ d, "server-key.pem" });
            defer alloc.free(key);
            const ca = try std.fs.path.join(alloc, &.{ d, "ca.pem" });
            defer alloc.free(ca);
            try env_map.put("TLS_CERT", cert);
            try env_map.put("TLS_KEY", key);
            cfg = try lc.TlsConfig.init(alloc, .{ .ca_file = ca });
        }
        var child = std.process.Child.init(&.{self.bin}, alloc);
        child.env_map = &env_map;
        child.stdout_behavior = .Ignore;
        child.stderr_behavior = .Ignore;
        try child.spawn();
        self.child = child;
        var timer = try std.time.Timer.start();
        var body: [64]u8 = undefined;
        while (timer.read() < 10 * std.time.ns_per_s) {
            if (cfg) |*c| {
                if (tlsAnswers(self.addr(), c)) return;
            } else if (http(self.webAddr(), "GET", "/readyz", &body)) |r| if (r.status == 200) return;
            sleepMs(20);
        }
        return error.ServerNotReady;
    }

    /// SIGTERM by PID, then waits for the exit.
    pub fn stop(self: *OwnServer) void {
        if (self.child) |*c| {
            posix.kill(c.id, posix.SIG.TERM) catch {};
            _ = c.wait() catch {};
            self.child = null;
        }
    }

    pub fn deinit(self: *OwnServer) void {
        self.stop();
        std.testing.allocator.free(self.bin);
    }
};
