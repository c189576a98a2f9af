"""Entry point of wb-sources."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from wbcore import hookimpl
from wbcore.records import SourcePrefix


def _path(_runtime: Any) -> Any:
    from wb_sources.local import PathSource

    return PathSource()


@hookimpl
def wbcore_source_prefixes() -> Iterator[SourcePrefix]:
    yield SourcePrefix(name="path:", summary="a folder inside the toolkit", factory=_path)
    yield SourcePrefix(
        name="script:",
        summary="removed: native build scripts",
        refused="native build scripts were removed (wb-9ja); use path: with a BUILD_LANG lane",
    )
