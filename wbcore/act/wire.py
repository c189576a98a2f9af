"""Reading ACT wire values of any revision: the one place that knows their accepted forms.

Wire values are plain Python: dicts keyed by the WIT field names (kebab-case; snake case
accepted too), variants as wasmtime ``Variant`` objects, ``{"tag": t, "value": v}`` or
one-key dicts, records as dicts or wasmtime ``Record`` objects. The ``wb-act`` revision
adapters build on these readers; the core reads component info with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wbcore.act.model import ComponentInfo, LocalizedString
from wbcore.errors import InvalidArgs

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
    return ComponentInfo(None, None, skill=skill, revision="0.2", extra=dict(value) if isinstance(value, Mapping) else {})
