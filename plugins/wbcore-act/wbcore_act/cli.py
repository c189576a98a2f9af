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

from wbcore_runtime.contract.errors import EXIT_CODES, ErrorKind, InvalidArgs


def _outcome_json(outcome: Any) -> dict[str, Any]:
    from wbcore_runtime.contract.tools import Content, Error, MetadataEvent

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
        timeout: float = typer.Option(0.0, "--timeout",
                                      help="Shorten the deadline (seconds; 0 = the profile's)."),
        json_: bool = typer.Option(False, "--json",
                                   help="Print the whole outcome (events, structured value) as JSON."),
    ) -> None:
        """Call one tool with JSON arguments, exactly as the MCP server would."""
        from wbcore_act.provider import ToolkitProvider

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
            sys.stdout.write(json.dumps(_outcome_json(outcome), indent=2, ensure_ascii=False,
                                        default=str) + "\n")
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
        kind = (ErrorKind(err.kind.value) if err.kind.value in {k.value for k in ErrorKind}
                else ErrorKind.INTERNAL)
        print(f"wbx: {err.kind_name}: {err.text}", file=sys.stderr)
        raise typer.Exit(EXIT_CODES[kind])

    return call


def _content_json(data: bytes, mime: Any) -> Any:
    """A content part's ``data`` as its MIME type says: text as a string, CBOR decoded as
    ``{"cbor": value}``, anything else as ``{"hex": …}``. (Guessing CBOR first showed text like
    "2…" as ``{"cbor": -19}``: a text byte is a valid CBOR integer.)"""
    kind = str(mime or "application/cbor").split(";", 1)[0].strip().lower()
    if (kind.startswith("text/") or kind in ("application/json", "application/xml")
            or kind.endswith(("+json", "+xml"))):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return {"hex": data.hex()}
    if kind == "application/cbor":
        return _wire_json(data)
    return {"hex": data.hex()}


def _wire_json(value: Any) -> Any:
    """Wire values as JSON: a content part's data by its MIME type (:func:`_content_json`),
    other CBOR byte strings decoded and shown as {"cbor": value}."""
    if isinstance(value, dict) and isinstance(value.get("data"), (bytes, bytearray)) and "mime-type" in value:
        return {str(k): (_content_json(bytes(v), value.get("mime-type")) if k == "data" else _wire_json(v))
                for k, v in value.items()}
    if isinstance(value, (bytes, bytearray)):
        from wbcore_runtime.contract import cbor

        try:
            return {"cbor": _wire_json(cbor.loads(bytes(value)))}
        except Exception:  # noqa: BLE001 - opaque bytes are shown as hex
            return {"hex": bytes(value).hex()}
    if isinstance(value, dict):
        return {str(k): _wire_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wire_json(v) for v in value]
    return value


def _json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise InvalidArgs(f"{flag} is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgs(f"{flag} must be a JSON object")
    return parsed


def build_act(runtime: Any) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)

    @app.command("tools")
    def tools(
        revision: str = typer.Option("0.4", "--revision",
                                     help="ACT revision of the wire form: 0.1, seed, 0.2, 0.4."),
        only: list[str] = typer.Option(None, "--only", help="Only these tools or toolkits."),
    ) -> None:
        """Print every tool as an ACT tool-definition of the chosen revision (JSON; CBOR values decoded)."""
        from wbcore_act import revisions
        from wbcore_act.provider import ToolkitProvider

        revisions.check_revision(revision)
        names = [n for v in only or [] for n in v.replace(",", " ").split() if n] or None
        provider = ToolkitProvider(runtime, only=names)
        wire = [revisions.tool_definition_to_wire(t, revision) for t in provider.list_tools()]
        sys.stdout.write(json.dumps(_wire_json(wire), indent=2, ensure_ascii=False) + "\n")

    @app.command("call")
    def call(
        tool: str = typer.Argument(..., help="<toolkit>.<tool>; `wbx act tools` lists them."),
        args: str = typer.Option("{}", "--args",
                                 help="The arguments as a JSON object (sent to the tool as CBOR)."),
        meta: str = typer.Option("{}", "--meta",
                                 help="Call metadata as a JSON object (std:traceparent ...)."),
        revision: str = typer.Option("0.4", "--revision",
                                     help="ACT revision of the printed events: 0.1, seed, 0.2, 0.4."),
        timeout: float = typer.Option(0.0, "--timeout",
                                      help="Shorten the deadline (seconds; 0 = the profile's)."),
    ) -> None:
        """Make one ACT tool-call and print its stream events in the chosen revision's wire
        form (JSON; CBOR values decoded). Exits with the error kind's code when the stream
        ends in an error."""
        from wbcore_act import revisions
        from wbcore_runtime.contract import cbor
        from wbcore_runtime.contract.tools import Metadata, MetadataEvent, ToolCall
        from wbcore_act.provider import ToolkitProvider

        revisions.check_revision(revision)
        parsed, metadata = (_json_object(args, "--args"), _json_object(meta, "--meta"))
        provider = ToolkitProvider(runtime)
        provider.tool(tool)  # unknown tool: not-found, listing the known ones
        outcome = provider.call_tool(ToolCall(tool, cbor.dumps(parsed), Metadata(metadata)),
                                     timeout=timeout or None)
        # Only the seed revision has a metadata event; the others carry no such case.
        wire = [revisions.stream_event_to_wire(ev, revision) for ev in outcome.events
                if revision == "seed" or not isinstance(ev, MetadataEvent)]
        sys.stdout.write(json.dumps(_wire_json(wire), indent=2, ensure_ascii=False, default=str) + "\n")
        err = outcome.error
        if err is not None:
            kind = (ErrorKind(err.kind.value) if err.kind.value in {k.value for k in ErrorKind}
                    else ErrorKind.INTERNAL)
            print(f"wbx: {err.kind_name}: {err.text}", file=sys.stderr)
            raise typer.Exit(EXIT_CODES[kind])

    @app.command("info")
    def info(path: str = typer.Argument(..., help="A .wasm component or module.")) -> None:
        """Read a binary's act:component and act:skill custom sections (nothing is run)."""
        from pathlib import Path

        from wbcore_act import sections

        p = Path(path)
        if not p.is_file():
            raise InvalidArgs(f"{path}: no such file")
        with p.open("rb") as fh:
            data = fh.read(512 << 20)
        found = sections.read_act_info(data)
        if found is None:
            sys.stdout.write(json.dumps({"act": None, "component": sections.is_component(data)}) + "\n")
            return
        sys.stdout.write(json.dumps({
            "name": found.name, "version": found.version, "revision": found.revision,
            "description": found.description.text() if found.description else None,
            "default_language": found.default_language, "capabilities": _wire_json(dict(found.capabilities)),
            "skill": found.skill, "component": sections.is_component(data),
        }, indent=2, ensure_ascii=False, default=str) + "\n")

    return app
