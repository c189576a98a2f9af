"""Reading ACT wire values of any revision: the one place that knows their accepted forms.

Wire values are plain Python: dicts keyed by the WIT field names (kebab-case; snake case
accepted too), variants as wasmtime ``Variant`` objects, ``{"tag": t, "value": v}`` or
one-key dicts, records as dicts or wasmtime ``Record`` objects. The ``wbcore-act`` revision
adapters build on these readers; the core reads component info with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wbcore_runtime.contract.tools import (
    ComponentInfo,
    Content,
    ContentPart,
    Error,
    ToolErrorKind,
    LocalizedString,
    Metadata,
    MetadataEvent,
    StreamEvent,
    ToolDefinition,
    ToolError,
)
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.contract import cbor

# --- reading generic wire values -------------------------------------------------------

_MISSING = object()


def get(obj: Any, key: str, default: Any = None) -> Any:
    for k in (key, key.replace("-", "_")):
        if isinstance(obj, Mapping):
            if k in obj:
                return obj[k]
        else:
            val = getattr(obj, k, _MISSING)
            if val is not _MISSING:
                return val
    return default


def has(obj: Any, key: str) -> bool:
    return get(obj, key, _MISSING) is not _MISSING


def variant(obj: Any) -> tuple[str, Any]:
    """(tag, payload) of a variant in any accepted form."""
    tag = getattr(obj, "tag", None)
    if isinstance(tag, str) and not isinstance(obj, Mapping):
        return tag, getattr(obj, "payload", None)
    if isinstance(obj, Mapping):
        if "tag" in obj:
            return str(obj["tag"]), obj.get("value", obj.get("payload"))
        if len(obj) == 1:
            ((k, v),) = obj.items()
            return str(k), v
    if isinstance(obj, str):
        return obj, None
    raise InvalidArgs(f"expected a variant, got {type(obj).__name__}")


def localized(obj: Any) -> LocalizedString | None:
    if obj is None or isinstance(obj, LocalizedString):
        return obj
    if isinstance(obj, str):
        return LocalizedString(plain=obj)
    if isinstance(obj, (list, tuple)):  # 0.1: list<tuple<lang, text>>
        return LocalizedString(localized=tuple((str(a), str(b)) for a, b in obj))
    if isinstance(obj, Mapping) and not ({"tag", "plain", "localized"} & set(obj)):
        return LocalizedString(localized=tuple((str(k), str(v)) for k, v in obj.items()))
    tag, payload = variant(obj)
    if tag == "plain":
        return LocalizedString(plain=str(payload))
    if tag == "localized":
        return LocalizedString(localized=tuple((str(a), str(b)) for a, b in payload))
    raise InvalidArgs(f"localized-string has no case {tag!r}")


# --- component info (the act:component custom section) -------------------------------


def component_info(value: Any, *, skill: str | None = None) -> ComponentInfo:
    """Read component info from a decoded ``act:component`` section (0.2 flat ``std:``
    keys or 0.3/0.4 ``std`` table) or a 0.1 ``get-info`` record."""
    if not isinstance(value, Mapping) and not has(value, "name"):
        raise InvalidArgs("act:component section must be a CBOR map")
    if isinstance(value, Mapping) and isinstance(value.get("std"), Mapping):
        std = value["std"]
        return ComponentInfo(
            std.get("name"), std.get("version"), localized(std.get("description")),
            std.get("default-language"), dict(std.get("capabilities") or {}),
            skill if skill is not None else std.get("skill"), "0.4",
            {k: v for k, v in value.items() if k != "std"},
        )
    if isinstance(value, Mapping) and any(str(k).startswith("std:") for k in value):
        return ComponentInfo(
            value.get("std:name"), value.get("std:version"), localized(value.get("std:description")),
            value.get("std:default-language"), dict(value.get("std:capabilities") or {}),
            skill if skill is not None else value.get("std:skill"), "0.2",
            {k: v for k, v in value.items() if not str(k).startswith("std:")},
        )
    if has(value, "capabilities") and has(value, "default-language"):  # 0.1 get-info
        caps = get(value, "capabilities") or {}
        ids = {str(get(c, "id")): {"required": True} for c in get(caps, "required") or ()}
        ids.update({str(get(c, "id")): {"required": False} for c in get(caps, "optional") or ()})
        return ComponentInfo(
            get(value, "name"), get(value, "version"), localized(get(value, "description")),
            get(value, "default-language"), ids, skill, "0.1",
        )
    return ComponentInfo(None, None, skill=skill, revision="0.2",
                         extra=dict(value) if isinstance(value, Mapping) else {})


# --- a tool provider's own answers (act:tools/tool-provider, the 0.4 shapes) ----------
# What a component exporting ``act:tools/tool-provider`` returns, as the host lifts it:
# ``list<u8>`` arrives as bytes, a list of ints, or base64 text (the JSON form of the
# component shape), variants as ``{"tag", "value"}``, results as ``{"ok"|"err": ...}``.


def wire_bytes(obj: Any, where: str) -> bytes:
    import base64
    import binascii

    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, str):
        try:
            return base64.b64decode(obj, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgs(f"{where}: not base64 bytes") from None
    if isinstance(obj, (list, tuple)) and all(isinstance(b, int) and 0 <= b < 256 for b in obj):
        return bytes(obj)
    raise InvalidArgs(f"{where}: expected bytes, got {type(obj).__name__}")


def metadata(pairs: Any, where: str = "metadata") -> Metadata:
    """``list<tuple<string, list<u8>>>`` (values CBOR) → decoded :class:`Metadata`."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InvalidArgs(f"{where}: each entry must be a (key, value) pair")
        key, raw = pair
        out[str(key)] = cbor.loads(wire_bytes(raw, f"{where}[{key!r}]"))
    return Metadata(out)


