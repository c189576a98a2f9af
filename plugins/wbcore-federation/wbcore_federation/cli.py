"""``wbx fed query`` and ``wbx fed sync``."""

from __future__ import annotations

import csv
import io
import re
import time
from pathlib import Path
from typing import Any

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json


def _where(pairs: list[str]) -> dict[str, str]:
    from wbcore_runtime.contract.errors import InvalidArgs

    out: dict[str, str] = {}
    for p in pairs:
        field, sep, value = p.partition("=")
        if not sep or not field:
            raise InvalidArgs(f"--where {p!r}: write it as <field>=<value>")
        out[field] = value
    return out


def _params(pairs: list[str]) -> dict[str, str]:
    """``--param name=value`` (repeatable): the values of the source's ``{name}`` URL placeholders."""
    from wbcore_runtime.contract.errors import InvalidArgs

    out: dict[str, str] = {}
    for p in pairs:
        name, sep, value = p.partition("=")
        if not sep or not name:
            raise InvalidArgs(f"--param {p!r}: write it as <name>=<value> (e.g. --param package=httpx)")
        if name in out:
            raise InvalidArgs(f"--param {name} is given twice")
        out[name] = value
    return out


def _interval(text: str) -> float:
    from wbcore_runtime.contract.errors import InvalidArgs

    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$", text)
    seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)] if m else 0.0
    if not 1 <= seconds <= 7 * 24 * 3600:
        raise InvalidArgs(f"--every {text!r}: an interval of 1 s to 7 days (300, 30s, 5m, 1h)")
    return seconds


def fed_app(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("query")
    def query(
        toolkit: str = typer.Argument(..., help="The federation toolkit."),
        entity: str = typer.Argument(
            ..., help="The entity to read (a table), or a quoted SELECT … FROM <entity> … query."
        ),
        join: list[str] = typer.Option(
            [], "--join", help="Also read ENTITY and join it: <entity>:<base field>=<entity field>."
        ),
        where: list[str] = typer.Option(
            [], "--where", help="Keep rows whose <field>=<value> (pushed to the source where declared)."
        ),
        limit: int | None = typer.Option(None, "--limit", min=1, help="At most this many rows."),
        param: list[str] = typer.Option(
            [], "--param", help="Fill a {name} placeholder of the source's URL: <name>=<value>."
        ),
        csv_: bool = typer.Option(False, "--csv", help="Print CSV."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Read an entity (every page) from its source, optionally joined with others, or run a
        read-only SELECT over the entities it names."""
        from wbcore_federation import engine
        from wbcore_runtime.contract.errors import InvalidArgs

        if " " in entity.strip():
            if join or where or limit is not None:
                raise InvalidArgs(
                    "--join, --where and --limit go with an entity name; write them into the SELECT"
                )
            r = engine.sql(runtime, toolkit, entity, params=_params(param))
        else:
            r = engine.query(
                runtime, toolkit, entity, joins=join, where=_where(where), limit=limit, params=_params(param)
            )
        if json_:
            emit_json({"columns": list(r.columns), "rows": r.dicts()})
            return
        if csv_:
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(r.columns)
            w.writerows(r.rows)
            typer.echo(buf.getvalue(), nl=False)
            return
        cells = [list(r.columns)] + [["" if v is None else str(v) for v in row] for row in r.rows]
        widths = [min(40, max(len(c[i]) for c in cells)) for i in range(len(r.columns))]
        for row in cells:
            typer.echo("  ".join(v[:40].ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        typer.echo(f"({len(r.rows)} rows)")

    @app.command("sync")
    def sync(
        toolkit: str = typer.Argument(..., help="The federation toolkit."),
        out: Path | None = typer.Option(
            None, "--out", help="The Org file (default: the #+SYNC file in this folder)."
        ),
        entity: str | None = typer.Option(None, "--entity", help="The entity to mirror (default: #+SYNC's)."),
        every: str | None = typer.Option(
            None, "--every", help="Sync again every INTERVAL (300, 30s, 5m, 1h) until interrupted."
        ),
        times: int | None = typer.Option(
            None, "--times", min=1, help="With --every: stop after this many syncs."
        ),
        param: list[str] = typer.Option(
            [], "--param", help="Fill a {name} placeholder of the source's URL: <name>=<value>."
        ),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Mirror an entity into :task: nodes of an Org file (stable ids, updated in place)."""
        from wbcore_federation import engine

        target = None if out is None else (out if out.is_absolute() else Path(runtime.cwd) / out)
        interval = None if every is None else _interval(every)
        n = 0
        while True:
            s = engine.sync(runtime, toolkit, out=target, entity=entity, params=_params(param))
            n += 1
            if json_:
                emit_json({"path": str(s.path), "written": s.written, "added": s.added, "updated": s.updated,
                           "deleted": s.deleted, "unchanged": s.unchanged})
            else:
                typer.echo(
                    f"{'synced' if s.written else 'unchanged'} {s.path}: {s.added} added, {s.updated} "
                    f"updated, {s.deleted} marked deleted, {s.unchanged} unchanged"
                )
            if interval is None or (times is not None and n >= times):
                return
            time.sleep(interval)

    return app
