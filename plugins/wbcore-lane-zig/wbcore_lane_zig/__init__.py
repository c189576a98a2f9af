"""wbcore-lane-zig: the c and zig lanes (zig as a native compiler inside the build sandbox)."""
