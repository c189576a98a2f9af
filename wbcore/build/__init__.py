"""The build pipeline: one path from ``#+BUILD_SRC`` to a stored artifact.

- :mod:`wbcore.build.request` — the request/response types lanes and source prefixes speak;
- :mod:`wbcore.build.cache` — the ONE build-cache key (:func:`~wbcore.build.cache.key`)
  and the source digest it covers (:func:`~wbcore.build.cache.tree_digest`);
- :mod:`wbcore.build.pipeline` — the stages resolve → lane → store, with progress events,
  used by ``wbx toolkit build`` (``wbcore.builder``), the BuildBroker and the built-ins.

The names plugins import from ``wbcore.build`` stay here. See docs/build.md.
"""

from __future__ import annotations

from wbcore.build.cache import tree_digest
from wbcore.build.request import (
    THIRD_PARTY_LANES,
    BuildFailed,
    BuildOutput,
    BuildRequest,
    ResolvedSource,
    SourceRequest,
    lane_for,
)

__all__ = [
    "THIRD_PARTY_LANES", "BuildFailed", "BuildOutput", "BuildRequest", "ResolvedSource", "SourceRequest",
    "lane_for", "tree_digest",
]
