"""The compiler both lanes run: the ``zig`` binary of the PyPI ``ziglang`` package."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wbcore_runtime.contract.drivers import Availability

PACKAGE = "ziglang"


@dataclass(frozen=True, slots=True)
class Zig:
    root: Path  # the package folder: ``zig`` and ``lib/`` (bound read-only at /zig)
    version: str  # the ziglang distribution's version

    @property
    def binary(self) -> Path:
        return self.root / "zig"


@cache
def find() -> Zig | str:
    """The installed zig, or the reason there is none."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return f"the {PACKAGE} package is not installed (pip install 'ziglang>=0.17,<0.18')"
    root = Path(next(iter(spec.submodule_search_locations)))
    if not (root / "zig").is_file() or not (root / "lib").is_dir():
        return f"{root} has no zig binary and lib/ folder (a broken {PACKAGE} install?)"
    return Zig(root=root, version=importlib.metadata.version(PACKAGE))


def available() -> Availability:
    """Whether zig is installed; the build sandbox is the runtime's to check
    (``BuildLane.needs_build_sandbox``)."""
    zig = find()
    if isinstance(zig, str):
        return Availability.no(zig)
    return Availability.yes(f"zig {zig.version}")


# --- Debian's prebuilt WASI toolchain: clang + wasm-ld + compiler-rt + wasi-libc ---------
#
# With it the ``c`` lane's first build takes seconds: wasi-libc comes prebuilt (package
# ``wasi-libc``), where zig compiles it from source on first use (minutes). Setjmp/longjmp
# needs the new (exnref) wasm exception encoding wasmtime implements, which clang ≥ 20
# emits; Debian 12 ships clang-22 with its wasm32 builtins (bookworm-security).

#: Debian's multiarch home of wasi-libc (``apt-get install wasi-libc``).
WASI_INCLUDE = Path("/usr/include/wasm32-wasi")
WASI_LIB = Path("/usr/lib/wasm32-wasi")
MIN_CLANG = 20
APT = "apt-get install clang-22 lld-22 libclang-rt-22-dev-wasm32 wasi-libc"


@dataclass(frozen=True, slots=True)
class Clang:
    prefix: Path  # /usr/lib/llvm-<major>: bin/clang, bin/wasm-ld, lib/clang/<major>/lib/wasi
    major: int
    version: str  # "clang 22.1.8; wasi-libc 0.0~git20220510.9886d3d-2"

    @property
    def binary(self) -> Path:
        return self.prefix / "bin" / "clang"


def _deb_version(package: str) -> str:
    """The installed Debian version of ``package`` from dpkg's status file (no subprocess)."""
    try:
        text = Path("/var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return "?"
    for block in text.split("\n\n"):
        if f"Package: {package}\n" in block + "\n" and "Status: install ok installed" in block:
            for line in block.splitlines():
                if line.startswith("Version: "):
                    return line[9:].strip()
    return "?"


@cache
def find_clang() -> Clang | str:
    """The newest complete clang ≥ 20 WASI toolchain from Debian's packages, or what is missing."""
    if not (WASI_INCLUDE / "stdio.h").is_file() or not (WASI_LIB / "libc.a").is_file():
        return f"Debian's wasi-libc is not installed ({APT})"
    missing = f"no clang ≥ {MIN_CLANG} with wasm-ld and wasm32 compiler-rt ({APT})"
    majors = sorted((int(p.name[5:]) for p in Path("/usr/lib").glob("llvm-*") if p.name[5:].isdigit()),
                    reverse=True)
    for major in majors:
        prefix = Path(f"/usr/lib/llvm-{major}")
        if major < MIN_CLANG:
            if (prefix / "bin" / "clang").is_file():
                missing = (f"clang-{major} is too old for setjmp/longjmp on wasmtime "
                           f"(needs ≥ {MIN_CLANG}: {APT})")
            continue
        builtins = prefix / "lib" / "clang" / str(major) / "lib" / "wasi" / "libclang_rt.builtins-wasm32.a"
        if ((prefix / "bin" / "clang").is_file() and (prefix / "bin" / "wasm-ld").is_file()
                and builtins.is_file()):
            version = f"clang {_deb_version(f'clang-{major}')}; wasi-libc {_deb_version('wasi-libc')}"
            return Clang(prefix=prefix, major=major, version=version)
    return missing


def c_toolchain(env: dict[str, str] | None = None) -> Clang | Zig | str:
    """What the ``c`` lane compiles with: Debian's clang when complete, else zig cc.
    ``WB_C_TOOLCHAIN=zig`` (or ``clang``) forces one."""
    choice = (env or {}).get("WB_C_TOOLCHAIN", "")
    if choice not in ("", "zig", "clang"):
        return f"WB_C_TOOLCHAIN={choice!r}: use 'clang' or 'zig'"
    if choice != "zig":
        clang = find_clang()
        if isinstance(clang, Clang) or choice == "clang":
            return clang
    return find()


def c_available() -> Availability:
    """Which compiler the ``c`` lane uses, and why (``wbx lanes``)."""
    import os

    tc = c_toolchain(dict(os.environ))
    if isinstance(tc, Clang):
        return Availability.yes(f"{tc.version} (Debian's prebuilt WASI sysroot; first build in seconds)")
    if isinstance(tc, Zig):
        clang = find_clang()
        why = "WB_C_TOOLCHAIN=zig" if os.environ.get("WB_C_TOOLCHAIN") == "zig" else str(clang)
        return Availability.yes(f"zig {tc.version} cc, because {why}; its first build compiles wasi-libc "
                                "(minutes)")
    return Availability.no(tc)
