"""The compiler both lanes run: the ``zig`` binary of the PyPI ``ziglang`` package."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from wbcore.records import Availability

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
