const std = @import("std");
const lc = @import("locking_center");

pub fn main() !void {
    var gpa: std.heap.GeneralPurposeAllocator(.{}) = .init;
    defer _ = gpa.deinit();
    const allocator = gpa.allocator();

    // Every node of the cluster; any of them answers (a follower forwards to the leader).
    const nodes = std.posix.getenv("LC_CLUSTER") orelse "lc1:22119,lc2:22119,lc3:22119";
    const session = try lc.Session.open(allocator, nodes, .{
        .ttl_ms = 10_000,
        .source = "billing-worker",
        .connect_timeout_ns = 3 * std.time.ns_per_s, // each attempt, to each node
    });
    defer session.deinit();

    // If the leader dies while this waits, the session resumes through another node
    // and sends the Lock again with its id: a grant made before the failover is found.
    const key = "invoices/2026-11";
    const token = try session.lock(key, .{ .timeout_ns = 30 * std.time.ns_per_s });
    std.debug.print("holding {s} with token {d} (session {x:0>16})\n", .{ key, token, session.sessionId() });
    // error.OutcomeUnknown here: the answer was lost with a node; the session
    // releases that grant by its token after its resume.
    try session.unlock(key, token);
    try session.close();
}
