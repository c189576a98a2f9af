"""The ``wat`` lane: WebAssembly text → a ``.wasm`` module, in-process.

``wasmtime.wat2wasm`` parses and encodes the text (no native toolchain, nothing of the
toolkit runs), then the module is validated against the engine. The source is a
``path:`` folder: its ``entry`` file, or its only ``*.wat``, or ``main.wat``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from wbcore_runtime.build import BuildOutput, BuildRequest
from wbcore_runtime.contract.errors import InvalidArgs, NotFound

if TYPE_CHECKING:
    from wbcore_runtime.runtime import Runtime

MAX_WAT_BYTES = 16 << 20
LANE_VERSION_SUFFIX = "wat-1"


def pick_source(folder: Path, entry: str | None) -> Path:
    if entry:
        path = folder / entry
        if not path.is_file():
            raise NotFound(f"wat lane: {entry} is not a file in {folder}")
        return path
    wats = sorted(folder.glob("*.wat"))
    if len(wats) == 1:
        return wats[0]
    if (folder / "main.wat").is_file():
        return folder / "main.wat"
    if not wats:
        raise NotFound(f"wat lane: no .wat file in {folder}")
    raise InvalidArgs(
        f"wat lane: {len(wats)} .wat files in {folder} ({', '.join(p.name for p in wats)}); "
        "name one in BUILD_SRC (path:src/x.wat) or add main.wat")


def compile_wat(text: str, *, name: str = "module") -> bytes:
    import wasmtime

    from wbcore_wasmtime import engine

    try:
        wasm = bytes(wasmtime.wat2wasm(text))
    except wasmtime.WasmtimeError as exc:
        raise InvalidArgs(f"wat lane: {name}: {str(exc).strip()}") from None
    try:
        wasmtime.Module.validate(engine.get().wasm, wasm)
    except wasmtime.WasmtimeError as exc:
        raise InvalidArgs(f"wat lane: {name}: invalid module: {str(exc).strip()}") from None
    return wasm


class WatLane:
    def __init__(self) -> None:
        from wbcore_wasmtime import engine

        self.version = f"wasmtime-{engine.wasmtime_version()}-{LANE_VERSION_SUFFIX}"

    def build(self, request: BuildRequest) -> BuildOutput:
        src = request.source
        if src.artifact is not None:
            raise InvalidArgs("wat lane: BUILD_SRC resolved to a prebuilt artifact; nothing to compile")
        if src.dir is None:
            raise InvalidArgs("wat lane: BUILD_SRC resolved to no source folder")
        path = pick_source(src.dir, src.entry)
        size = path.stat().st_size
        if size > MAX_WAT_BYTES:
            raise InvalidArgs(f"wat lane: {path.name} is {size} bytes, over the {MAX_WAT_BYTES}-byte cap")
        wasm = compile_wat(path.read_text(encoding="utf-8"), name=path.name)
        request.outdir.mkdir(parents=True, exist_ok=True)
        out = request.outdir / (path.stem + ".wasm")
        out.write_bytes(wasm)
        log = f"wat2wasm {path.name}: {size} bytes of text → {len(wasm)} bytes of wasm (validated)\n"
        return BuildOutput(artifact=out, log=log)


def factory(_runtime: Runtime) -> WatLane:
    return WatLane()
