"""The reserved built-ins ``grep``, ``jq`` and ``wbox`` (seed 000): C source here, built
by the c lane through the core's build pipeline (``wbcore_runtime.build.pipeline``: the same
stages, cache key and progress as ``wbx toolkit build``).

``jq`` is upstream jq 1.8.2 (with oniguruma and decNumber), its sources fetched once from
a pinned registry package (:mod:`wbcore_lane_zig.builtins.jqsrc`); ``grep`` and ``wbox`` are
the ``.c`` files here.

``grep`` and ``jq`` use ``ARG_MODE stdin1``: the first stdin line is the argument (flags
and the pattern or filter), the rest is the input. ``wbox`` takes its script as argv and
runs every command through the ``commands`` cap and every redirection through ``vfs``
(``wb_dock.h``, the SDK header, comes from the core: the c lane puts it on the include path). See the header
comment of each ``.c`` file.
"""

from __future__ import annotations

import shutil
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Any

from wbcore_runtime.build import ResolvedSource, pipeline, tree_digest
from wbcore_runtime.toolkit.manifest import Manifest

NAMES = ("grep", "jq", "wbox")
#: What one built-in's source tree holds: exactly these files, staged apart from the
#: package folder (whose ``__pycache__`` is no source of the module).
SOURCES = ("{name}.c",)


def source_dir() -> Path:
    return Path(str(files(__package__)))


def manifest(name: str) -> Manifest:
    src = source_dir()
    return Manifest(path=src / "manifest.org", id=name, title=f"built-in {name}", version="1.0.0",
                    status="stable", tagline=f"the reserved built-in {name}", exec="command", cli_bin=name,
                    arg_mode="stdin1", build_lang="c")


def stage(name: str, into: Path) -> ResolvedSource:
    """Copy the built-in's source files into ``into`` and describe them as resolved source."""
    if name == "jq":
        from wbcore_lane_zig.builtins import jqsrc

        jqsrc.stage(into)
        return ResolvedSource(digest=tree_digest(into), dir=into, entry=None)
    into.mkdir(parents=True, exist_ok=True)
    for pattern in SOURCES:
        shutil.copyfile(source_dir() / pattern.format(name=name), into / pattern.format(name=name))
    return ResolvedSource(digest=tree_digest(into), dir=into, entry=f"{name}.c")


def flags(name: str) -> tuple[str, ...]:
    """The built-in's compiler flags (within the c lane's allowlist)."""
    if name == "jq":
        from wbcore_lane_zig.builtins import jqsrc

        return jqsrc.FLAGS
    return ()


def version(name: str) -> str:
    """The pipeline's cache key of the built-in: it changes whenever the module would."""
    from wbcore_lane_zig.lanes import lane_version
    from wbcore_lane_zig.plugin import OUTPUT_FIELDS
    from wbcore_lane_zig.toolchain import find

    zig = find()
    lane = lane_version(zig) if not isinstance(zig, str) else "none"
    if name == "jq":
        from wbcore_lane_zig.builtins import jqsrc

        if not jqsrc.fetched():
            return "c-jq-unfetched"  # build() fetches them (or says how)
        # no staging here: this runs whenever a runtime lists its built-ins
        return "c-" + pipeline.cache_key(
            lane="c", version=lane, output_fields=OUTPUT_FIELDS, manifest=manifest(name),
            source_digest=jqsrc.recipe_digest(), entry=None, flags=flags(name))[:16]
    with tempfile.TemporaryDirectory(prefix=f"wb-builtin-{name}-") as tmp:
        resolved = stage(name, Path(tmp) / "src")
        return "c-" + pipeline.cache_key(
            lane="c", version=lane, output_fields=OUTPUT_FIELDS,
            manifest=manifest(name), source_digest=resolved.digest, entry=resolved.entry,
            flags=flags(name))[:16]


def build(runtime: Any, name: str) -> bytes:
    """Compile the built-in with the c lane (in the build sandbox) and return the module."""
    if name == "wbox":
        # wbox composes the other built-ins through the commands cap, which runs only
        # registered names: register them along with it.
        from wbcore_runtime.store.registry import RESERVED

        runtime.install_builtins(sorted(RESERVED - {"wbox"}))
    if name == "jq":
        from wbcore_lane_zig.builtins import jqsrc
        from wbcore_runtime.contract.errors import InvalidArgs, WbError

        if jqsrc.sources() is None:
            try:
                jqsrc.fetch()
            except WbError as exc:
                raise InvalidArgs(f"built-in jq: {jqsrc.missing()} (fetching failed: "
                                  f"{exc.message})") from None
    with tempfile.TemporaryDirectory(prefix=f"wb-builtin-{name}-") as tmp:
        work = Path(tmp)
        resolved = stage(name, work / "src")
        done = pipeline.compile_source(runtime, "c", manifest(name), resolved, work=work,
                                       cache_dir=Path(runtime.home) / "build" / "cache", flags=flags(name))
        return runtime.artifacts.path(done.sha256).read_bytes()
