//! A child process for the SIGKILL test: holds every key given on the
//! command line through one session with a 1 s TTL, prints READY, and
//! sleeps until it is killed.
const std = @import("std");
const lc = @import("locking_center");

pub fn main() !void {
    var gpa: std.heap.GeneralPurposeAllocator(.{}) = .init;
    const alloc = gpa.allocator();
    const args = try std.process.argsAlloc(alloc);
    defer std.process.argsFree(alloc, args);
    const session = try lc.Session.open(alloc, args[1], .{ .ttl_ms = 1000, .source = "zig-holder" });
    defer session.deinit();
    for (args[2..]) |key| _ = try session.lock(key, .{});
    var out = std.fs.File.stdout().writer(&.{});
    try out.interface.writeAll("READY\n");
    std.Thread.sleep(60 * std.time.ns_per_s);
}
