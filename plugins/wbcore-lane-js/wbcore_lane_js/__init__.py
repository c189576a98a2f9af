"""wbcore-lane-js: JavaScript (and type-stripped TypeScript) on QuickJS-NG's reactor wasm."""
