//! TLS for the lock protocol (docs/protocol.md, "TLS") on Zig's standard
//! `std.crypto.tls.Client`: the client opens TLS on the TCP connection and
//! speaks v1 or a session inside it, byte for byte as in plain TCP.
//!
//! Guarantees:
//! - The server's chain is checked against the CA bundle of the `Config`
//!   (a PEM file, or the system's roots), and its certificate against the
//!   server name: the host dialled, or `Config.server_name`.
//! - Zig's TLS checks DNS names in a certificate, never IP addresses: a
//!   connection to an IP address needs `server_name` (error.ServerNameRequired
//!   otherwise, before anything is sent), never a connection without a check.
//! - Every read and write is bounded: the handshake within the caller's
//!   timeout, a send within its timeout; reads after the handshake never
//!   wait inside the TLS layer (the caller polls the socket).
//!
//! What Zig 0.15's standard TLS does not offer (README, "TLS"): client
//! certificates (a server's CertificateRequest fails the handshake, so a
//! server with TLS_CLIENT_CA cannot be used), session resumption (tickets
//! are ignored), IP addresses in certificates, and a reply to a KeyUpdate
//! that requests one (it changes its write keys without telling the peer).

const std = @import("std");
const posix = std.posix;
const Io = std.Io;
const Certificate = std.crypto.Certificate;
const TlsClient = std.crypto.tls.Client;
const root = @import("root.zig");

const log = std.log.scoped(.locking_center);

/// What a TLS connection trusts and checks. Made once, shared (read-only)
/// by every connection of the sessions and clients it is given to, from
/// any thread; it must outlive them.
pub const Config = struct {
    gpa: std.mem.Allocator,
    /// The certificates a server's chain must lead to.
    bundle: Certificate.Bundle,
    /// The name checked in every server's certificate instead of the host
    /// dialled; owned.
    server_name: ?[]u8,

    pub const Options = struct {
        /// A PEM file of the CA certificates to trust (relative to the
        /// working directory, or absolute); null: the system's roots.
        ca_file: ?[]const u8 = null,
        /// The name to check in the server's certificate; null: the host
        /// dialled (a DNS name: Zig's TLS does not check IP addresses).
        server_name: ?[]const u8 = null,
    };

    /// Reads the CA certificates (the file, or the system's). An empty
    /// bundle is error.NoCertificates: it could trust no server.
    pub fn init(gpa: std.mem.Allocator, options: Options) !Config {
        if (options.server_name) |n| if (n.len == 0 or n.len > max_name_len) return error.InvalidServerName;
        var bundle: Certificate.Bundle = .{};
        errdefer bundle.deinit(gpa);
        if (options.ca_file) |path| {
            try bundle.addCertsFromFilePath(gpa, std.fs.cwd(), path);
        } else {
            try bundle.rescan(gpa);
        }
        if (bundle.map.count() == 0) return error.NoCertificates;
        const name: ?[]u8 = if (options.server_name) |n| try gpa.dupe(u8, n) else null;
        return .{ .gpa = gpa, .bundle = bundle, .server_name = name };
    }

    pub fn deinit(self: *Config) void {
        self.bundle.deinit(self.gpa);
        if (self.server_name) |n| self.gpa.free(n);
        self.* = undefined;
    }

    /// The name to check for a connection to `host`: `server_name`, else
    /// `host` itself unless it is an IP address (never checked by Zig's TLS).
    pub fn serverNameFor(self: *const Config, host: []const u8) error{ServerNameRequired}![]const u8 {
        if (self.server_name) |n| return n;
        if (host.len == 0 or host.len > max_name_len) return error.ServerNameRequired;
        if (std.net.Address.parseIp(host, 0)) |_| return error.ServerNameRequired else |_| {}
        return host;
    }
};

/// The longest DNS name.
const max_name_len = 253;

/// Everything `std.crypto.tls.Client.init` can fail with (its set is not
/// public), plus a socket that failed or a handshake past its time.
pub const HandshakeError = error{Unreachable} ||
    @typeInfo(@typeInfo(@TypeOf(TlsClient.init)).@"fn".return_type.?).error_union.error_set;

/// Plaintext written per record: its ciphertext always fits `out_buf` with
/// room for the next record, so encrypting never sends (see `write`).
const max_chunk = 8 * 1024;

