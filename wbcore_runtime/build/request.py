"""The build seam's request types: what a source prefix hands a lane, and what a lane hands back.

A :class:`SourceRequest` goes to a ``SourcePrefix`` driver, which returns a
:class:`ResolvedSource` (a read-only source folder, or a prebuilt ``.wasm``). A
:class:`BuildRequest` goes to a ``BuildLane`` driver, which returns a
:class:`BuildOutput`. The cache key over all of it is :func:`wbcore_runtime.build.cache.key`;
the stages are :mod:`wbcore_runtime.build.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.toolkit.manifest import Manifest


@dataclass(frozen=True, slots=True)
class SourceRequest:
    manifest: Manifest
    rest: str  # the spec after its prefix
    workdir: Path  # a fresh folder the driver may write into
    home: Path


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    """Either ``dir`` (source to compile) or ``artifact`` (a prebuilt, checked module)."""

    digest: str
    dir: Path | None = None
    artifact: Path | None = None
    entry: str | None = None  # a sub-path inside ``dir`` the lane should build
    preopen: Path | None = None
    #: ``#+SHA256`` pinned the fetched bytes (an ``archive:`` bundle), already checked by the
    #: prefix: it then says nothing about the built or extracted module.
    sha256_pins_source: bool = False


@dataclass(frozen=True, slots=True)
class BuildRequest:
    manifest: Manifest
    source: ResolvedSource
    outdir: Path
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    #: Called with one line for each slow step a lane takes (a cache warm-up, a compile).
    progress: Callable[[str], None] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class BuildOutput:
    artifact: Path
    log: str = ""


class BuildFailed(InvalidArgs):
    """The compiler rejected the source. ``log`` is the compiler's own output (capped),
    shown to the person; ``str()`` is one line naming the lane and what failed."""

    def __init__(self, message: str, *, log: str = "") -> None:
        super().__init__(message)
        self.log = log


#: Lanes that build a ``#+BUILD_LANG`` for ``#+TRUST: third-party`` toolkits instead of the
#: lane of that name: C from outside is compiled by tcc inside wasm (zero native
#: execution) rather than by a native compiler in the build sandbox. Override per
#: language with ``WB_THIRD_PARTY_LANE_<LANG>`` (e.g. ``WB_THIRD_PARTY_LANE_C=c`` to use
#: the native lane, or ``=c-wasm``); an unavailable override falls back to the named lane.
THIRD_PARTY_LANES: dict[str, str] = {"c": "c-wasm"}


def lane_for(manifest: Manifest, lanes: Any, env: Mapping[str, str]) -> str | None:
    """The lane that builds ``manifest``: its ``#+BUILD_LANG``, unless the toolkit is
    third-party and a third-party lane for that language is set and available."""
    lang = manifest.build_lang
    if not lang or manifest.trust != "third-party":
        return lang
    key = "WB_THIRD_PARTY_LANE_" + "".join(ch if ch.isalnum() else "_" for ch in lang.upper())
    want = env.get(key) or THIRD_PARTY_LANES.get(lang)
    if not want or want == lang or want not in lanes:
        return lang
    return want if lanes.get(want).available().ok else lang
