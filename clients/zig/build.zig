const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});

    // The package's module: `b.dependency("locking_center", .{}).module("locking_center")`.
    const mod = b.addModule("locking_center", .{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
    });

    // Where the shared vectors are when LC_VECTORS is not set.
    const options = b.addOptions();
    options.addOption([]const u8, "default_vectors", b.pathFromRoot("../../wire/testdata/vectors.json"));

    // The child process of the SIGKILL test.
    const holder = b.addExecutable(.{
        .name = "holder",
        .root_module = b.createModule(.{
            .root_source_file = b.path("tests/holder.zig"),
            .target = target,
            .optimize = optimize,
            .imports = &.{.{ .name = "locking_center", .module = mod }},
        }),
    });
    options.addOptionPath("holder_path", holder.getEmittedBin());

    const unit = b.addTest(.{ .name = "unit", .root_module = mod });

    const integration = b.addTest(.{
        .name = "integration",
        .root_module = b.createModule(.{
            .root_source_file = b.path("tests/all.zig"),
            .target = target,
            .optimize = optimize,
            .imports = &.{
                .{ .name = "locking_center", .module = mod },
                .{ .name = "build_options", .module = options.createModule() },
            },
        }),
    });

    const test_step = b.step("test", "Run unit, vector, stand-in server and conformance tests");
    for ([_]*std.Build.Step.Compile{ unit, integration }) |t| {
        const run = b.addRunArtifact(t);
        // The conformance tests read LC_TEST_ADDRESS and talk to a live
        // server: never reuse a cached result.
        run.has_side_effects = true;
        test_step.dependOn(&run.step);
    }

    const example = b.addExecutable(.{
        .name = "example",
        .root_module = b.createModule(.{
            .root_source_file = b.path("examples/example.zig"),
            .target = target,
            .optimize = optimize,
            .imports = &.{.{ .name = "locking_center", .module = mod }},
        }),
    });
    const run_example = b.addRunArtifact(example);
    if (b.args) |args| run_example.addArgs(args);
    b.step("example", "Run examples/example.zig (args: ADDRESS)").dependOn(&run_example.step);

    const cluster_example = b.addExecutable(.{
        .name = "cluster-example",
        .root_module = b.createModule(.{
            .root_source_file = b.path("examples/cluster.zig"),
            .target = target,
            .optimize = optimize,
            .imports = &.{.{ .name = "locking_center", .module = mod }},
        }),
    });
    const run_cluster = b.addRunArtifact(cluster_example);
    b.step("cluster-example", "Run examples/cluster.zig (the nodes in $LC_CLUSTER)").dependOn(&run_cluster.step);

    const tls_example = b.addExecutable(.{
        .name = "tls-example",
        .root_module = b.createModule(.{
            .root_source_file = b.path("examples/tls.zig"),
            .target = target,
            .optimize = optimize,
            .imports = &.{.{ .name = "locking_center", .module = mod }},
        }),
    });
    const run_tls = b.addRunArtifact(tls_example);
    b.step("tls-example", "Run examples/tls.zig ($LC_ADDRESS, $LC_CA_FILE, $LC_SERVER_NAME)").dependOn(&run_tls.step);
}
