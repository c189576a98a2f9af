"""``wasm:<where>`` and ``archive:<where>``: fetched, checked against ``#+SHA256`` before any
use, then handed over (a module) or unpacked safely (a bundle with ``#+WASM_PATH`` and
``#+PREOPEN``, or source for the manifest's ``#+BUILD_LANG``).

``<where>`` is an ``https://`` / ``http://`` URL (through the core's one fetcher,
``wbcore_runtime.guard.fetch``: SSRF guard on every hop, capped and bounded while streaming), a
``file://`` URL, or a path inside the toolkit (``wasm:bin/tool.wasm``). All three are
pinned by ``#+SHA256`` alike; unpacking is the core's ``wbcore_runtime.guard.unpack``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from wbcore_runtime.guard import fetch, paths, unpack
from wbcore_runtime.build import ResolvedSource, SourceRequest
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard.netguard import NetGuard
from wbcore_runtime.guard.preopen import parse_all as preopen_entries
from wbcore_runtime.trust.verdict import IntegrityError

from wbcore_sources.local import inside


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


def _limits(env: dict[str, str]) -> fetch.FetchLimits:
    return fetch.FetchLimits(max_bytes=int(env.get("WB_SOURCE_MAX_BYTES", 256 << 20)),
                        timeout=float(env.get("WB_SOURCE_TIMEOUT", 120)))


def _fetch(request: SourceRequest, env: dict[str, str], what: str, name: str) -> Path:
    want = _pinned(request, what)
    request.workdir.mkdir(parents=True, exist_ok=True)
    dest = request.workdir / name
    limits = _limits(env)
    spec = request.rest.strip()
    local = fetch.local_path(spec, request.manifest.dir)
    try:
        if local is None:
            got = fetch.download(spec, dest, guard=NetGuard.from_env(env), limits=limits, env=env).sha256
        else:
            if not spec.startswith("file://"):  # a path inside the toolkit, never outside it
                local = inside(request.manifest.dir, spec, what)
            got = fetch.copy_local(local, dest, max_bytes=limits.max_bytes, shown=f"{what}{spec}")
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    if got != want:
        dest.unlink(missing_ok=True)
        raise IntegrityError(f"{what}{spec}: sha256 mismatch: #+SHA256 is {want}, the file is {got}; nothing "
                             "was used")
    return dest


#: The preamble of a binary WebAssembly module (magic + version 1) and of a component (layer 1).
MODULE_PREAMBLE = b"\0asm\x01\x00\x00\x00"
COMPONENT_PREAMBLE = b"\0asm\x0d\x00\x01\x00"


def webassembly(path: Path, what: str) -> Path:
    """``path`` when it holds a binary WebAssembly module or component; else the build stops
    here, naming what was found, instead of registering bytes that fail at their first call."""
    with path.open("rb") as fh:
        head = fh.read(8)
    if head in (MODULE_PREAMBLE, COMPONENT_PREAMBLE):
        return path
    if head.startswith(b"\0asm"):
        raise InvalidArgs(f"{what}: a WebAssembly binary of an unsupported version ({head[4:].hex()}); "
                          "a module (version 1) or a component is needed")
    kind = ("WebAssembly text (build it with #+BUILD_LANG: wat)" if head.lstrip()[:1] == b"("
            else f"starts with {head[:8]!r}")
    raise InvalidArgs(f"{what} is not a WebAssembly binary ({kind}); point it at a .wasm module or component")


class WasmSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        dest = _fetch(request, self.env, "wasm:", "module.wasm")
        return ResolvedSource(digest=request.manifest.sha256 or "",
                              artifact=webassembly(dest, f"wasm:{request.rest}"))


class ArchiveSource:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def resolve(self, request: SourceRequest) -> ResolvedSource:
        archive = _fetch(request, self.env, "archive:", "bundle.archive")
        root = request.workdir / "bundle"
        if root.exists():
            shutil.rmtree(root)
        unpack.unpack(archive, root,
                      unpack.Caps(max_bytes=int(self.env.get("WB_ARCHIVE_MAX_BYTES", 512 << 20)),
                                  max_files=int(self.env.get("WB_ARCHIVE_MAX_FILES", 20000))))
        archive.unlink()
        digest = request.manifest.sha256 or ""
        m = request.manifest
        named = preopen_entries(m.preopen)
        if len(named) > 1:
            raise InvalidArgs("#+PREOPEN: an archive: bundle preopens one folder of the archive (give one "
                              "#+PREOPEN)")
        preopen = inside(root, named[0][0], "the archive") if named else None
        if preopen is not None and not preopen.is_dir():
            raise InvalidArgs(f"#+PREOPEN {m.preopen!r} is not a folder in the archive")
        if m.wasm_path:
            wasm = inside(root, m.wasm_path, "the archive")
            if not wasm.is_file():
                raise InvalidArgs(f"#+WASM_PATH {m.wasm_path!r} is not a file in the archive")
            return ResolvedSource(digest=digest,
                                  artifact=webassembly(wasm, f"#+WASM_PATH {m.wasm_path!r} in "
                                                             f"archive:{request.rest}"),
                                  dir=root, preopen=preopen, sha256_pins_source=True)
        if m.build_lang:
            return ResolvedSource(digest=digest, dir=root, preopen=preopen, sha256_pins_source=True)
        # the containment walk (openat + O_NOFOLLOW): links are never taken for a module
        found = sorted(root / n.rel
                       for n in paths.walk(root, label="the archive", skip_dirs=frozenset({".git"}))
                       if n.kind == "file" and n.rel.endswith(".wasm"))
        if len(found) != 1:
            listed = ", ".join(p.relative_to(root).as_posix() for p in found[:10]) or "none"
            raise InvalidArgs(f"archive:{request.rest}: say which module with #+WASM_PATH (found: {listed})")
        module = webassembly(found[0], f"{found[0].relative_to(root).as_posix()} in archive:{request.rest}")
        return ResolvedSource(digest=digest, artifact=module, dir=root, preopen=preopen,
                              sha256_pins_source=True)


def wasm(runtime: Any) -> WasmSource:
    return WasmSource(dict(getattr(runtime, "env", {}) or {}))


def archive(runtime: Any) -> ArchiveSource:
    return ArchiveSource(dict(getattr(runtime, "env", {}) or {}))
