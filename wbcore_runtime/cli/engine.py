"""The engine's client commands: ``wbx toolkit push`` and ``wbx agent run --engine``.

Both speak HTTP to ``wbx engine serve`` (the wbcore-engine plugin) through
:mod:`wbcore_runtime.cli.engine_client`; neither needs that plugin installed on this side.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from wbcore_runtime.cli.output import JSON_HELP, emit_json
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.cli.build import build_line

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices

TOKEN_HELP = "The engine's bearer token (else $WB_ENGINE_TOKEN)."


def register_push(app: typer.Typer, runtime: RuntimeServices) -> None:
    @app.command("push")
    def push(
        ident: str = typer.Argument(..., metavar="ID", help="A toolkit id on this machine's search path."),
        engine: str = typer.Argument(..., metavar="ENGINE_URL", help="e.g. http://127.0.0.1:8766"),
        dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff of caps, trust and signer; land nothing."),
        force: bool = typer.Option(False, "--force", help="Replace the toolkit if the engine has it installed."),
        first_party: bool = typer.Option(False, "--first-party",
                                         help="Vouch for a first-party toolkit (it gets its profile's caps there)."),
        no_build: bool = typer.Option(False, "--no-build", help="Land it only; build later (POST /v1/toolkits/ID/build)."),
        token: str = typer.Option(None, "--token", envvar="WB_ENGINE_TOKEN", show_envvar=True, help=TOKEN_HELP),
        json_: bool = typer.Option(False, "--json", help=JSON_HELP),
    ) -> None:
        """Ship a toolkit onto a running engine: verified there, then landed (all or nothing),
        then built in the engine's own build sandbox so its commands answer at once."""
        from wbcore_runtime.cli import engine_client  # deferred: keeps wbx start-up light

        tk = runtime.toolkit(ident)
        archive = engine_client.toolkit_archive(Path(tk.dir), tk.id)
        answer = engine_client.push(engine, archive, name=f"{tk.id}.tar.gz", token=token or None, dry_run=dry_run,
                                    force=force, first_party=first_party, build=not no_build)
        if json_:
            emit_json(answer)
            return
        if answer.get("dry_run"):
            for change in answer.get("changes", []):
                for line in change.get("diff", []):
                    typer.echo(line)
            typer.echo("(dry run: nothing landed)")
            return
        for item in answer.get("installed", []):
            verb = "unchanged" if item.get("unchanged") else "installed"
            signer = f", signed by {item['signer']}" if item.get("signer") else ""
            typer.echo(f"{verb} {item['id']} {item['version']} on {engine} ({item['trust']}{signer}); "
                       f"requests caps: {' '.join(item.get('caps', [])) or 'none'}")
        rows = answer.get("builds", [])
        for row in rows:
            typer.echo(f"  build on the engine: {build_line(row)}")
        if any(row.get("state") == "failed" for row in rows):
            raise typer.Exit(1)


def run_on_engine(engine: str, agent: str, task: str, *, token: str | None, options: dict[str, Any],
                  follow: bool = True, json_: bool = False) -> int:
    """``POST /v1/sessions`` then follow its SSE events; exit 0 when the run ends done."""
    from wbcore_runtime.cli import engine_client  # deferred: keeps wbx start-up light

    doc: dict[str, Any] = {"task": task, "options": options}
    path = Path(agent)
    if agent.endswith(".org") or path.is_file():
        try:
            doc["agent_org"] = path.read_text(encoding="utf-8")  # the engine never reads our paths
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgs(f"{agent}: cannot read the agent definition ({exc})") from None
    else:
        doc["agent"] = agent
    created = engine_client.call(engine, "/v1/sessions", token=token, method="POST",
                                 body=json.dumps(doc).encode(), content_type="application/json")
    sid = created["id"]
    print(f"session {sid} on {engine}", file=sys.stderr, flush=True)
    if not follow:
        emit_json(created) if json_ else typer.echo(sid)
        return 0
    final: dict[str, Any] = {}
    for event, data in engine_client.events(engine, f"/v1/sessions/{sid}/events", token=token):
        # an agent loop's event is {"seq", "type", "data", "t"}; the engine's own end is the status
        payload = data.get("data", data) if isinstance(data, dict) else data
        if json_:
            emit_json({"event": event, "data": data})
        elif event == "text" and isinstance(payload, str):
            sys.stdout.write(payload)
            sys.stdout.flush()
        elif event not in ("ready", "end"):
            typer.echo(f"[{data.get('seq', '')}] {event}: {_brief(payload)}")
        if event == "end":
            final = payload if isinstance(payload, dict) else {}
    status = final.get("status", "unknown")
    if not json_:
        typer.echo(f"session {sid}: {status}")
    return 0 if status == "done" else 1


def _brief(payload: Any, limit: int = 200) -> str:
    if isinstance(payload, str):
        text = payload
    elif isinstance(payload, dict):
        text = str(payload.get("summary") or payload.get("text") or json.dumps(payload, default=str))
    else:
        text = json.dumps(payload, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
