"""wbcore-wasmtime: the command, kernel and component shapes on wasmtime, in-process."""
