//! First-party warm-up source: compiling it fills zig's cache with compiler_rt and the
//! parts of std (Io, process.Init, fmt) that toolkits use.
const std = @import("std");
const Io = std.Io;

pub fn main(init: std.process.Init) !void {
    const arena = init.arena.allocator();
    const args = try init.minimal.args.toSlice(arena);
    var in_buf: [4096]u8 = undefined;
    var stdin_reader: Io.File.Reader = .init(.stdin(), init.io, &in_buf);
    const data = try stdin_reader.interface.allocRemaining(arena, .limited(1 << 20));
    var out_buf: [1024]u8 = undefined;
    var stdout_writer: Io.File.Writer = .init(.stdout(), init.io, &out_buf);
    const out = &stdout_writer.interface;
    try out.print("{d} args, {d} bytes\n", .{ args.len, data.len });
    try out.flush();
}