def provided_tool(obj: Any) -> ToolDefinition:
    """A ``tool-definition`` from a provider's ``list-tools`` (0.2/0.4 shape)."""
    import json

    name = get(obj, "name")
    if not isinstance(name, str) or not name:
        raise InvalidArgs("tool-definition without a name")
    raw_schema = get(obj, "parameters-schema")
    schema: Any = None
    if raw_schema:
        try:
            schema = json.loads(raw_schema) if isinstance(raw_schema, str) else raw_schema
        except ValueError as exc:
            raise InvalidArgs(f"tool {name!r}: parameters-schema is not JSON: {exc}") from None
        if not isinstance(schema, Mapping):
            raise InvalidArgs(f"tool {name!r}: parameters-schema must be a JSON object")
    return ToolDefinition(name, localized(get(obj, "description")), schema,
                          metadata(get(obj, "metadata"), f"tool {name!r} metadata"))


def provided_error(obj: Any) -> ToolError:
    """An ``error {kind: string, message, metadata}``: ``std:<kind>`` is a well-known kind."""
    kind = str(get(obj, "kind") or "")
    bare = kind[4:] if kind.startswith("std:") else None
    meta = metadata(get(obj, "metadata"), "error metadata")
    message = localized(get(obj, "message"))
    if bare in {k.value for k in ToolErrorKind} - {ToolErrorKind.OTHER.value}:
        return ToolError(ToolErrorKind(bare), message, extensions=meta)
    return ToolError(ToolErrorKind.OTHER, message, other=kind or "unknown", extensions=meta)


def provided_result(obj: Any) -> list[StreamEvent]:
    """A ``call-tool`` answer: ``tool-result`` (``immediate(list<tool-event>)`` or
    ``streaming(stream<tool-event>)``) or a bare event list → events, errors last."""
    events_wire: Any = obj
    if not isinstance(obj, (list, tuple)):
        tag, payload = variant(obj)
        if tag == "streaming":
            raise InvalidArgs("the provider answered with a stream<tool-event>, which this host cannot read "
                              "in-process yet (wasmtime-py has no stream values); see docs/mcp.md")
        if tag != "immediate":
            raise InvalidArgs(f"tool-result has no case {tag!r}")
        events_wire = payload or []
    events: list[StreamEvent] = []
    for i, ev in enumerate(events_wire):
        tag, payload = variant(ev)
        if tag == "content":
            events.append(Content(ContentPart(wire_bytes(get(payload, "data") or b"", f"event {i} data"),
                                              get(payload, "mime-type"), metadata(get(payload, "metadata")))))
        elif tag == "error":
            events.append(Error(provided_error(payload)))
        elif tag == "metadata":
            events.append(MetadataEvent(metadata(payload)))
        else:
            raise InvalidArgs(f"tool-event {i} has no case {tag!r}")
    for i, ev in enumerate(events[:-1]):
        if isinstance(ev, Error):
            raise InvalidArgs(f"tool-event {i} is an error but {len(events) - i - 1} event(s) follow it")
    return events
