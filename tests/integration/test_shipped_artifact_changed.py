"""Issue 22 acceptance: an *artifact* file shipped in a toolkit folder (``wasm:bin/tool.wasm``)
changed after the build, in each way that keeps its stat identity (a write through a shared
mapping to an already-dirty page, a same-size rewrite with the times set back, an in-place
overwrite with the times set back): no later call, in this runtime or a new one, runs the new
bytes. Seen today: the runtime that built it runs the store's copy ("hello A"); a new one
refuses the command as changed since its build (the content digest is recomputed from the
bytes). Never the folder's new file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

wasmtime = pytest.importorskip("wasmtime")

from wbcore_runtime.build import builder  # noqa: E402
from wbcore_runtime.contract.errors import WbError  # noqa: E402

WAT = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $w (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello A\\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 8))
    (drop (call $w (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


def _mmap_write(path: Path, data: bytes) -> None:
    """Dirty the page with a write(2) of the same bytes, then store through a shared mapping."""
    import mmap

    with open(path, "r+b") as fh:
        old = fh.read()
        fh.seek(0)
        fh.write(old)
        fh.flush()
        with mmap.mmap(fh.fileno(), len(old), mmap.MAP_SHARED) as mm:
            mm[: len(data)] = data
            mm.flush()


def _rewrite_keep_times(path: Path, data: bytes) -> None:
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _rewrite_in_place_keep_times(path: Path, data: bytes) -> None:
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("change", [_mmap_write, _rewrite_keep_times, _rewrite_in_place_keep_times])
def test_a_shipped_artifact_changed_after_the_build_is_never_run(make_toolkit, make_runtime, change) -> None:
    good = bytes(wasmtime.wat2wasm(WAT))
    evil = good.replace(b"hello A\n", b"hello B\n")
    assert len(evil) == len(good) and evil != good
    tk = make_toolkit("shipped", exec="command",
                      extra={"BUILD_SRC": "wasm:bin/tool.wasm", "CLI_BIN": "shipped",
                                                     "SHA256": hashlib.sha256(good).hexdigest()},
                      drawer={"CLI_BIN": "shipped"}, files={"bin/tool.wasm": good})
    rt = make_runtime()
    done = builder.build(rt, "shipped")
    assert rt.call("shipped", [], b"").stdout == b"hello A\n"
    wasm = tk / "bin" / "tool.wasm"
    before = wasm.stat()
    change(wasm, evil)
    assert wasm.read_bytes() == evil and wasm.stat().st_ino == before.st_ino
    for runtime in (rt, make_runtime()):  # this runtime, then a new one (a new process)
        try:
            out = runtime.call("shipped", [], b"")
        except WbError as exc:  # refused as changed since its build: also never the new bytes
            assert "hello B" not in exc.message
        else:
            assert out.stdout == b"hello A\n", out.stdout
    assert rt.registry.lookup("command", "shipped").sha256 == done.sha256
