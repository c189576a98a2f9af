"""READ: entities materialized into an in-memory SQLite database, joined, filtered.

``wbx fed query <toolkit> <entity> [--join <entity>:<field>=<field>] [--where field=value]``
fetches the named entities (every page), loads each into a table named after it, and runs
one ``SELECT`` built from identifiers this module checked (no text from the command line
or the source is ever spliced into SQL: values are bound, names must be declared). Equality
filters on the base entity are also pushed down to the source as query parameters when
the entity declares them pushable (``:PUSHDOWN: state owner_id``), and always applied
again locally, so a source that ignores a parameter cannot widen the result.

Rows are returned as ordered dicts whose keys are ``<entity>.<field>``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wbcore_federation.spec import FIELD_RE, Entity, Source
from wbcore_runtime.errors import InvalidArgs

MAX_SQL = 16 << 10
MAX_RESULT_ROWS = 100_000
SQL_TIMEOUT_S = 30.0
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JOIN_RE = re.compile(r"^([a-z][a-z0-9_]{0,62}):([A-Za-z_][A-Za-z0-9_]{0,62})=([A-Za-z_][A-Za-z0-9_]{0,62})$")


@dataclass(frozen=True, slots=True)
class Join:
    entity: str
    local: str  # a field of the base entity
    remote: str  # a field of the joined entity

    @classmethod
    def parse(cls, text: str) -> Join:
        m = _JOIN_RE.match(text.strip())
        if not m:
            raise InvalidArgs(f"--join {text!r}: write it as <entity>:<base field>=<entity field> (users:owner_id=id)")
        return cls(m.group(1), m.group(2), m.group(3))


@dataclass(frozen=True, slots=True)
class Result:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def scalar(value: Any) -> Any:
    """A source value as SQLite stores it: scalars as they are, structures as canonical JSON."""
    if value is None or isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, bool):
        return int(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def columns_of(entity: Entity, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    if entity.fields:
        return list(entity.fields)
    seen: dict[str, None] = {}
    folded: set[str] = set()  # SQLite column names are case-insensitive: the first spelling wins
    for r in rows:
        for k in r:
            if isinstance(k, str) and FIELD_RE.match(k) and k.lower() not in folded:
                folded.add(k.lower())
                seen[k] = None
    if entity.key not in seen:
        seen = {entity.key: None, **seen}
    return list(seen)


def materialize(db: sqlite3.Connection, entity: Entity, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    cols = columns_of(entity, rows)
    db.execute(f'CREATE TABLE "{entity.name}" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)})')
    marks = ", ".join("?" for _ in cols)
    db.executemany(f'INSERT INTO "{entity.name}" VALUES ({marks})', ([scalar(r.get(c)) for c in cols] for r in rows))
    return cols


def run(connector: Any, source: Source, base: str, *, joins: Iterable[Join] = (),
        where: Mapping[str, str] | None = None, limit: int | None = None) -> Result:
    entity = source.entity(base)
    joins = list(joins)
    where = dict(where or {})
    for j in joins:
        source.entity(j.entity)
        if j.entity == base:
            raise InvalidArgs(f"--join {j.entity}: joining an entity to itself is not supported")
    pushed = {k: v for k, v in where.items() if k in entity.pushdown}
    db = sqlite3.connect(":memory:")
    try:
        cols: dict[str, list[str]] = {base: materialize(db, entity, connector.rows(entity, pushed))}
        for j in joins:
            if j.entity not in cols:
                e = source.entity(j.entity)
                cols[j.entity] = materialize(db, e, connector.rows(e))
        for j in joins:
            if j.local not in cols[base]:
                raise InvalidArgs(f"--join {j.entity}:{j.local}=…: {base} has no field {j.local!r} "
                                  f"(fields: {', '.join(cols[base])})")
            if j.remote not in cols[j.entity]:
                raise InvalidArgs(f"--join …={j.remote}: {j.entity} has no field {j.remote!r} "
                                  f"(fields: {', '.join(cols[j.entity])})")
        for k in where:
            if k not in cols[base]:
                raise InvalidArgs(f"--where {k}=…: {base} has no field {k!r} (fields: {', '.join(cols[base])})")
        shown = [(base, c) for c in cols[base]] + [(j.entity, c) for j in joins for c in cols[j.entity]]
        select = ", ".join(f'"{t}"."{c}"' for t, c in shown)
        sql = f'SELECT {select} FROM "{base}"'
        for j in joins:
            sql += f' LEFT JOIN "{j.entity}" ON "{base}"."{j.local}" = "{j.entity}"."{j.remote}"'
        args: list[Any] = []
        if where:
            sql += " WHERE " + " AND ".join(f'CAST("{base}"."{k}" AS TEXT) = ?' for k in where)
            args += list(where.values())
        sql += f' ORDER BY "{base}"."{entity.key}"'
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        rows = tuple(tuple(r) for r in db.execute(sql, args))
        return Result(tuple(f"{t}.{c}" for t, c in shown), rows)
    finally:
        db.close()


def _read_only(action: int, *_: Any) -> int:
    """The authorizer of SQL text: reading tables and calling functions, nothing else
    (no ATTACH, PRAGMA, writes, schema changes or temp objects)."""
    allowed = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
    recursive = getattr(sqlite3, "SQLITE_RECURSIVE", None)
    if recursive is not None:
        allowed.add(recursive)
    return sqlite3.SQLITE_OK if action in allowed else sqlite3.SQLITE_DENY


def run_sql(connector: Any, source: Source, sql: str) -> Result:
    """``SELECT …`` over the entities the text names (each fetched, every page, into a table).

    Read-only by an authorizer, one statement, bounded in text, time and rows."""
    import time

    text = sql.strip().rstrip(";").strip()
    if not text or len(text) > MAX_SQL:
        raise InvalidArgs(f"the query must be 1..{MAX_SQL} characters of SQL")
    if not re.match(r"(?is)^(select|with)\b", text):
        raise InvalidArgs("only a SELECT (or WITH … SELECT) query reads federated tables")
    words = {w.lower() for w in _WORD_RE.findall(text)}
    names = [e.name for e in source.entities if e.name in words]
    if not names:
        known = ", ".join(e.name for e in source.entities)
        raise InvalidArgs(f"the query names no entity of {source.toolkit} (entities: {known})")
    db = sqlite3.connect(":memory:")
    try:
        for name in names:
            e = source.entity(name)
            materialize(db, e, connector.rows(e))
        db.execute("PRAGMA query_only = ON")
        db.set_authorizer(_read_only)
        deadline = time.monotonic() + SQL_TIMEOUT_S
        db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cur = db.execute(text)
            rows = cur.fetchmany(MAX_RESULT_ROWS + 1)
        except sqlite3.Warning:
            raise InvalidArgs("one statement at a time: the query holds more than one") from None
        except sqlite3.DatabaseError as exc:
            why = "took longer than " + f"{SQL_TIMEOUT_S:g}s" if "interrupted" in str(exc) else str(exc)
            raise InvalidArgs(f"the query failed: {why}") from None
        if len(rows) > MAX_RESULT_ROWS:
            raise InvalidArgs(f"the query returns more than {MAX_RESULT_ROWS} rows; add a LIMIT or a WHERE")
        cols = tuple(d[0] for d in cur.description or ())
        return Result(cols, tuple(tuple(r) for r in rows))
    finally:
        db.close()
