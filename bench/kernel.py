"""Kernel calls (seed 004 ABI): CRC-32 of 64 B, 4 KiB and 1 MiB inputs.

    .venv/bin/python bench/kernel.py [--seconds 0.4] [--rounds 3]

Rows per size:
- raw call floor: the bound entry of a no-op kernel through the lean path (no copies);
- guest compute: the crc32 entry alone, input already in guest memory (no copies);
- wb kernel, lean: ``Runtime.kernel("crc32").call(data)`` (write, call, bounds check, read);
- wb kernel, public API: the same through wasmtime-py's public ``Func``/``Memory`` calls;
- Extism: the same transform as an Extism plugin (bench/guests/crc32_extism.wat) through
  the Extism Python SDK (``pip install extism==1.1.1``; skipped with the reason if absent).
Each figure is the best of ``--rounds`` interleaved rounds. Targets (issue 3): >= 250,000 calls/s
at 64 B; >= 5x Extism; at 1 MiB within 1.2x of the guest's own compute time.
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, fresh_runtime, loop_rate, machine, table

NOOP = ('(module (memory (export "memory") 2) (func (export "process") (param i32) (result i32) '
        '(i32.const 0)))')
SIZES = [("64 B", 64), ("4 KiB", 4096), ("1 MiB", 1 << 20)]


def extism_plugin() -> tuple[object | None, str]:
    try:
        import extism
    except ImportError as exc:
        return None, f"extism not installed ({exc}); pip install extism==1.1.1"
    import wasmtime

    try:
        wasm = bytes(wasmtime.wat2wasm((ROOT / "bench" / "guests" / "crc32_extism.wat").read_text()))
        return extism.Plugin(wasm, wasi=False), ""
    except Exception as exc:  # noqa: BLE001 - report why it cannot run here
        return None, f"extism failed to load the plugin: {exc}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=0.4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import wasmtime

    from wbcore_runtime.build import builder
    from wbcore_runtime.store.registry import Entry

    rt = fresh_runtime()
    builder.build(rt, "checksum")
    art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(NOOP)))
    rt.registry.register(Entry(kind="kernel", name="noop", sha256=art.sha256, shape="kernel"))
    lean = rt.kernel("crc32")
    noop = rt.kernel("noop")
    os.environ["WB_WASM_PATH"] = "public"
    rt_pub = fresh_runtime(str(rt.home))
    public = rt_pub.kernel("crc32")
    os.environ.pop("WB_WASM_PATH")
    plugin, why = extism_plugin()

    print(f"kernel call: CRC-32 → 8 hex digits, {machine()}")
    rows, verdicts = [], []
    for label, n in SIZES:
        data = (b"0123456789abcdef" * (n // 16 + 1))[:n]
        want = f"{zlib.crc32(data):08x}".encode()
        assert lean.call(data) == want and public.call(data) == want
        secs = args.seconds if n < (1 << 20) else max(args.seconds, 1.0)
        batch = 1000 if n <= 4096 else 10
        floor_k = noop._k
        ck = lean._k
        ext = plugin
        if ext is not None:
            assert bytes(ext.call("crc32", data)) == want
        # rounds interleave the paths so a busy machine hurts them alike; the best round of
        # each path counts (the one least disturbed by other processes)
        runs: dict[str, list[float]] = {k: [] for k in ("floor", "compute", "lean", "pub", "ext")}
        for _ in range(args.rounds):
            runs["floor"].append(loop_rate(lambda f=floor_k: f.call(0), secs, batch))
            ck.write(65536, data)
            runs["compute"].append(loop_rate(lambda c=ck, m=n: c.call(m), secs, batch))
            runs["lean"].append(loop_rate(lambda d=data: lean.call(d), secs, batch))
            runs["pub"].append(loop_rate(lambda d=data: public.call(d), secs, max(1, batch // 10)))
            if ext is not None:
                runs["ext"].append(loop_rate(lambda e=ext, d=data: e.call("crc32", d), secs,
                                             max(1, batch // 10)))
        med = {k: (max(v) if v else None) for k, v in runs.items()}
        r_floor, r_compute, r_lean, r_pub, r_ext = (med["floor"], med["compute"], med["lean"], med["pub"],
                                                    med["ext"])
        for name, r in (("raw call floor (no-op entry)", r_floor), ("guest compute (entry only)", r_compute),
                        ("wb kernel, lean path", r_lean), ("wb kernel, public API", r_pub),
                        ("Extism Python SDK", r_ext)):
            if r is None:
                rows.append([label, name, "n/a", "n/a", why])
                continue
            vs = f"{r_lean / r_ext:.1f}x" if r_ext and name == "wb kernel, lean path" else ""
            rows.append([label, name, f"{r:,.0f}", f"{1e6 / r:,.2f}", vs])
        if n == 64:
            verdicts.append(f">= 250,000 calls/s at 64 B: {'met' if r_lean >= 250_000 else 'MISSED'} "
                            f"({r_lean:,.0f})")
            if r_ext:
                verdicts.append(f">= 5x Extism at 64 B: {'met' if r_lean / r_ext >= 5 else 'MISSED'} "
                                f"({r_lean / r_ext:.1f}x)")
        if n == 1 << 20:
            ratio = r_compute / r_lean
            verdicts.append(f"1 MiB within 1.2x of guest compute: {'met' if ratio <= 1.2 else 'MISSED'} "
                            f"({ratio:.2f}x)")
    table(rows, ["input", "path", "calls/s", "µs/call", "lean vs Extism"])
    print("targets: " + "; ".join(verdicts))
    for k in (lean, noop, public):
        k.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
