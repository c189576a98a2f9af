"""wbcore-lane-c-wasm: C compiled by TinyCC running as WebAssembly inside wasmtime."""