/// One TLS connection over a connected TCP socket. It does not own the
/// socket. Not movable once `handshake` has run (the TLS client points into
/// it): allocate it, or keep it in place on the stack.
///
/// Threads: one thread may read while another writes (a session's reader
/// and supervisor). `std.crypto.tls.Client` keeps both directions in one
/// struct, and its reader changes the write keys and the write sequence
/// number when the server sends a KeyUpdate, so `mu` serialises every use of
/// it. Neither side holds `mu` while it waits on the socket: a read takes
/// only what the socket has now (the caller polls between reads), and a
/// write encrypts under `mu` and sends after it. So a writer blocked by a
/// full socket never stops the reader, which is what keeps the server's
/// answers, and so its reading of our requests, flowing.
pub const Conn = struct {
    sock: posix.socket_t,
    /// Guards `client` (both directions), `input`, `plain_buf`,
    /// `would_block` and `failure`.
    mu: std.Thread.Mutex = .{},
    client: TlsClient = undefined,
    /// The ciphertext from the server (its buffer is `in_buf`).
    input: Io.Reader,
    /// The ciphertext to the server (its buffer is `out_buf`). Used only by
    /// the one thread that writes (the TLS reader never writes): filled
    /// under `mu`, sent after it.
    output: Io.Writer,
    /// Set while the handshake runs: its time and its start. Reads then
    /// wait (polling) until the deadline; afterwards they never wait.
    handshake_limit_ns: ?u64 = null,
    timer: std.time.Timer = undefined,
    /// The time each send may wait for room in the socket.
    send_timeout_ns: u64 = 0,
    /// The last read found the socket empty (not an error).
    would_block: bool = false,
    /// What failed below TLS (the socket, the time), when a read or write
    /// through it failed.
    failure: ?anyerror = null,
    /// The alert the server sent, when the handshake ended with TlsAlert.
    alert: std.crypto.tls.Alert = undefined,
    in_buf: [TlsClient.min_buffer_len]u8 = undefined,
    plain_buf: [TlsClient.min_buffer_len]u8 = undefined,
    out_buf: [2 * TlsClient.min_buffer_len]u8 = undefined,
    /// The plaintext writer is unbuffered: every write is encrypted at once.
    write_buf: [0]u8 = .{},

    const input_vtable: Io.Reader.VTable = .{ .stream = inStream, .readVec = inReadVec };
    const output_vtable: Io.Writer.VTable = .{ .drain = outDrain };

    /// Runs the TLS handshake on `sock` (connected; blocking or not) within
    /// `timeout_ns`, checking the chain against `config` and the
    /// certificate against `server_name`. The precise error on failure;
    /// error.Unreachable when the socket failed, the time passed, or the
    /// server hung up during it.
    pub fn handshake(self: *Conn, sock: posix.socket_t, config: *const Config, server_name: []const u8, timeout_ns: u64) HandshakeError!void {
        self.* = .{
            .sock = sock,
            .input = .{ .vtable = &input_vtable, .buffer = &.{}, .seek = 0, .end = 0 },
            .output = .{ .vtable = &output_vtable, .buffer = &.{} },
        };
        self.input.buffer = &self.in_buf;
        self.output.buffer = &self.out_buf;
        self.timer = std.time.Timer.start() catch return error.Unreachable;
        self.handshake_limit_ns = timeout_ns;
        defer self.handshake_limit_ns = null;
        self.client = TlsClient.init(&self.input, &self.output, .{
            .host = .{ .explicit = server_name },
            .ca = .{ .bundle = config.bundle },
            .read_buffer = &self.plain_buf,
            .write_buffer = &self.write_buf,
            .alert = &self.alert,
            // Every answer of the protocol has a fixed size, so a stream cut
            // short is seen as such above TLS; and the server does not wait
            // to send close_notify when it closes (docs/protocol.md, "TLS").
            .allow_truncation_attacks = true,
        }) catch |e| switch (e) {
            error.ReadFailed, error.WriteFailed, error.TlsConnectionTruncated => return error.Unreachable,
            else => |other| return other,
        };
    }

    /// `handshake`, with its failure told apart for a caller: the socket
    /// or the time (error.Unreachable), or TLS itself (logged with the
    /// reason, error.TlsHandshakeFailed).
    pub fn connect(self: *Conn, sock: posix.socket_t, config: *const Config, server_name: []const u8, timeout_ns: u64) error{ Unreachable, TlsHandshakeFailed }!void {
        self.handshake(sock, config, server_name, timeout_ns) catch |e| switch (e) {
            error.Unreachable => return error.Unreachable,
            error.TlsAlert => {
                log.warn("TLS handshake (server name {s}): the server sent the alert {s}", .{ server_name, @tagName(self.alert.description) });
                return error.TlsHandshakeFailed;
            },
            error.TlsUnexpectedMessage => {
                log.warn("TLS handshake (server name {s}) failed: TlsUnexpectedMessage (a server that asks for a client certificate gets this: Zig's TLS cannot send one)", .{server_name});
                return error.TlsHandshakeFailed;
            },
            else => {
                log.warn("TLS handshake (server name {s}) failed: {s}", .{ server_name, @errorName(e) });
                return error.TlsHandshakeFailed;
            },
        };
    }

    /// Plaintext that has arrived, without waiting: the count copied into
    /// `buf` (at least 1), or 0 when the socket has no more for now (poll
    /// it for input, then call again). error.EndOfStream when the server
    /// ended the stream; error.ReadFailed when the socket or TLS failed.
    pub fn readNow(self: *Conn, buf: []u8) error{ EndOfStream, ReadFailed }!usize {
        std.debug.assert(buf.len > 0);
        self.mu.lock();
        defer self.mu.unlock();
        const r = &self.client.reader;
        while (true) {
            const have = r.buffered();
            if (have.len > 0) {
                const n = @min(have.len, buf.len);
                @memcpy(buf[0..n], have[0..n]);
                r.toss(n);
                return n;
            }
            self.would_block = false;
            // One record at most: the input reader takes what the socket
            // has and reports "would block" as ReadFailed, before TLS has
            // consumed anything of an incomplete record.
            r.fillMore() catch |e| switch (e) {
                error.EndOfStream => return error.EndOfStream,
                error.ReadFailed => {
                    if (self.would_block) return 0;
                    return error.ReadFailed;
                },
            };
        }
    }

    /// Encrypts `data` and sends it within `timeout_ns` for each wait for
    /// room in the socket. One thread writes at a time.
    pub fn write(self: *Conn, data: []const u8, timeout_ns: u64) error{WriteFailed}!void {
        var rest = data;
        while (rest.len > 0) {
            const chunk = rest[0..@min(rest.len, max_chunk)];
            {
                self.mu.lock();
                defer self.mu.unlock();
                self.send_timeout_ns = timeout_ns;
                self.client.writer.writeAll(chunk) catch return error.WriteFailed;
                self.client.writer.flush() catch return error.WriteFailed;
            }
            try self.sendOutput(timeout_ns);
            rest = rest[chunk.len..];
        }
    }

    /// Sends close_notify: the end of the stream the client writes (v1's
    /// hang-up).
    pub fn closeNotify(self: *Conn, timeout_ns: u64) error{WriteFailed}!void {
        {
            self.mu.lock();
            defer self.mu.unlock();
            self.send_timeout_ns = timeout_ns;
            self.client.end() catch return error.WriteFailed;
        }
        try self.sendOutput(timeout_ns);
    }

    /// Sends the ciphertext `write` left in `output`, without `mu`: only
    /// the writing thread touches `output`.
    fn sendOutput(self: *Conn, timeout_ns: u64) error{WriteFailed}!void {
        defer self.output.end = 0;
        root.sendAllTimeout(self.sock, self.output.buffered(), timeout_ns) catch return error.WriteFailed;
    }

    fn inStream(r: *Io.Reader, w: *Io.Writer, limit: Io.Limit) Io.Reader.StreamError!usize {
        _ = w;
        _ = limit;
        return inFill(r);
    }

    fn inReadVec(r: *Io.Reader, data: [][]u8) Io.Reader.Error!usize {
        _ = data;
        return inFill(r);
    }

    /// One read of what the socket has, into the input's own buffer. During
    /// the handshake it waits (poll) until its deadline; afterwards an empty
    /// socket sets `would_block` and fails the read, which TLS passes on
    /// before it consumes anything.
    fn inFill(r: *Io.Reader) Io.Reader.Error!usize {
        const self: *Conn = @alignCast(@fieldParentPtr("input", r));
        if (r.end == r.buffer.len and r.seek > 0) {
            const live = r.buffer[r.seek..r.end];
            @memmove(r.buffer[0..live.len], live);
            r.end = live.len;
            r.seek = 0;
        }
        if (r.end == r.buffer.len) return 0;
        while (true) {
            const n = posix.recv(self.sock, r.buffer[r.end..], posix.MSG.DONTWAIT) catch |e| switch (e) {
                error.WouldBlock => {
                    const limit = self.handshake_limit_ns orelse {
                        self.would_block = true;
                        return error.ReadFailed;
                    };
                    const spent = self.timer.read();
                    if (spent >= limit) {
                        self.failure = error.Timeout;
                        return error.ReadFailed;
                    }
                    var fds = [1]posix.pollfd{.{ .fd = self.sock, .events = posix.POLL.IN, .revents = 0 }};
                    _ = posix.poll(&fds, root.msCeil(limit - spent)) catch |pe| {
                        self.failure = pe;
                        return error.ReadFailed;
                    };
                    continue;
                },
                else => {
                    self.failure = e;
                    return error.ReadFailed;
                },
            };
            if (n == 0) return error.EndOfStream;
            r.end += n;
            return 0;
        }
    }

    /// Sends what TLS wrote (the handshake's messages; after it, only if a
    /// record did not fit, which `max_chunk` prevents).
    fn outDrain(w: *Io.Writer, data: []const []const u8, splat: usize) Io.Writer.Error!usize {
        const self: *Conn = @alignCast(@fieldParentPtr("output", w));
        try self.sendRaw(w.buffered());
        w.end = 0;
        var n: usize = 0;
        for (data[0 .. data.len - 1]) |d| {
            try self.sendRaw(d);
            n += d.len;
        }
        const last = data[data.len - 1];
        for (0..splat) |_| {
            try self.sendRaw(last);
            n += last.len;
        }
        return n;
    }

    fn sendRaw(self: *Conn, bytes: []const u8) Io.Writer.Error!void {
        if (bytes.len == 0) return;
        const timeout = if (self.handshake_limit_ns) |limit| limit -| self.timer.read() else self.send_timeout_ns;
        root.sendAllTimeout(self.sock, bytes, @max(timeout, 1)) catch {
            self.failure = error.Unreachable;
            return error.WriteFailed;
        };
    }
};

