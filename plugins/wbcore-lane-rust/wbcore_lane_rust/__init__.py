"""wbcore-lane-rust: Rust → wasm32-wasi(p1) inside the build sandbox."""
