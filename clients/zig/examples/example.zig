const std = @import("std");
const lc = @import("locking_center");

pub fn main() !void {
    const client = lc.Client.init(try lc.parseAddress("127.0.0.1:22119"), .{ .source = "billing-worker" });

    try client.lock("invoices/2026-11"); // waits its turn (FIFO)
    defer client.unlock("invoices/2026-11") catch {}; // released when main returns
    std.debug.print("holding invoices/2026-11\n", .{});

    client.lockWith("reports", .{ .timeout_ns = 2 * std.time.ns_per_s }) catch |err| switch (err) {
        error.Timeout => return std.debug.print("reports busy, try later\n", .{}),
        else => return err,
    };
    defer client.unlock("reports") catch {};
    std.debug.print("holding reports too\n", .{});
}
