//! lines: line-oriented text tools for agents, a WASI command written in Zig.
//!
//!   lines stats          lines, words, bytes, UTF-8 characters, longest line, blank lines
//!   lines freq [N]       the N (default 10) most frequent lines with their counts
//!   lines dedupe         drop repeated lines, keeping the first of each, in order
//!   lines grep-count S   how many lines contain the text S (fixed string, case-sensitive)
const std = @import("std");
const Io = std.Io;

const max_input = 64 << 20;

fn usage(err: *Io.Writer) !u8 {
    try err.writeAll("usage: lines stats | freq [N] | dedupe | grep-count TEXT\n");
    try err.flush();
    return 2;
}

fn splitLines(data: []const u8) std.mem.SplitIterator(u8, .scalar) {
    // A final newline ends the last line; it does not start an empty one.
    const body = if (data.len > 0 and data[data.len - 1] == '\n') data[0 .. data.len - 1] else data;
    return std.mem.splitScalar(u8, body, '\n');
}

fn stats(data: []const u8, out: *Io.Writer) !void {
    var lines: usize = 0;
    var blank: usize = 0;
    var longest: usize = 0;
    if (data.len > 0) {
        var it = splitLines(data);
        while (it.next()) |line| {
            lines += 1;
            const trimmed = std.mem.trim(u8, line, " \t\r");
            if (trimmed.len == 0) blank += 1;
            const chars = std.unicode.utf8CountCodepoints(line) catch line.len;
            if (chars > longest) longest = chars;
        }
    }
    var words: usize = 0;
    var words_it = std.mem.tokenizeAny(u8, data, " \t\r\n");
    while (words_it.next()) |_| words += 1;
    const chars = std.unicode.utf8CountCodepoints(data) catch data.len;
    try out.print("lines {d}\nwords {d}\nbytes {d}\nchars {d}\nlongest {d}\nblank {d}\n", .{ lines, words, data.len, chars, longest, blank });
}

const Entry = struct { line: []const u8, count: usize, first: usize };

fn moreFrequent(_: void, a: Entry, b: Entry) bool {
    if (a.count != b.count) return a.count > b.count;
    return a.first < b.first;
}

fn freq(gpa: std.mem.Allocator, data: []const u8, limit: usize, out: *Io.Writer) !void {
    var index: std.StringHashMapUnmanaged(usize) = .empty;
    defer index.deinit(gpa);
    var entries: std.ArrayList(Entry) = .empty;
    defer entries.deinit(gpa);
    if (data.len > 0) {
        var it = splitLines(data);
        while (it.next()) |line| {
            const gop = try index.getOrPut(gpa, line);
            if (gop.found_existing) {
                entries.items[gop.value_ptr.*].count += 1;
            } else {
                gop.value_ptr.* = entries.items.len;
                try entries.append(gpa, .{ .line = line, .count = 1, .first = entries.items.len });
            }
        }
    }
    std.mem.sort(Entry, entries.items, {}, moreFrequent);
    for (entries.items[0..@min(limit, entries.items.len)]) |e| {
        try out.print("{d}\t{s}\n", .{ e.count, e.line });
    }
}

fn dedupe(gpa: std.mem.Allocator, data: []const u8, out: *Io.Writer) !void {
    var seen: std.StringHashMapUnmanaged(void) = .empty;
    defer seen.deinit(gpa);
    if (data.len == 0) return;
    var it = splitLines(data);
    while (it.next()) |line| {
        const gop = try seen.getOrPut(gpa, line);
        if (!gop.found_existing) {
            try out.writeAll(line);
            try out.writeByte('\n');
        }
    }
}

fn grepCount(data: []const u8, needle: []const u8, out: *Io.Writer) !void {
    var n: usize = 0;
    if (data.len > 0) {
        var it = splitLines(data);
        while (it.next()) |line| {
            if (std.mem.indexOf(u8, line, needle) != null) n += 1;
        }
    }
    try out.print("{d}\n", .{n});
}

pub fn main(init: std.process.Init) !u8 {
    const arena = init.arena.allocator();
    const args = try init.minimal.args.toSlice(arena);

    var err_buf: [256]u8 = undefined;
    var stderr_writer: Io.File.Writer = .init(.stderr(), init.io, &err_buf);
    const err = &stderr_writer.interface;
    var out_buf: [8192]u8 = undefined;
    var stdout_writer: Io.File.Writer = .init(.stdout(), init.io, &out_buf);
    const out = &stdout_writer.interface;

    if (args.len < 2) return usage(err);
    const cmd = args[1];

    var in_buf: [65536]u8 = undefined;
    var stdin_reader: Io.File.Reader = .init(.stdin(), init.io, &in_buf);
    const data = stdin_reader.interface.allocRemaining(arena, .limited(max_input)) catch |e| switch (e) {
        error.StreamTooLong => {
            try err.print("lines: input is over {d} bytes\n", .{max_input});
            try err.flush();
            return 1;
        },
        else => return e,
    };

    if (std.mem.eql(u8, cmd, "stats") and args.len == 2) {
        try stats(data, out);
    } else if (std.mem.eql(u8, cmd, "freq") and args.len <= 3) {
        const limit = if (args.len == 3) std.fmt.parseInt(usize, args[2], 10) catch return usage(err) else 10;
        try freq(init.gpa, data, limit, out);
    } else if (std.mem.eql(u8, cmd, "dedupe") and args.len == 2) {
        try dedupe(init.gpa, data, out);
    } else if (std.mem.eql(u8, cmd, "grep-count") and args.len == 3) {
        try grepCount(data, args[2], out);
    } else {
        return usage(err);
    }
    try out.flush();
    return 0;
}
