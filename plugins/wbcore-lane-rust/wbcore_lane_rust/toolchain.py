"""Find a rustc whose sysroot has a wasm32-wasi(p1) standard library.

Candidates, in order: ``$WB_RUSTC`` (an explicit rustc), Debian's ``/usr/bin/rustc``
(``apt-get install rustc libstd-rust-dev-wasm32``: rustc 1.63, target ``wasm32-wasi``),
then ``rustc`` on ``PATH`` (a rustup toolchain qualifies once ``rustup target add
wasm32-wasip1`` has installed that target's std). The first with the std wins;
``cargo`` is taken from the same bin folder when present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wbcore_runtime.contract.drivers import Availability

TARGETS = ("wasm32-wasip1", "wasm32-wasi")
INSTALL_HINT = ("install one: apt-get install rustc libstd-rust-dev-wasm32 (Debian/Ubuntu), "
                "or rustup target add wasm32-wasip1")
DEFAULT_CRATES = Path("/usr/share/cargo/registry")


@dataclass(frozen=True, slots=True)
class Rust:
    rustc: Path  # the real binary (not a rustup proxy)
    cargo: Path | None
    sysroot: Path
    target: str
    version: str  # "rustc 1.63.0"

    @property
    def system(self) -> bool:
        """A toolchain under /usr, visible inside the sandbox through the system binds."""
        return self.sysroot == Path("/usr")


def _has_linker(sysroot: Path) -> bool:
    """rustc links wasm32 with ``rust-lld``: its own copy under the sysroot, or one on PATH
    (Debian's ``/usr/bin/rust-lld`` is a link to ``lld-14``, which may not be installed)."""
    own = list((sysroot / "lib" / "rustlib").glob("*/bin/rust-lld"))
    if any(p.exists() for p in own):
        return True
    found = shutil.which("rust-lld")
    return found is not None and os.path.exists(found)


def _probe(rustc: str) -> Rust | str:
    try:
        version = subprocess.run([rustc, "--version"], capture_output=True, text=True,
                                 timeout=20).stdout.strip()
        sysroot = subprocess.run([rustc, "--print", "sysroot"], capture_output=True, text=True,
                                 timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{rustc}: {exc}"
    if not version or not sysroot:
        return f"{rustc} did not answer --version / --print sysroot"
    root = Path(sysroot)
    if not _has_linker(root):
        return (f"{version} ({rustc}): its wasm linker rust-lld is missing (Debian: apt-get install lld-14, "
                "which /usr/bin/rust-lld points to)")
    for target in TARGETS:
        if (root / "lib" / "rustlib" / target / "lib").is_dir():
            real = root / "bin" / "rustc"
            cargo = root / "bin" / "cargo"
            return Rust(real if real.is_file() else Path(rustc), cargo if cargo.is_file() else None, root,
                        target, " ".join(version.split()[:2]))
    return f"{version} ({rustc}) has no wasm32-wasi/wasm32-wasip1 standard library"


@cache
def find() -> Rust | str:
    tried: list[str] = []
    cands = [os.environ.get("WB_RUSTC", ""), "/usr/bin/rustc", shutil.which("rustc") or ""]
    for cand in dict.fromkeys(c for c in cands if c):
        if not Path(cand).is_file():
            continue
        got = _probe(cand)
        if isinstance(got, Rust):
            return got
        tried.append(got)
    found = "; ".join(tried) if tried else "no rustc found"
    return f"{found}; {INSTALL_HINT}"


def check() -> Availability:
    """Whether a rustc with a wasm32-wasi std is here; the build sandbox is the runtime's to
    check (``BuildLane.needs_build_sandbox``)."""
    rust = find()
    if isinstance(rust, str):
        return Availability.no(rust)
    cargo = "cargo" if rust.cargo else "no cargo: single-file builds only"
    return Availability.yes(f"{rust.version} → {rust.target} ({cargo})")