/// A connection to the server: plain TCP, or TLS over it.
pub const Link = struct {
    sock: posix.socket_t,
    tls: ?*Conn = null,

    /// Sends all of `data`, each wait for room in the socket within
    /// `timeout_ns`.
    pub fn send(self: Link, data: []const u8, timeout_ns: u64) error{Unreachable}!void {
        if (self.tls) |c| return c.write(data, timeout_ns) catch error.Unreachable;
        return root.sendAllTimeout(self.sock, data, timeout_ns);
    }

    /// What has arrived, without waiting: at least 1 byte, or 0 when
    /// nothing is there yet (poll the socket, then call again).
    /// error.Closed at the end of the stream or a failure.
    pub fn readNow(self: Link, buf: []u8) error{Closed}!usize {
        if (self.tls) |c| return c.readNow(buf) catch error.Closed;
        const n = posix.recv(self.sock, buf, posix.MSG.DONTWAIT) catch |e| switch (e) {
            error.WouldBlock => return 0,
            else => return error.Closed,
        };
        if (n == 0) return error.Closed;
        return n;
    }

    /// Waits until something arrives (no time limit: a session's reader,
    /// woken by a shutdown of the socket); error.Closed at the end.
    pub fn read(self: Link, buf: []u8) error{Closed}!usize {
        while (true) {
            const n = try self.readNow(buf);
            if (n > 0) return n;
            var fds = [1]posix.pollfd{.{ .fd = self.sock, .events = posix.POLL.IN, .revents = 0 }};
            _ = posix.poll(&fds, -1) catch return error.Closed;
        }
    }

    /// Ends the stream the client writes, so the server sees the hang-up:
    /// close_notify over TLS, then the socket's write side.
    pub fn closeWrite(self: Link, timeout_ns: u64) error{Unreachable}!void {
        if (self.tls) |c| c.closeNotify(timeout_ns) catch return error.Unreachable;
        posix.shutdown(self.sock, .send) catch return error.Unreachable;
    }
};

