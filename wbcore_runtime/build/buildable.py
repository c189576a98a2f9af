"""What ``wbx toolkit build`` would refuse before it fetches or compiles: one answer for
``build`` (which raises the first refusal) and ``verify`` (which prints each as ✗).

The questions, in the order a build meets them:

- ``#+BUILD_SRC``: a known, non-refused prefix, and what that prefix's own ``check``
  refuses without fetching (``wasm:``/``archive:`` without ``#+SHA256``, ``git+`` not
  pinned to a commit) — the same function its driver calls before it fetches;
- the lane, when the source is compiled: ``#+BUILD_LANG`` given, installed, and
  available on this machine (:func:`lane`, which the builder calls after resolving);
- ``#+BUILD_FLAGS``: each word inside the lane's allowlist (the lane's ``check_flags``,
  which its driver also calls).

Each refusal is the :class:`WbError` the build raises, message and fix included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wbcore_runtime.plugins import sources
from wbcore_runtime.build import lane_for
from wbcore_runtime.contract.errors import InvalidArgs, NotFound, WbError

if TYPE_CHECKING:
    from wbcore_runtime.toolkit.manifest import Manifest
    from wbcore_runtime.contract.records import BuildLane
    from wbcore_runtime.contract.host import RuntimeServices


class LaneUnavailable(NotFound):
    """The lane is installed but cannot run on this machine (its toolchain is missing)."""


def flags(manifest: Manifest) -> tuple[str, ...]:
    """``#+BUILD_FLAGS`` as the words handed to the lane."""
    return tuple((manifest.extra("BUILD_FLAGS") or "").split())


def compiles(manifest: Manifest, prefix: str) -> bool:
    """Whether the source goes through a lane. A fetched module (``wasm:``) and a bundle
    that carries its module (``archive:`` with ``#+WASM_PATH``, or without a
    ``#+BUILD_LANG``) are stored as they are (``wbcore_sources.remote``)."""
    if prefix == "wasm:":
        return False
    if prefix == "archive:":
        return bool(manifest.build_lang) and not manifest.wasm_path
    return True


def lane(runtime: RuntimeServices, manifest: Manifest, source_text: str | None = None) -> BuildLane:
    """The lane that compiles ``manifest`` here; raises what the build says when it cannot:
    no ``#+BUILD_LANG`` (invalid-args), not installed or not available (not-found)."""
    name = lane_for(manifest, runtime.lanes, runtime.env)  # third-party C → c-wasm
    if not name:
        raise InvalidArgs(f"{manifest.id}: BUILD_SRC {source_text or manifest.build_src} needs #+BUILD_LANG "
                          f"(lanes: {', '.join(runtime.lanes.names())})")
    record = runtime.lanes.get(name)  # unknown: lists the installed lanes and any plugin that failed to load
    avail = record.availability(runtime)
    if not avail.ok:
        raise LaneUnavailable(f"lane {name} is not available here: {avail.reason} "
                              "(wbx lanes shows each lane's state)")
    return record


def refusals(runtime: RuntimeServices, manifest: Manifest) -> list[WbError]:
    """Every refusal a build of ``manifest`` would meet before it fetches or compiles
    (empty: it would go ahead). A manifest without ``#+BUILD_SRC`` has none here."""
    if not manifest.build_src:
        return []
    try:
        spec = sources.parse(manifest.build_src, runtime.prefixes)
    except WbError as exc:
        return [exc]
    out: list[WbError] = []
    if spec.prefix.check is not None:
        try:
            spec.prefix.check(manifest, spec.rest)
        except WbError as exc:
            out.append(exc)
    if not compiles(manifest, spec.prefix.name):
        return out
    try:
        record = lane(runtime, manifest, spec.text)
    except WbError as exc:
        out.append(exc)
        return out
    if record.check_flags is not None:
        try:
            record.check_flags(flags(manifest))
        except WbError as exc:
            out.append(exc)
    return out


def check(runtime: RuntimeServices, manifest: Manifest) -> None:
    """Raise the first refusal (``wbcore_runtime.build.builder.build`` calls this before any work)."""
    found = refusals(runtime, manifest)
    if found:
        raise found[0]
