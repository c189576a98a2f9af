"""The Python API of federation: open a toolkit's source, query its entities, sync one.

    from wbcore_federation import engine
    result = engine.query(runtime, "tracker", "issues", joins=["users:owner_id=id"])
    synced = engine.sync(runtime, "tracker", out=Path("tracker.org"))

The toolkit must be a verified federation toolkit whose effective caps (profile ∩ #+CAPS ∩
grants, ``Runtime.effective_caps``) include ``net`` — and ``secrets`` when it signs with a
broker-held key. A third-party toolkit whose signature fails gets no caps, so no request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from wbcore_federation import query as _query
from wbcore_federation import spec as _spec
from wbcore_federation import sync as _sync
from wbcore_federation.source import Connector
from wbcore_runtime.contract.errors import InvalidArgs


def source_of(toolkit: Any) -> _spec.Source:
    m = toolkit.manifest
    if m.exec != "federation":
        raise InvalidArgs(f"{m.id} is not a federation toolkit (#+EXEC: {m.exec or 'none'}); "
                          "federation toolkits declare #+EXEC: federation")
    text = m.path.read_text(encoding="utf-8")
    return _spec.load(m.id, m.path, dict(m.keywords), dict(m.lines), text)


class RowSource(Protocol):
    """What a connector gives READ and SYNC: every row of an entity (``params``: filters the
    entity declared ``:PUSHDOWN:``; a connector may ignore them, they are applied again)."""

    def rows(self, entity: _spec.Entity, params: Mapping[str, str] | None = None) -> list[dict[str, Any]]: ...


class HttpJson:
    """The ``http-json`` connector kind: :class:`wbcore_federation.source.Connector`."""

    def connect(self, runtime: Any, source: _spec.Source, *, caps: frozenset[str], tenant: str,
                params: Mapping[str, str] | None = None) -> RowSource:
        return Connector(runtime, source, caps=caps, tenant=tenant, url_params=params)


def connect(runtime: Any, toolkit_id: str, *, tenant: str = "default",
            params: Mapping[str, str] | None = None) -> tuple[_spec.Source, RowSource]:
    """The toolkit's source and a connection from the connector its ``#+SOURCE`` names
    (a ``wbcore_federation_sources`` registration), under the toolkit's effective caps.
    ``params`` fill the source's ``{name}`` URL placeholders (``--param name=value``)."""
    tk = runtime.toolkit(toolkit_id)
    src = source_of(tk)
    caps = frozenset(runtime.effective_caps(tk))
    kind = runtime.federation_sources.get(src.kind).factory(runtime)
    if params or src.params:
        return src, kind.connect(runtime, src, caps=caps, tenant=tenant, params=dict(params or {}))
    return src, kind.connect(runtime, src, caps=caps, tenant=tenant)  # a connector that takes no params


def query(runtime: Any, toolkit_id: str, entity: str, *, joins: Iterable[str] = (),
          where: Mapping[str, str] | None = None, limit: int | None = None, tenant: str = "default",
          params: Mapping[str, str] | None = None) -> _query.Result:
    src, conn = connect(runtime, toolkit_id, tenant=tenant, params=params)
    return _query.run(
        conn, src, entity, joins=[_query.Join.parse(j) for j in joins], where=where, limit=limit
    )


def sql(runtime: Any, toolkit_id: str, text: str, *, tenant: str = "default",
        params: Mapping[str, str] | None = None) -> _query.Result:
    src, conn = connect(runtime, toolkit_id, tenant=tenant, params=params)
    return _query.run_sql(conn, src, text)


def sync(runtime: Any, toolkit_id: str, *, out: Path | None = None, entity: str | None = None,
         tenant: str = "default", params: Mapping[str, str] | None = None) -> _sync.Synced:
    src, conn = connect(runtime, toolkit_id, tenant=tenant, params=params)
    name = entity or src.sync_entity
    if name is None:
        raise InvalidArgs(f"{toolkit_id} declares no #+SYNC: <entity> <file>.org; pass --entity and --out")
    target = out
    if target is None:
        if src.sync_file is None:
            raise InvalidArgs(f"{toolkit_id}: no #+SYNC file is declared; pass --out FILE.org")
        target = Path(runtime.cwd) / src.sync_file
    e = src.entity(name)
    return _sync.sync(target, toolkit=toolkit_id, entity=e, rows=conn.rows(e))
