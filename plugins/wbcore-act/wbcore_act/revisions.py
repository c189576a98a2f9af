"""One adapter for the public ACT revisions, to and from the core's model
(:mod:`wbcore_runtime.contract.tools`).

Revisions differ in shape, not in meaning (sources: the ACT specification texts of
``act:core@0.1.1``/``0.1.2``, ``0.2.0``, ``act:core@0.4.0`` + ``act:tools@0.1.0``, and seed 002):

========  ==========================================================================
``0.1``   localized-string = ``list<tuple<lang, text>>``; tool-definition has
          ``parameters: list<parameter-meta>`` and a ``tool-annotations`` record
          (``read-only``, ``idempotent``, ``destructive`` as bools); tool-call has an
          ``id`` and ``extensions``; error-kind is an enum; component info comes from
          a ``get-info`` export.
``seed``  (seed 002) tool-definition ``{name, description?, input-schema?,
          annotations?, extensions?}``; tool-call ``{name, arguments?, metadata,
          extensions?}``; error-kind is a variant with ``other(string)``; a stream
          event may carry ``metadata``.
``0.2``   localized-string is a variant; tool-definition ``{name, description,
          parameters-schema, metadata}`` with ``std:`` annotations in metadata;
          tool-error ``kind`` is a string (``std:not-found`` ...); the ``act:component``
          section is a flat map of ``std:`` keys.
``0.4``   the same tool-definition; ``error {kind: string, message, metadata}``;
          ``call-tool(name, arguments, metadata)`` returns ``tool-result``
          (``immediate(list)`` or ``streaming``); the ``act:component`` section nests
          well-known keys under a ``std`` table (``name``, ``version``, ...).
========  ==========================================================================

Wire values are read by :mod:`wbcore_act.wire` (every accepted form in one place); component
info (``act:component``) is read there too, and written here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from wbcore_runtime.contract import cbor
from wbcore_runtime.contract.tools import (
    STD_DESTRUCTIVE,
    STD_IDEMPOTENT,
    STD_READ_ONLY,
    STD_TAGS,
    STD_TIMEOUT_MS,
    STD_USAGE_HINTS,
    ComponentInfo,
    Content,
    ContentPart,
    Error,
    ToolErrorKind,
    LocalizedString,
    Metadata,
    MetadataEvent,
    StreamEvent,
    ToolCall,
    ToolDefinition,
    ToolError,
)
from wbcore_act.wire import get as _get
from wbcore_act.wire import has as _has
from wbcore_act.wire import localized as _localized
from wbcore_act.wire import variant as _variant
from wbcore_runtime.contract.errors import InvalidArgs

REVISIONS = ("0.1", "seed", "0.2", "0.4")


def check_revision(revision: str) -> str:
    """``revision`` if accepted, else ``InvalidArgs`` listing the accepted ones."""
    if revision not in REVISIONS:
        raise InvalidArgs(f"unknown ACT revision {revision!r}; known: {', '.join(REVISIONS)}")
    return revision


def _meta(pairs: Any) -> Metadata:
    if pairs is None:
        return Metadata()
    if isinstance(pairs, Metadata):
        return pairs
    if isinstance(pairs, Mapping):
        return Metadata(pairs)
    return Metadata(cbor.decode_metadata((k, v) for k, v in pairs))


def _ext_strings(pairs: Any) -> Metadata:
    """0.1 extensions are ``list<tuple<string, string>>`` (no CBOR)."""
    return Metadata({str(k): v for k, v in (pairs or ())})


def _bytes(obj: Any) -> bytes | None:
    if obj is None:
        return None
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    return bytes(obj)  # list<u8> lifted as a list of ints


def _schema(text: Any) -> Mapping[str, Any] | None:
    if text is None:
        return None
    if isinstance(text, Mapping):
        return dict(text)
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidArgs(f"input schema is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgs("input schema must be a JSON object")
    return value


# --- revision detection ----------------------------------------------------------------


def detect_tool_definition(wire: Any) -> str:
    if _has(wire, "parameters"):
        return "0.1"
    if _has(wire, "input-schema") or _has(wire, "annotations") or _has(wire, "extensions"):
        return "seed"
    if _has(wire, "parameters-schema"):
        return "0.4"  # 0.2 and 0.4 share this record; "0.4" names the newest shape
    raise InvalidArgs("not an ACT tool-definition of any known revision")


def detect_tool_call(wire: Any) -> str:
    if _has(wire, "id"):
        return "0.1"
    if _has(wire, "extensions") or (_has(wire, "arguments") and _get(wire, "arguments") is None):
        return "seed"
    return "0.4"


def detect_error(wire: Any) -> str:
    kind = _get(wire, "kind")
    if isinstance(kind, str):
        return "0.4" if ":" in kind else "0.1"
    return "seed"


# --- tool definitions ------------------------------------------------------------------


def tool_definition(wire: Any, revision: str | None = None) -> ToolDefinition:
    rev = check_revision(revision or detect_tool_definition(wire))
    name = str(_get(wire, "name"))
    if rev == "0.1":
        ann = _get(wire, "annotations") or {}
        props: dict[str, Any] = {}
        required: list[str] = []
        for p in _get(wire, "parameters") or ():
            pname = str(_get(p, "name"))
            sch = dict(_schema(_get(p, "schema")) or {})
            desc = _localized(_get(p, "description"))
            if desc and "description" not in sch:
                sch["description"] = desc.text()
            props[pname] = sch
            if _get(p, "required"):
                required.append(pname)
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        annotations: dict[str, Any] = {
            STD_READ_ONLY: bool(_get(ann, "read-only", False)),
            STD_IDEMPOTENT: bool(_get(ann, "idempotent", False)),
            STD_DESTRUCTIVE: bool(_get(ann, "destructive", False)),
        }
        if _get(ann, "tags"):
            annotations[STD_TAGS] = list(_get(ann, "tags"))
        if _get(ann, "timeout-ms") is not None:
            annotations[STD_TIMEOUT_MS] = int(_get(ann, "timeout-ms"))
        hints = _localized(_get(ann, "usage-hints"))
        if hints:
            annotations[STD_USAGE_HINTS] = hints.to_cbor_value()
        return ToolDefinition(
            name, _localized(_get(ann, "description")), schema, Metadata(annotations),
            _ext_strings(_get(wire, "extensions")),
        )
    if rev == "seed":
        return ToolDefinition(
            name,
            _localized(_get(wire, "description")),
            _schema(_get(wire, "input-schema")),
            _meta(_get(wire, "annotations")),
            _meta(_get(wire, "extensions")),
        )
    return ToolDefinition(
        name,
        _localized(_get(wire, "description")),
        _schema(_get(wire, "parameters-schema")),
        _meta(_get(wire, "metadata")),
    )


def _localized_wire(ls: LocalizedString | None, rev: str) -> Any:
    if ls is None:
        return [] if rev == "0.1" else None
    if rev == "0.1":
        return list(ls.localized) if ls.plain is None else [("en", ls.plain)]
    if ls.plain is not None:
        return {"tag": "plain", "value": ls.plain}
    return {"tag": "localized", "value": list(ls.localized)}


def tool_definition_to_wire(td: ToolDefinition, revision: str) -> dict[str, Any]:
    rev = check_revision(revision)
    schema = dict(td.input_schema or {"type": "object"})
    if rev == "0.1":
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        params = [
            {
                "name": pname,
                "description": _localized_wire(LocalizedString(plain=str(psch.get("description", ""))), rev),
                "schema": json.dumps(psch, sort_keys=True),
                "required": pname in required,
                "extensions": [],
            }
            for pname, psch in props.items()
        ]
        ann = td.annotations
        return {
            "name": td.name,
            "parameters": params,
            "annotations": {
                "description": _localized_wire(td.description, rev),
                "usage-hints": None,
                "anti-usage-hints": None,
                "examples": [],
                "read-only": bool(ann.get(STD_READ_ONLY, False)),
                "idempotent": bool(ann.get(STD_IDEMPOTENT, False)),
                "destructive": bool(ann.get(STD_DESTRUCTIVE, False)),
                "tags": list(ann.get(STD_TAGS, [])),
                "timeout-ms": ann.get(STD_TIMEOUT_MS),
                "extensions": [(k, str(v)) for k, v in td.extensions.items()],
            },
        }
    if rev == "seed":
        return {
            "name": td.name,
            "description": _localized_wire(td.description, rev),
            "input-schema": json.dumps(schema, sort_keys=True),
            "annotations": cbor.encode_metadata(td.annotations) or None,
            "extensions": cbor.encode_metadata(td.extensions) or None,
        }
    return {
        "name": td.name,
        "description": _localized_wire(td.description or LocalizedString(plain=""), rev),
        "parameters-schema": json.dumps(schema, sort_keys=True),
        "metadata": cbor.encode_metadata(td.annotations),
    }


# --- tool calls ------------------------------------------------------------------------


def tool_call(wire: Any, revision: str | None = None) -> ToolCall:
    """Read a tool-call; arguments are re-encoded deterministically (the host's duty)."""
    rev = check_revision(revision or detect_tool_call(wire))
    raw = _bytes(_get(wire, "arguments"))
    args = cbor.canonicalize(raw) if raw else None
    if rev == "0.1":
        meta = {"std:request-id": str(_get(wire, "id"))} if _get(wire, "id") else {}
        return ToolCall(str(_get(wire, "name")), args, Metadata(meta), _ext_strings(_get(wire, "extensions")))
    return ToolCall(
        str(_get(wire, "name")), args, _meta(_get(wire, "metadata")),
        _meta(_get(wire, "extensions")) if rev == "seed" else Metadata(),
    )


def tool_call_to_wire(call: ToolCall, revision: str) -> dict[str, Any]:
    rev = check_revision(revision)
    if rev == "0.1":
        return {
            "id": str(call.metadata.get("std:request-id", "")),
            "name": call.name,
            "arguments": call.arguments or cbor.dumps({}),
            "extensions": [(k, str(v)) for k, v in call.extensions.items()],
        }
    wire: dict[str, Any] = {
        "name": call.name,
        "arguments": call.arguments if rev == "seed" else (call.arguments or cbor.dumps({})),
        "metadata": cbor.encode_metadata(call.metadata),
    }
    if rev == "seed":
        wire["extensions"] = cbor.encode_metadata(call.extensions) or None
    return wire


# --- errors ----------------------------------------------------------------------------

_WELL_KNOWN = {k.value for k in ToolErrorKind if k is not ToolErrorKind.OTHER}


def tool_error(wire: Any, revision: str | None = None) -> ToolError:
    rev = check_revision(revision or detect_error(wire))
    message = _localized(_get(wire, "message"))
    if rev in ("0.1",):
        kind = str(_get(wire, "kind"))
        if kind not in _WELL_KNOWN:
            raise InvalidArgs(f"0.1 error-kind {kind!r} is not one of {', '.join(sorted(_WELL_KNOWN))}")
        return ToolError(ToolErrorKind(kind), message, extensions=_ext_strings(_get(wire, "extensions")))
    if rev == "seed":
        tag, payload = _variant(_get(wire, "kind"))
        if tag == "other":
            return ToolError(ToolErrorKind.OTHER, message, other=str(payload),
                             extensions=_meta(_get(wire, "extensions")))
        if tag not in _WELL_KNOWN:
            raise InvalidArgs(f"error-kind has no case {tag!r}")
        return ToolError(ToolErrorKind(tag), message, extensions=_meta(_get(wire, "extensions")))
    kind = str(_get(wire, "kind"))
    bare = kind[4:] if kind.startswith("std:") else None
    meta = _meta(_get(wire, "metadata"))
    if bare in _WELL_KNOWN:
        return ToolError(ToolErrorKind(bare), message, extensions=meta)
    return ToolError(ToolErrorKind.OTHER, message, other=kind, extensions=meta)


def tool_error_to_wire(err: ToolError, revision: str) -> dict[str, Any]:
    rev = check_revision(revision)
    if rev == "0.1":
        kind = err.kind.value if err.kind is not ToolErrorKind.OTHER else "internal"
        text = err.text if err.kind is not ToolErrorKind.OTHER else f"{err.other}: {err.text}"
        return {"kind": kind, "message": [("en", text)],
                "extensions": [(k, str(v)) for k, v in err.extensions.items()]}
    if rev == "seed":
        kind_wire: Any = ({"tag": "other", "value": err.other} if err.kind is ToolErrorKind.OTHER
                          else {"tag": err.kind.value})
        return {"kind": kind_wire, "message": _localized_wire(err.message, rev),
                "extensions": cbor.encode_metadata(err.extensions) or None}
    kind = err.other if err.kind is ToolErrorKind.OTHER else f"std:{err.kind.value}"
    return {"kind": kind, "message": _localized_wire(err.message or LocalizedString(plain=""), rev),
            "metadata": cbor.encode_metadata(err.extensions)}


# --- stream events ---------------------------------------------------------------------


def content_part(wire: Any, revision: str) -> ContentPart:
    rev = check_revision(revision)
    mime = _get(wire, "mime-type")
    if rev == "0.1" and mime is None:
        mime = "application/cbor"  # 0.1: an absent MIME type means CBOR
    if rev == "0.1":
        return ContentPart(_bytes(_get(wire, "data")), mime,
                           extensions=_ext_strings(_get(wire, "extensions")))
    if rev == "seed":
        return ContentPart(_bytes(_get(wire, "data")), mime, _meta(_get(wire, "annotations")),
                           _meta(_get(wire, "extensions")))
    return ContentPart(_bytes(_get(wire, "data")), mime, _meta(_get(wire, "metadata")))


def stream_event(wire: Any, revision: str) -> StreamEvent:
    rev = check_revision(revision)
    tag, payload = _variant(wire)
    if tag == "content":
        return Content(content_part(payload, rev))
    if tag == "error":
        return Error(tool_error(payload, rev))
    if tag == "metadata" and rev == "seed":
        return MetadataEvent(_meta(payload))
    raise InvalidArgs(f"stream-event of revision {rev} has no case {tag!r}")


def stream(wire: Any, revision: str) -> list[StreamEvent]:
    """A whole result: a list of events, or 0.4's ``tool-result`` (immediate/streaming)."""
    rev = check_revision(revision)
    if rev == "0.4" and not isinstance(wire, (list, tuple)):
        tag, payload = _variant(wire)
        if tag not in ("immediate", "streaming"):
            raise InvalidArgs(f"tool-result has no case {tag!r}")
        wire = payload
    events = [stream_event(w, rev) for w in wire]
    for i, ev in enumerate(events[:-1]):
        if isinstance(ev, Error):
            raise InvalidArgs(f"stream event {i} is an error but {len(events) - i - 1} event(s) follow it")
    return events


def stream_event_to_wire(ev: StreamEvent, revision: str) -> dict[str, Any]:
    rev = check_revision(revision)
    if isinstance(ev, Error):
        return {"tag": "error", "value": tool_error_to_wire(ev.error, rev)}
    if isinstance(ev, MetadataEvent):
        if rev != "seed":
            raise InvalidArgs(f"revision {rev} has no metadata stream event")
        return {"tag": "metadata", "value": cbor.encode_metadata(ev.metadata)}
    part = ev.part
    if rev == "0.1":
        body: dict[str, Any] = {"data": part.data or b"", "mime-type": part.mime_type, "extensions": []}
    elif rev == "seed":
        body = {"mime-type": part.mime_type, "data": part.data,
                "annotations": cbor.encode_metadata(part.annotations) or None, "extensions": None}
    else:
        body = {"data": part.data or b"", "mime-type": part.mime_type,
                "metadata": cbor.encode_metadata(part.annotations)}
    return {"tag": "content", "value": body}


# --- component info (the act:component custom section; read by wbcore_act.wire) --------


def component_info_to_section(info: ComponentInfo, revision: str) -> bytes:
    rev = check_revision(revision)
    if rev == "0.4":
        std: dict[str, Any] = {"name": info.name, "version": info.version}
        if info.description:
            std["description"] = info.description.to_cbor_value()
        if info.default_language:
            std["default-language"] = info.default_language
        if info.capabilities:
            std["capabilities"] = dict(info.capabilities)
        return cbor.dumps({"std": std, **dict(info.extra)})
    if rev in ("0.2", "seed"):
        flat: dict[str, Any] = {}
        for key, val in (("std:name", info.name), ("std:version", info.version),
                         ("std:default-language", info.default_language)):
            if val is not None:
                flat[key] = val
        if info.description:
            flat["std:description"] = info.description.to_cbor_value()
        if info.capabilities:
            flat["std:capabilities"] = dict(info.capabilities)
        if info.skill:
            flat["std:skill"] = info.skill
        return cbor.dumps({**flat, **dict(info.extra)})
    raise InvalidArgs("revision 0.1 has no act:component section (component info is a get-info export)")
