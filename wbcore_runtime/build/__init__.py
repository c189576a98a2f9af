"""The build pipeline: one path from ``#+BUILD_SRC`` to a stored artifact.

- :mod:`wbcore_runtime.build.request` — the request/response types lanes and source prefixes speak;
- :mod:`wbcore_runtime.build.cache` — the ONE build-cache key (:func:`~wbcore_runtime.build.cache.key`)
  and the source digest it covers (:func:`~wbcore_runtime.build.cache.tree_digest`);
- :mod:`wbcore_runtime.build.pipeline` — the stages resolve → lane → store, with progress events,
  used by ``wbx toolkit build`` (``wbcore_runtime.build.builder``), the BuildBroker and the built-ins.

The names plugins import from ``wbcore_runtime.build`` stay here. See docs/build.md.
"""

from __future__ import annotations

from wbcore_runtime.build.cache import tree_digest
from wbcore_runtime.build.request import (
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
