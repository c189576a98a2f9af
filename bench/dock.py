"""Dock broker call overhead, measured from inside WebAssembly.

    .venv/bin/python bench/dock.py [--calls 20000] [--rounds 7]

A guest exports ``loop(n)`` that calls one import ``n`` times with a fixed CBOR request
already in its memory; the figures per row are (loop wall time) / n and (process CPU
time, ``time.process_time``: every thread, the audit writer's included) / n, medians of
``--rounds`` rounds. CPU is the figure that does not depend on how busy the machine is.
Rows:
- bare host import: the same ``(i32,i32,i32,i32)->i64`` signature bound to a Python
  function that returns 0 — through wasmtime's unchecked C callback (the path the Dock
  links, ``wbcore_wasmtime/dock_fast.py``; the ratio's denominator) and through wasmtime-py's
  public ``Linker.define_func``;
- bare import + copy: the floor plus reading the request and writing a 16-byte answer;
- wb.kv get / wb.vfs read: the full Dock path (memory read, CBOR decode, default-deny,
  revocation, rate limit, broker SQLite read, CBOR encode, size cap, hash-chained audit
  line, memory write), with a 32-byte value;
- the same two without the wasm boundary (``Dock.call`` from Python), to split the cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, table  # noqa: E402


def guest(cap: str, req: bytes) -> bytes:
    import wasmtime

    hexed = "".join(f"\\{b:02x}" for b in req)
    return bytes(wasmtime.wat2wasm(f"""(module
      (import "wb" "{cap}" (func $c (param i32 i32 i32 i32) (result i64)))
      (memory (export "memory") 2)
      (data (i32.const 64) "{hexed}")
      (func (export "loop") (param $n i32) (result i64) (local $r i64)
        (block $done (loop $l
          (br_if $done (i32.eqz (local.get $n)))
          (local.set $r (call $c (i32.const 64) (i32.const {len(req)}) (i32.const 4096) (i32.const 60000)))
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (br $l)))
        (local.get $r)))"""))


def per_call(fn, n: int, rounds: int) -> tuple[float, float, float, float]:
    """(wall, CPU, CPU min, CPU max) seconds per call; wall and CPU are medians over ``rounds``."""
    fn(min(n, 500))  # warm
    wall, cpu = [], []
    for _ in range(rounds):
        c, t = time.process_time(), time.perf_counter()
        fn(n)
        wall.append((time.perf_counter() - t) / n)
        cpu.append((time.process_time() - c) / n)
    return statistics.median(wall), statistics.median(cpu), min(cpu), max(cpu)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    import cbor2
    import wasmtime

    from wbcore_wasmtime import dock_link
    from wbcore_runtime.contract.calls import Principal
    from wbcore_runtime.runtime import Runtime
    from wbcore_audit_trail import reader

    rt = Runtime.open(plugins=["brokers-state"], home=tempfile.mkdtemp(prefix="wb-bench-dock-"),
                      env={"WB_DOCK_RATE": "1000000000/60"})
    dock = rt.dock
    ctx = dock.context(principal=Principal("bench", "dock"), caps={"kv", "vfs"}, instance="bench")
    value = b"v" * 32
    dock.call(ctx, "kv", "put", {"key": "k", "value": value})
    dock.call(ctx, "vfs", "write", {"path": "f.txt", "data": value})
    kv_req = cbor2.dumps({"op": "get", "key": "k"})
    vfs_req = cbor2.dumps({"op": "read", "path": "f.txt"})

    engine = wasmtime.Engine()
    i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
    ty = wasmtime.FuncType([i32, i32, i32, i32], [i64])

    def bare_loop(copy: bool):
        store = wasmtime.Store(engine)
        linker = wasmtime.Linker(engine)
        answer = b"\xa1\x65value\x49" + b"x" * 9

        def noop(a, b, c, d):
            return 0

        def copying(caller, a, b, c, d):
            mem = caller["memory"]
            mem.read(caller, a, a + b)
            mem.write(caller, answer, c)
            return len(answer)

        linker.define_func("wb", "kv", ty, copying if copy else noop, access_caller=copy)
        inst = linker.instantiate(store, wasmtime.Module(engine, guest("kv", kv_req)))
        f = inst.exports(store)["loop"]
        return lambda n: f(store, n)

    def raw_loop():
        import ctypes

        from wasmtime import _bindings as ffi

        @ffi.wasmtime_func_unchecked_callback_t
        def noop(env, caller, raw, n):
            raw[0].i64 = 0
            return 0

        keep.append(noop)
        store = wasmtime.Store(engine)
        linker = wasmtime.Linker(engine)
        err = ffi.wasmtime_linker_define_func_unchecked(linker.ptr(), b"wb", 2, b"kv", 2, ty.ptr(), noop,
                                                        None, ctypes.CFUNCTYPE(None, ctypes.c_void_p)(0))
        assert not err
        inst = linker.instantiate(store, wasmtime.Module(engine, guest("kv", kv_req)))
        f = inst.exports(store)["loop"]
        return lambda n: f(store, n)

    keep: list = []

    def dock_loop(cap: str, req: bytes):
        store = wasmtime.Store(engine)
        linker = wasmtime.Linker(engine)
        module = wasmtime.Module(engine, guest(cap, req))
        dock_link.link(dock, linker, module, ctx)
        inst = linker.instantiate(store, module)
        f = inst.exports(store)["loop"]

        def run(n: int) -> None:
            r = f(store, n)
            assert r > 0, r

        return run

    n, rounds = args.calls, args.rounds
    bare_row = per_call(raw_loop(), n, rounds)
    rows = [("bare host import (no-op, unchecked C callback)", bare_row)]
    rows.append(("bare host import (no-op, Linker.define_func)", per_call(bare_loop(False), n, rounds)))
    rows.append(("bare import + read req / write 16 B", per_call(bare_loop(True), n, rounds)))
    rows.append(("wb.kv get (full Dock path)", per_call(dock_loop("kv", kv_req), n, rounds)))
    rows.append(("wb.vfs read (full Dock path)", per_call(dock_loop("vfs", vfs_req), n, rounds)))
    rows.append(("Dock.call kv get from Python",
                 per_call(lambda k: [dock.call(ctx, "kv", "get", {"key": "k"}) for _ in range(k)],
                          n // 4, rounds)))
    rows.append(("Dock.call vfs read from Python",
                 per_call(lambda k: [dock.call(ctx, "vfs", "read", {"path": "f.txt"}) for _ in range(k)],
                          n // 4, rounds)))
    print(machine())
    print(f"{n} calls per round, median of {rounds} rounds; audit on (batched, no fsync), SQLite WAL\n")
    table([[name, f"{t * 1e6:,.2f} µs", f"{c * 1e6:,.2f} µs ({lo * 1e6:,.2f}–{hi * 1e6:,.2f})",
            f"{c / bare_row[1]:,.1f}x", f"{1 / t:,.0f}/s"] for name, (t, c, lo, hi) in rows],
          ["path", "wall per call", "CPU per call (min–max)", "CPU vs bare import", "rate"])
    print(f"\nN = {n} calls per round ({n // 4} for the Python rows), {rounds} rounds; {machine()}")
    assert reader.verify(dock.audit) == []


if __name__ == "__main__":
    main()
