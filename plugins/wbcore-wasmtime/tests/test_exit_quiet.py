"""An embedder's process ends without wasmtime-py's teardown noise: the engine module hands
its cached modules, pre-linked instances and engine back at ``atexit``, while wasmtime's FFI
still exists (without it, each printed "Exception ignored in … Managed.__del__ … TypeError")."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path

    import wasmtime
    from wbcore_runtime.runtime import Runtime
    from wbcore_testing.fixtures import ECHO_OR_TRAP, K_UPPER, register_wat

    def main():
        from wbcore_runtime.build.builder import build

        # a toolkit built by the wat lane and called by name (its resolution cached in the
        # runtime, which lives in a reference cycle: the garbage collector frees it at
        # teardown, after wasmtime's FFI is gone), plus a registered command and kernel
        rt = Runtime.open(home=Path(sys.argv[1]), roots=[Path(sys.argv[2])])
        build(rt, "b64")
        assert rt.call("b64", [], stdin=b"hello").stdout == b"aGVsbG8=\\n"
        register_wat(rt, "echo", ECHO_OR_TRAP, wat2wasm=wasmtime.wat2wasm)
        register_wat(rt, "kup", K_UPPER, kind="kernel", wat2wasm=wasmtime.wat2wasm)
        assert rt.call("echo", [], stdin=b"hi").stdout == b"hi"
        assert rt.kernel_call("kup", b"abc") == b"ABC"
        print("ran")

    main()
""")


def test_an_embedders_process_exits_without_finalizer_noise(tmp_path: Path) -> None:
    from wbcore_runtime.runtime import Runtime

    # The noise showed with a toolkit built from its folder and called by name (a command
    # registered directly did not show it): that needs the `path:` source prefix (wbcore-sources).
    if "path:" not in Runtime.open(home=tmp_path / "probe", roots=[]).prefixes.names():
        pytest.skip("the path: BUILD_SRC prefix is not installed (pip install wbcore-sources)")
    script = tmp_path / "embed.py"
    script.write_text(SCRIPT)
    toolkits = Path(__file__).resolve().parents[3] / "toolkits"
    res = subprocess.run([sys.executable, str(script), str(tmp_path / "home"), str(toolkits)],
                         capture_output=True, check=False, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ran"
    assert "Exception ignored" not in res.stderr and "Traceback" not in res.stderr, res.stderr
