"""The reserved built-ins ``grep``, ``jq`` and ``wbox`` (seed 000): C source here, built
by the c lane.

``grep`` and ``jq`` use ``ARG_MODE stdin1``: the first stdin line is the argument (flags
and the pattern or filter), the rest is the input. ``wbox`` takes its script as argv and
runs every command through the ``commands`` cap and every redirection through ``vfs``
(``wb_dock.h`` is the SDK header, vendored). See the header comment of each ``.c`` file.
"""

from __future__ import annotations

import hashlib
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

NAMES = ("grep", "jq", "wbox")


def source_dir() -> Path:
    return Path(str(files(__package__)))


def version(name: str) -> str:
    from wb_lane_zig.cache import RECIPE
    from wb_lane_zig.toolchain import find

    zig = find()
    text = (source_dir() / f"{name}.c").read_bytes() + (source_dir() / "wb_dock.h").read_bytes()
    zv = zig.version if not isinstance(zig, str) else "none"
    return "c-" + hashlib.sha256(text + RECIPE.encode() + zv.encode()).hexdigest()[:16]


def build(runtime: Any, name: str) -> bytes:
    """Compile ``<name>.c`` with the c lane (in the build sandbox) and return the module."""
    from wbcore.build import BuildRequest, ResolvedSource, tree_digest
    from wbcore.manifest import Manifest

    from wb_lane_zig.lanes import CLane

    if name == "wbox":
        # wbox composes the other built-ins through the commands cap, which runs only
        # registered names: register them along with it.
        from wbcore.registry import RESERVED

        runtime.install_builtins(sorted(RESERVED - {"wbox"}))
    src = source_dir()
    manifest = Manifest(path=src / "manifest.org", id=name, title=f"built-in {name}", version="1.0.0",
                        status="stable", tagline=f"the reserved built-in {name}", exec="command", cli_bin=name,
                        arg_mode="stdin1", build_lang="c")
    with tempfile.TemporaryDirectory(prefix=f"wb-builtin-{name}-") as tmp:
        req = BuildRequest(manifest=manifest, source=ResolvedSource(digest=tree_digest(src), dir=src, entry=f"{name}.c"),
                           outdir=Path(tmp) / "out")
        return CLane.for_runtime(runtime).build(req).artifact.read_bytes()
