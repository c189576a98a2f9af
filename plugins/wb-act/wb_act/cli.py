"""``wbx call <toolkit>.<tool> --args '<json>'``: exactly the call an MCP client makes.

Prints the text content to stdout (``--json``: the whole outcome as JSON). A failure
prints one ``wbx: <kind>: <message>`` line and exits with the kind's code; a command's
own non-zero exit code passes through.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from wbcore.errors import EXIT_CODES, ErrorKind, InvalidArgs


def _outcome_json(outcome: Any) -> dict[str, Any]:
    from wb_act.model import Content, Error, MetadataEvent

    events: list[dict[str, Any]] = []
    for ev in outcome.events:
        if isinstance(ev, Content):
            v = ev.part.value()
            if isinstance(v, bytes):
                import base64

                v = {"base64": base64.b64encode(v).decode()}
            events.append({"content": {"mime_type": ev.part.mime_type, "value": v}})
        elif isinstance(ev, MetadataEvent):
            events.append({"metadata": dict(ev.metadata)})
        elif isinstance(ev, Error):
            events.append({"error": {"kind": ev.error.kind_name, "message": ev.error.text}})
    return {"events": events, "structured": outcome.structured, "is_error": outcome.error is not None}


def build(runtime: Any) -> Any:
    def call(
        tool: str = typer.Argument(..., help="<toolkit>.<tool>; `wbx mcp tools` lists them."),
        args: str = typer.Option("{}", "--args", help="The arguments as a JSON object."),
        timeout: float = typer.Option(0.0, "--timeout", help="Shorten the deadline (seconds; 0 = the profile's)."),
        json_: bool = typer.Option(False, "--json", help="Print the whole outcome (events, structured value) as JSON."),
    ) -> None:
        """Call one tool with JSON arguments, exactly as the MCP server would."""
        from wb_act.provider import ToolkitProvider

        try:
            parsed = json.loads(args)
        except ValueError as exc:
            raise InvalidArgs(f"--args is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgs("--args must be a JSON object")
        provider = ToolkitProvider(runtime)
        provider.tool(tool)  # unknown tool: not-found, listing the known ones
        outcome = provider.call_json(tool, parsed, timeout=timeout or None)
        if json_:
            sys.stdout.write(json.dumps(_outcome_json(outcome), indent=2, ensure_ascii=False, default=str) + "\n")
        else:
            text = outcome.text()
            if text:
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
        err = outcome.error
        if err is None:
            return
        code = err.extensions.get("wb:exit-code")
        if isinstance(code, int) and code:
            raise typer.Exit(code)
        kind = ErrorKind(err.kind.value) if err.kind.value in {k.value for k in ErrorKind} else ErrorKind.INTERNAL
        print(f"wbx: {err.kind_name}: {err.text}", file=sys.stderr)
        raise typer.Exit(EXIT_CODES[kind])

    return call
