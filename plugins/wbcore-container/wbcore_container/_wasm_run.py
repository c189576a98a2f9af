"""Runs one wasm command inside the container:
``python3 -I -S /wb/run.py /wb/site <status-fd> <from-host-fd> <to-host-fd> <secret-fd>``.

The container's own Debian ``python3`` with the host's wasmtime package bound read-only at
``/wb/site``. It reads the call from ``/wb/call.json`` (argv, memory limit) and the module
from ``/wb/module.cwasm`` (compiled by the host into the artifact store's cache) or
``/wb/module.wasm`` (both copied in read-only), runs ``_start`` with WASI stdio
inherited (stdin, stdout and stderr are the container's, read and capped by the host), and
writes how the guest ended as one JSON object on the status fd. It decides nothing: the
deadline and output caps are the host's (SIGKILL of the container); the memory limit is
the store's. A module that imports ``wb.*`` asks the host which caps link and forwards
each call to the host's Dock over the framed protocol (``/wb/lib/capbridge.py``, the caps
bridge's guest side wbcore-wasmtime serves, next to ``frames.py``); the session secret arrives on a pipe and
every host frame must carry it.
"""

import json
import os
import sys


def main():
    sys.path[:0] = [sys.argv[1], "/wb/lib"]
    status_fd, from_host, to_host, secret_fd = (int(a) for a in sys.argv[2:6])
    import wasmtime

    import capbridge
    import frames

    with open("/wb/call.json", "rb") as fh:
        call = json.load(fh)
    engine = wasmtime.Engine()
    report = {"exit": 0, "trap": None, "trap_code": "", "peak": 0, "no_start": False, "link_error": "",
              "refused": False, "abi_error": ""}
    try:
        module = None
        if os.path.exists("/wb/module.cwasm"):  # compiled by the host, same wasmtime and config
            try:
                module = wasmtime.Module.deserialize_file(engine, "/wb/module.cwasm")
            except wasmtime.WasmtimeError:
                module = None
        if module is None:
            module = wasmtime.Module.from_file(engine, "/wb/module.wasm")
    except wasmtime.WasmtimeError as exc:
        report["link_error"] = f"not a valid module: {str(exc).strip().splitlines()[0]}"
        return finish(status_fd, report)
    store = wasmtime.Store(engine)
    store.set_limits(memory_size=int(call["memory"]), instances=4, tables=8, memories=2)
    wasi = wasmtime.WasiConfig()
    wasi.argv = [str(a) for a in call["argv"]]
    wasi.inherit_stdin()
    wasi.inherit_stdout()
    wasi.inherit_stderr()
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    if capbridge.GuestCaps.needs_link(module):
        guest = capbridge.GuestCaps(frames.Channel(from_host, to_host), frames.read_secret(secret_fd),
                                    int(call["id"]), wasmtime)
        try:
            caps = guest.link(module)
        except capbridge.Refused:
            report["refused"] = True
            return finish(status_fd, report)
        report["abi_error"] = capbridge.GuestCaps.bad_abi(module, wasmtime)
        if report["abi_error"]:
            return finish(status_fd, report)
        guest.define(linker, module, caps)
    instance = None
    try:
        try:
            instance = linker.instantiate(store, module)
        except wasmtime.WasmtimeError as exc:
            if not isinstance(exc, wasmtime.Trap):
                report["link_error"] = str(exc).strip().splitlines()[0]
                return finish(status_fd, report)
            raise
        start = instance.exports(store).get("_start")
        if start is None:
            report["no_start"] = True
        else:
            start(store)
    except wasmtime.ExitTrap as exc:
        report["exit"] = exc.code
    except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
        lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
        report["trap"] = next((ln for ln in lines if ln.startswith("wasm trap:")),
                              lines[-1] if lines else "trap")
        code = getattr(exc, "trap_code", None)
        report["trap_code"] = code.name if code is not None else ""
    if instance is not None:
        mem = instance.exports(store).get("memory")
        if isinstance(mem, wasmtime.Memory):
            report["peak"] = mem.data_len(store)
    return finish(status_fd, report)


def finish(fd, report):
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(fd, json.dumps(report).encode())
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
