"""Runs one WASI command inside the build sandbox (the os_process tier's worker).

``python -I -S _tier_worker.py <wasmtime-parent-dir> <module.wasm> <memory-bytes> <name> [args...]``:
stdin, stdout and stderr are the sandbox's pipes; the exit status is the guest's.
"""

import sys

DENIED = "wb-os-process: capability-denied: "


def main():
    sys.path.insert(0, sys.argv[1])
    import wasmtime

    module_path, memory, argv = sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    engine = wasmtime.Engine()
    store = wasmtime.Store(engine)
    store.set_limits(memory_size=memory, instances=4, tables=8, memories=2)
    wasi = wasmtime.WasiConfig()
    wasi.argv = argv
    wasi.inherit_stdin()
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    module = wasmtime.Module.from_file(engine, module_path)
    # No caps cross this boundary yet: a guest that imports one does not instantiate,
    # the same decision the instance tier makes (the host maps this line to capability-denied).
    for imp in module.imports:
        if imp.module != "wasi_snapshot_preview1":
            sys.stderr.write(f"{DENIED}module imports {imp.module}.{imp.name}, which is not granted at tier "
                             f"os_process (capabilities are not bridged into it)\n")
            sys.exit(126)
    instance = linker.instantiate(store, module)
    try:
        instance.exports(store)["_start"](store)
    except wasmtime.ExitTrap as exc:
        sys.stdout.flush()
        sys.exit(exc.code)
    except wasmtime.Trap as exc:
        sys.stderr.write(f"wb-os-process: guest trapped: {exc}\n")
        sys.exit(70)


if __name__ == "__main__":
    main()
