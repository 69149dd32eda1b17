const std = @import("std");
const lc = @import("locking_center");

pub fn main() !void {
    var gpa: std.heap.GeneralPurposeAllocator(.{}) = .init;
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();

    const address = std.posix.getenv("LC_ADDRESS") orelse "localhost:22119";
    const session = try lc.Session.open(allocator, address, .{ .ttl_ms = 10_000, .source = "billing-worker" });
    defer session.deinit(); // frees it; closes it first if the happy path did not

    const key = "invoices/2026-11";
    const token = try session.lock(key, .{}); // waits its turn (FIFO)
    errdefer session.release(key, token); // on an error path: released, nothing waits
    std.debug.print("holding {s} with token {d}\n", .{ key, token });
    // ... write to the protected resource, passing `token` along ...
    try session.unlock(key, token); // the happy path reports a failed release

    if (session.lock("reports", .{ .timeout_ns = 2 * std.time.ns_per_s })) |t| {
        try session.unlock("reports", t);
    } else |err| switch (err) {
        error.Timeout => std.debug.print("reports busy, try later\n", .{}),
        else => return err,
    }
    try session.close(); // releases whatever is still held, ends the threads
}
