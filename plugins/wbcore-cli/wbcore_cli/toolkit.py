"""``wbx toolkit``: list, show, search and verify (seed 000 "The wbx toolkit CLI")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from wbcore_runtime.contract.cli_output import JSON_HELP, emit_json, warn
from wbcore_runtime.contract import lazy
from wbcore_runtime.toolkit import roots as _roots
from wbcore_runtime.trust import verdict as _trust

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_cli import toolkit_verbs
    from wbcore_runtime.toolkit import search as _search
    from wbcore_runtime.trust import consent
else:  # imported on first use: wbx toolkit list/show/search/verify load only their own
    toolkit_verbs = lazy.Module("wbcore_cli.toolkit_verbs")
    _search = lazy.module("wbcore_runtime.toolkit.search")
    consent = lazy.module("wbcore_runtime.trust.consent")


def searched_roots(runtime: RuntimeServices) -> list[Path]:
    """Every folder discovery looked in, existing or not."""
    pinned = runtime.pinned_roots  # an embedder's explicit roots are the whole search path
    return list(pinned) if pinned is not None else _roots.candidates(runtime.env, runtime.cwd, runtime.home)


def searched_hint(runtime: RuntimeServices) -> str:
    """No toolkit found: which folders were searched and how to add one."""
    return _roots.not_found_hint(searched_roots(runtime))


#: The subcommands defined in this module; the others come from cli/toolkit_verbs.py.
OWN_COMMANDS = frozenset({"list", "show", "search", "verify"})


def build(runtime: RuntimeServices, only: str | None = None) -> typer.Typer:
    """The ``wbx toolkit`` group. ``only``: the subcommand about to run; when it is one of
    :data:`OWN_COMMANDS`, cli/toolkit_verbs.py (with provenance, build and push) is not imported."""
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("list")
    def list_(json_: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """List discoverable toolkits (id · status · tagline)."""
        found = runtime.discover()
        if json_:
            emit_json(
                {
                    "roots": [str(r) for r in found.roots],
                    "searched": [str(r) for r in searched_roots(runtime)],
                    "toolkits": [
                        {"id": t.id, "status": t.manifest.status, "exec": t.manifest.exec,
                         "tagline": t.manifest.tagline, "path": str(t.dir),
                         "unavailable": _trust.unavailable_reason(t, runtime)}
                        for t in found.toolkits.values()
                    ],
                    "errors": [{"path": str(e.path), "line": e.line, "field": e.field,
                                "problem": e.problem} for e in found.errors],
                }
            )
            return
        for tk in found.toolkits.values():
            why = _trust.unavailable_reason(tk, runtime)
            typer.echo(f"{tk.id} · {tk.manifest.status} · {tk.manifest.tagline}"
                       + (f" · unavailable: {why}" if why else ""))
        for err in found.errors:
            warn(str(err))
        if not found.toolkits and not found.errors:
            warn(searched_hint(runtime))

    @app.command("show")
    def show(
        ident: str = typer.Argument(..., metavar="ID"),
        skill: Optional[str] = typer.Argument(None, metavar="[SKILL]"),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Show a manifest and its skill index, or one skill's recipe."""
        tk = runtime.toolkit(ident)
        if skill is not None:
            text = tk.skill_text(skill)
            if json_:
                emit_json({"toolkit": tk.id, "skill": skill.removesuffix(".org"), "text": text})
            else:
                typer.echo(text.rstrip("\n"))
            return

        if json_:
            emit_json({**tk.as_dict(),
                       "consent": consent.describe(runtime.home, tk,
                                                   runtime.caps_universe_for(tk.manifest.caps))})
            return
        m = tk.manifest
        typer.echo(f"{m.title} ({m.id} {m.version}, {m.status})")
        typer.echo(f"  {m.tagline}")
        rows = [
            ("exec", m.exec or "none (discovery-only)"), ("cli", m.cli_bin), ("trust", m.trust),
            ("caps", " ".join(m.caps) or "none"),
            ("build", " ".join(x for x in (m.build_lang, m.build_src) if x) or None),
            ("arg mode", m.arg_mode if m.exec == "command" else None), ("sha256", m.sha256),
            ("author", m.author_did), ("format", m.format), ("path", str(m.path)),
        ]
        rows[4:4] = consent.show_rows(runtime.home, tk, runtime.caps_universe_for(m.caps))
        for key, value in rows:
            if value:
                typer.echo(f"  {key + ':':10} {value}")
        if tk.skills:
            typer.echo("skills (read one with: wbx toolkit show %s <skill>):" % m.id)
            for s in tk.skills:
                typer.echo(f"  {s.slug:18} {s.summary}")
        elif m.sections:
            typer.echo("sections:")
            for heading, _body in m.sections:
                typer.echo(f"  {heading}")
        for problem in tk.skill_problems:
            warn(str(problem))

    @app.command("search")
    def search(
        query: str = typer.Argument(..., metavar="QUERY"),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Substring match across toolkits and their skills."""
        found = runtime.discover()
        hits = _search.search(found, query)
        for problem in _search.problems(found):
            warn(str(problem))
        if json_:
            emit_json([h.as_dict() for h in hits])
            return
        for h in hits:
            where = f"{h.toolkit}/{h.skill}" if h.skill else h.toolkit
            typer.echo(f"{where} · {h.field} · {h.snippet}")
        if not hits:
            raise typer.Exit(1)

    @app.command("verify")
    def verify(
        ident: Optional[str] = typer.Argument(None, metavar="ID"),
        all_: bool = typer.Option(False, "--all", help="Verify every discovered toolkit."),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Structural + exec contract + cap + trust checks. Exit 0 when all pass."""
        if ident is None and not all_:
            raise typer.BadParameter("give a toolkit ID or --all")
        if all_:
            found = runtime.discover()
            idents = list(found.toolkits) + [e.path.parent.name for e in found.errors]
        else:
            idents = [ident]  # type: ignore[list-item]
        reports = [runtime.verify(i) for i in idents]
        if json_:
            emit_json(reports[0].as_dict() if not all_ else [r.as_dict() for r in reports])
        else:
            for r in reports:
                if all_:
                    typer.echo(f"{r.toolkit}:")
                typer.echo(r.render())
        if not all(r.ok for r in reports):
            raise typer.Exit(1)

    if only in OWN_COMMANDS:
        return app

    toolkit_verbs.register(app, runtime)
    return app
