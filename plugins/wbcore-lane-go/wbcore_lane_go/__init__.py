"""wbcore-lane-go: Go → wasip1/wasm inside the build sandbox."""
