"""The lean call paths (wasmtime-py's lower-level bindings) give exactly what the public
API gives. They lean on wasmtime-py internals, so the version is pinned and checked."""

from __future__ import annotations

import random

from conftest import ARGS_ENV, ECHO, EXIT3, K_LIAR, K_UPPER
from wbcore_wasmtime import fastpath


def test_wasmtime_is_the_pinned_version():
    assert fastpath.check_pin() is None


def _results(rt, register):
    register("echo", ECHO)
    register("exit3", EXIT3)
    register("argsenv", ARGS_ENV)
    register("kup", K_UPPER, kind="kernel")
    register("liar", K_LIAR, kind="kernel")
    data = random.Random(7).randbytes(70_000)
    out = []
    for name, argv, stdin in [("echo", [], data), ("echo", [], b""), ("exit3", [], b""),
                              ("argsenv", ["x"], b""), ("upper", [], b"MiXeD case\n")]:
        r = rt.call(name, argv, stdin)
        out.append((r.stdout, r.stderr, r.exit_code, r.usage.peak_memory))
    with rt.kernel("kup") as k:
        out.append([k.call(x) for x in (b"", b"a", b"hello world" * 100, bytes(range(256)))])
        out.append(k.max_input)
    with rt.kernel("liar") as k:
        try:
            k.call(b"x")
        except Exception as exc:  # noqa: BLE001 - the error itself is compared
            out.append((type(exc).__name__, str(exc)))
    return out


def test_lean_and_public_paths_agree(make_runtime, tmp_path, monkeypatch):
    import wasmtime

    from wbcore_runtime.store.registry import Entry

    results = {}
    for name in ("lean", "public"):
        monkeypatch.setenv("WB_WASM_PATH", name)
        rt = make_runtime(plugins=["wasmtime"], home=tmp_path / name)

        def register(n, wat, kind="command", rt=rt, **options):
            art = rt.artifacts.put_bytes(bytes(wasmtime.wat2wasm(wat)))
            return rt.registry.register(Entry(kind=kind, name=n, sha256=art.sha256, shape=kind,
                                              options=options))

        assert type(rt.shapes.get("command").runner(rt).path).__name__.lower() == name
        results[name] = _results(rt, register)
    assert results["lean"] == results["public"]
