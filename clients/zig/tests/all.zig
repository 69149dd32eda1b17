//! Integration tests: the shared vectors, a scripted stand-in server, and
//! conformance against the real server at $LC_TEST_ADDRESS.
test {
    _ = @import("vectors.zig");
    _ = @import("fake_server.zig");
    _ = @import("conformance.zig");
    _ = @import("session_vectors.zig");
    _ = @import("session.zig");
    _ = @import("cluster.zig");
    _ = @import("tls.zig");
}
