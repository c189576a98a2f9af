"""``wbx plugins``, ``wbx shapes``, ``wbx lanes``, ``wbx tiers``: what is installed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json
from wbcore_runtime.plugins.manager import core_origin
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import NotFound

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.dispatch import resolve as resolution
else:  # imported on first use: keeps wbx start-up light (a command loads only what it uses)
    resolution = lazy.module("wbcore_runtime.dispatch.resolve")


def register(app: typer.Typer, runtime: RuntimeServices) -> None:
    @app.command("plugins")
    def plugins(json_: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """List plugins, their distributions, what they serve, and load failures."""
        runtime.collect_all()
        infos = runtime.plugin_infos
        universe = runtime.cap_universe

        def declared(info: Any) -> list[dict[str, Any]]:
            caps = (universe.plugin_caps.get(n) for n in info.serves.get("cap broker", ()))
            return [{"cap": c.name, "meaning": c.meaning,
                     "profiles": list(c.profiles)} for c in caps if c is not None]

        if json_:
            emit_json([{**i.as_dict(), "declared_caps": declared(i)} for i in infos])
            return

        typer.echo(f"core · {core_origin()}")
        if not infos:
            typer.echo("no plugins installed")
        for info in infos:
            state = "ok" if info.loaded else "FAILED"
            typer.echo(f"{info.name} · {info.origin} · {state}")
            for kind, names in sorted(info.serves.items()):
                typer.echo(f"  {kind}: {', '.join(names)}")
            for cap in declared(info):
                granted_by = (f"profiles {', '.join(cap['profiles'])}" if cap["profiles"]
                              else "an explicit grant only (wbx toolkit grant)")
                typer.echo(f"  new cap {cap['cap']}: {cap['meaning']}; granted by {granted_by}")
            if info.error:
                typer.echo(f"  error: {info.error}")
            for warning in info.warnings:
                typer.echo(f"  warning: {warning}")
        for problem in universe.problems:
            typer.echo(f"warning: {problem}")
        for reg in runtime.collect_all():
            for name, owners in reg.conflicts.items():
                typer.echo(f"conflict: {reg.what} {name!r} provided by "
                           f"{' and '.join(o.origin for o in owners)}")

    def _explain(ident: str, tier: str | None, json_: bool) -> None:
        names = []
        for kind in ("command", "kernel", "component"):
            for entry in runtime.registry.entries(kind):
                if entry.toolkit == ident or entry.name == ident:
                    names.append((kind, entry.name))
        if not names:
            raise NotFound(f"nothing registered for {ident!r}: build it first (wbx toolkit build {ident})")
        rows = []
        for kind, name in names:
            r = resolution.resolve(runtime, kind, name, tier=tier)
            rows.append({"kind": kind, "name": name, "toolkit": r.toolkit, "trust": r.trust,
                         "tier": r.tier.name, "why": r.tier.reason, "caps": sorted(r.caps),
                         "not_chosen": [{"tier": t, "why": w} for t, w in r.tier.considered]})
        if json_:
            emit_json(rows)
            return
        for row in rows:
            typer.echo(f"{row['kind']} {row['name']} (toolkit {row['toolkit'] or '-'}, {row['trust']}) → "
                       f"tier {row['tier']}")
            typer.echo(f"  why: {row['why']}")
            for nc in row["not_chosen"]:
                typer.echo(f"  not {nc['tier']}: {nc['why']}")

    def _table(rows: list[dict[str, Any]], json_: bool, line: str) -> None:
        if json_:
            emit_json(rows)
        else:
            for row in rows:
                typer.echo(line.format(**row))

    @app.command("shapes")
    def shapes(json_: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """List EXEC shapes and the plugin serving each."""
        reg = runtime.shapes
        rows = [{"name": s.name, "summary": s.summary, "tier": s.default_tier,
                 "plugin": reg.provider(s.name).origin} for s in reg]
        _table(rows, json_, "{name:12} {summary}  [{plugin}]")

    @app.command("lanes")
    def lanes(json_: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """List build lanes: what runs where, and whether each is available here."""
        reg = runtime.lanes
        rows = []
        for lane in reg:
            avail = lane.availability(runtime)
            rows.append({"name": lane.name, "kind": lane.kind, "where": lane.where, "available": avail.ok,
                         "reason": avail.reason,
                         # available lanes say with what too (the c lane: Debian's clang or zig, and why)
                         "state": (f"available: {avail.reason}" if avail.reason else "available") if avail.ok
                         else f"unavailable: {avail.reason}",
                         "plugin": reg.provider(lane.name).origin})
        _table(rows, json_, "{name:8} {state}\n         runs: {where}  [{plugin}]")

    @app.command("tiers")
    def tiers(
        explain: str | None = typer.Option(None, "--explain", metavar="ID|NAME",
                                           help="Say which tier a call of this toolkit (or registered name) "
                                                "would use, and why."),
        tier: str | None = typer.Option(None, "--tier", help="With --explain: the tier you would ask for."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """List isolation tiers, weakest first, with availability (or --explain a call's tier)."""
        if explain is not None:
            _explain(explain, tier, json_)
            return
        reg = runtime.tiers
        rows = []
        for t in sorted(reg, key=lambda t: t.rung):
            avail = t.available()
            rows.append({"name": t.name, "rung": t.rung, "summary": t.summary, "available": avail.ok,
                         "reason": avail.reason,
                         # an available tier says with what (the container's backend, the microvm's
                         # accelerator)
                         "state": (f"available: {avail.reason}" if avail.reason else "available") if avail.ok
                         else f"unavailable: {avail.reason}"})
        _table(rows, json_, "{rung} {name:10} {state}  ({summary})")
