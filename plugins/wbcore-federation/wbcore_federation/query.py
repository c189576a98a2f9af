"""READ: entities materialized into an in-memory SQLite database, joined, filtered.

``wbx fed query <toolkit> <entity> [--join <entity>:<field>=<field>] [--where field=value]``
fetches the named entities (every page), loads each into a table named after it, and runs
one ``SELECT`` built from identifiers this module checked (no text from the command line
or the source is ever spliced into SQL: values are bound, names must be declared). Equality
filters on the base entity are also pushed down to the source as query parameters when
the entity declares them pushable (``:PUSHDOWN: state owner_id``), and always applied
again locally, so a source that ignores a parameter cannot widen the result.

Rows are returned as ordered dicts whose keys are ``<entity>.<field>``.

Memory is bounded while the tables fill: rows go into SQLite a page at a time as the
connector streams them (a field first seen on a later page adds a column), every value is
capped (:data:`MAX_VALUE_BYTES`, refused with the entity, row and field), and the
database as a whole is capped (:data:`MAX_DB_BYTES`, SQLite's ``max_page_count``).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wbcore_federation.spec import FIELD_RE, Entity, Source
from wbcore_runtime.contract.errors import InvalidArgs

MAX_SQL = 16 << 10
MAX_RESULT_ROWS = 100_000
SQL_TIMEOUT_S = 30.0
#: One value as stored (a string's UTF-8 bytes, a structure's canonical JSON).
MAX_VALUE_BYTES = 1 << 20
#: Every table of one query together (the in-memory database's pages).
MAX_DB_BYTES = 512 << 20
_INSERT_BATCH = 1000
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
            raise InvalidArgs(
                f"--join {text!r}: write it as <entity>:<base field>=<entity field> (users:owner_id=id)"
            )
        return cls(m.group(1), m.group(2), m.group(3))


@dataclass(frozen=True, slots=True)
class Result:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self.rows]


def scalar(value: Any, where: str = "a field") -> Any:
    """A source value as SQLite stores it: scalars as they are, structures as canonical JSON;
    one over :data:`MAX_VALUE_BYTES` is refused (``where`` names it)."""
    if isinstance(value, bool):
        return int(value)
    if value is None or isinstance(value, (int, float)):
        return value
    out = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    # a str's UTF-8 size is at most 4 bytes a character: encode only the ones that may be over
    if len(out) * 4 > MAX_VALUE_BYTES and len(out.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
        raise InvalidArgs(
            f"{where}: a value of {len(out.encode('utf-8', 'surrogatepass'))} bytes exceeds the "
            f"{MAX_VALUE_BYTES}-byte cap per value; leave the field out (:FIELDS:) or narrow the query"
        )
    return out


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


def open_db() -> sqlite3.Connection:
    """An in-memory database capped at :data:`MAX_DB_BYTES` (past it a write fails: SQLITE_FULL)."""
    db = sqlite3.connect(":memory:")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {MAX_DB_BYTES // page}")
    return db


def stream_rows(connector: Any, entity: Entity,
                params: Mapping[str, str] | None = None) -> Iterable[Sequence[Mapping[str, Any]]]:
    """The entity's rows in batches as the connector reads them: a page at a time when it
    can (``row_pages``), else its whole list in slices."""
    each = getattr(connector, "row_pages", None)
    if callable(each):
        return each(entity, params)
    rows = connector.rows(entity, params) if params else connector.rows(entity)
    return (rows[i:i + _INSERT_BATCH] for i in range(0, len(rows), _INSERT_BATCH))


def materialize(
    db: sqlite3.Connection, entity: Entity, batches: Iterable[Sequence[Mapping[str, Any]]]
) -> list[str]:
    """Load the rows into a table named after the entity, a batch (page) at a time: nothing
    holds every row; the columns are the declared fields, else each field as it first appears."""
    it: Iterator[Sequence[Mapping[str, Any]]] = iter(batches)
    cols: list[str] = list(entity.fields) if entity.fields else []
    folded = {c.lower() for c in cols}
    created = False
    n = 0
    try:
        while True:
            got = next(it, None)
            batch = list(got or ())
            if not entity.fields:
                new = columns_of(entity, batch) if not created else [
                    c for c in columns_of(entity, batch) if c.lower() not in folded]
                for c in new if created else []:
                    db.execute(f'ALTER TABLE "{entity.name}" ADD COLUMN "{c}"')  # checked by FIELD_RE
                cols += [c for c in new if c.lower() not in folded]
                folded |= {c.lower() for c in new}
            if not created:
                db.execute(
                    f'CREATE TABLE "{entity.name}" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in cols)})'
                )
                created = True
            if got is None:
                return cols
            marks = ", ".join("?" for _ in cols)
            db.executemany(f'INSERT INTO "{entity.name}" VALUES ({marks})',
                           ([scalar(r.get(c), f"{entity.name} row {n + i + 1} field {c!r}") for c in cols]
                            for i, r in enumerate(batch)))
            n += len(batch)
    except sqlite3.OperationalError as exc:
        if "full" in str(exc):
            raise InvalidArgs(
                f"{entity.name}: the query's tables exceed {MAX_DB_BYTES >> 20} MiB after {n} rows; "
                "narrow it (--where, fewer joins)"
            ) from None
        raise


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
    db = open_db()
    try:
        cols: dict[str, list[str]] = {base: materialize(db, entity, stream_rows(connector, entity, pushed))}
        for j in joins:
            if j.entity not in cols:
                e = source.entity(j.entity)
                cols[j.entity] = materialize(db, e, stream_rows(connector, e))
        for j in joins:
            if j.local not in cols[base]:
                raise InvalidArgs(f"--join {j.entity}:{j.local}=…: {base} has no field {j.local!r} "
                                  f"(fields: {', '.join(cols[base])})")
            if j.remote not in cols[j.entity]:
                raise InvalidArgs(f"--join …={j.remote}: {j.entity} has no field {j.remote!r} "
                                  f"(fields: {', '.join(cols[j.entity])})")
        for k in where:
            if k not in cols[base]:
                raise InvalidArgs(
                    f"--where {k}=…: {base} has no field {k!r} (fields: {', '.join(cols[base])})"
                )
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
    db = open_db()
    try:
        for name in names:
            e = source.entity(name)
            materialize(db, e, stream_rows(connector, e))
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