test "serverNameFor: the host, an explicit name, never an IP without one" {
    var cfg = Config{ .gpa = std.testing.allocator, .bundle = .{}, .server_name = null };
    try std.testing.expectEqualStrings("lc.example.com", try cfg.serverNameFor("lc.example.com"));
    try std.testing.expectError(error.ServerNameRequired, cfg.serverNameFor("127.0.0.1"));
    try std.testing.expectError(error.ServerNameRequired, cfg.serverNameFor("::1"));
    try std.testing.expectError(error.ServerNameRequired, cfg.serverNameFor(""));
    var name = "localhost".*;
    cfg.server_name = &name;
    try std.testing.expectEqualStrings("localhost", try cfg.serverNameFor("127.0.0.1"));
}

test "Config.init refuses a missing file and a file without certificates" {
    const gpa = std.testing.allocator;
    try std.testing.expectError(error.FileNotFound, Config.init(gpa, .{ .ca_file = "/nonexistent/ca.pem" }));
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.writeFile(.{ .sub_path = "empty.pem", .data = "no certificate here\n" });
    const path = try tmp.dir.realpathAlloc(gpa, "empty.pem");
    defer gpa.free(path);
    try std.testing.expectError(error.NoCertificates, Config.init(gpa, .{ .ca_file = path }));
    try std.testing.expectError(error.InvalidServerName, Config.init(gpa, .{ .ca_file = path, .server_name = "" }));
}
