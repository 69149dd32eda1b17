const std = @import("std");
const lc = @import("locking_center");

pub fn main() !void {
    var gpa: std.heap.GeneralPurposeAllocator(.{}) = .init;
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();

    // The CAs to trust: a PEM file (LC_CA_FILE), or the system's roots.
    // server_name: the name to check in the server's certificate; null
    // checks the host dialled (a DNS name: Zig's TLS does not check IPs).
    var tls = try lc.TlsConfig.init(allocator, .{
        .ca_file = std.posix.getenv("LC_CA_FILE"),
        .server_name = std.posix.getenv("LC_SERVER_NAME"),
    });
    defer tls.deinit(); // after every session and client that uses it

    const address = std.posix.getenv("LC_ADDRESS") orelse "lc.example.com:22119";
    const session = try lc.Session.open(allocator, address, .{ .ttl_ms = 10_000, .source = "billing-worker", .tls = &tls });
    defer session.deinit();

    const key = "invoices/2026-11";
    const token = try session.lock(key, .{});
    errdefer session.release(key, token);
    std.debug.print("holding {s} over TLS with token {d}\n", .{ key, token });
    try session.unlock(key, token);
    try session.close();
}
