"""``wasm:<url>`` and ``archive:<url>``: fetched, checked against ``#+SHA256`` before any
use, then handed over (a module) or unpacked safely (a bundle with ``#+WASM_PATH`` and
``#+PREOPEN``, or source for the manifest's ``#+BUILD_LANG``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from wbcore.build import ResolvedSource, SourceRequest
from wbcore.errors import InvalidArgs
from wbcore.trust import IntegrityError

from wb_sources.fetch import FetchLimits, download
from wb_sources.local import inside
from wb_sources.unpack import UnpackLimits, unpack


def pinned(manifest: Any, rest: str, what: str) -> str:
    """The ``#+SHA256`` a fetched source is checked against; refused without one. The
    ``check`` of the ``wasm:``/``archive:`` records, so ``verify`` says what ``build`` would."""
    want = (manifest.sha256 or "").strip().lower()
    if not want:
        raise InvalidArgs(f"{what}{rest} needs #+SHA256: a fetched source is pinned by its digest; "
                          f"add #+SHA256: <sha256 of the file> to the manifest (sha256sum prints it)")
    return want


def _pinned(request: SourceRequest, what: str) -> str:
    return pinned(request.manifest, request.rest, what)


def _fetch(request: SourceRequest, env: dict[str, str], what: str, name: str) -> Path:
    want = _pinned(request, what)
    request.workdir.mkdir(parents=True, exist_ok=True)
    dest = request.workdir / name
    got = download(request.rest, dest, FetchLimits.from_env(env))
    if got != want:
        dest.unlink(missing_ok=True)
        raise IntegrityError(f"{what}{request.rest}: sha256 mismatch: #+SHA256 is {want}, the download is {got}; nothing was used")
    return dest


class WasmSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        dest = _fetch(request, self.env, "wasm:", "module.wasm")
        with dest.open("rb") as fh:
            if fh.read(4) != b"\0asm":
                raise InvalidArgs(f"wasm:{request.rest} is not a WebAssembly module")
        return ResolvedSource(digest=request.manifest.sha256 or "", artifact=dest)


class ArchiveSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        archive = _fetch(request, self.env, "archive:", "bundle.archive")
        root = request.workdir / "bundle"
        if root.exists():
            shutil.rmtree(root)
        unpack(archive, root, UnpackLimits(max_bytes=int(self.env.get("WB_ARCHIVE_MAX_BYTES", 512 << 20)),
                                           max_files=int(self.env.get("WB_ARCHIVE_MAX_FILES", 20000))))
        archive.unlink()
        digest = request.manifest.sha256 or ""
        m = request.manifest
        preopen = inside(root, m.preopen, "#+PREOPEN") if m.preopen else None
        if preopen is not None and not preopen.is_dir():
            raise InvalidArgs(f"#+PREOPEN {m.preopen!r} is not a folder in the archive")
        if m.wasm_path:
            wasm = inside(root, m.wasm_path, "#+WASM_PATH")
            if not wasm.is_file():
                raise InvalidArgs(f"#+WASM_PATH {m.wasm_path!r} is not a file in the archive")
            return ResolvedSource(digest=digest, artifact=wasm, dir=root, preopen=preopen, sha256_pins_source=True)
        if m.build_lang:
            return ResolvedSource(digest=digest, dir=root, preopen=preopen, sha256_pins_source=True)
        found = sorted(p for p in root.rglob("*.wasm") if p.is_file() and not p.is_symlink())
        if len(found) != 1:
            listed = ", ".join(p.relative_to(root).as_posix() for p in found[:10]) or "none"
            raise InvalidArgs(f"archive:{request.rest}: say which module with #+WASM_PATH (found: {listed})")
        return ResolvedSource(digest=digest, artifact=found[0], dir=root, preopen=preopen, sha256_pins_source=True)


def wasm(runtime: Any) -> WasmSource:
    return WasmSource(dict(getattr(runtime, "env", {}) or {}))


def archive(runtime: Any) -> ArchiveSource:
    return ArchiveSource(dict(getattr(runtime, "env", {}) or {}))
