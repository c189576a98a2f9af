"""WIT values ↔ JSON, and JSON Schema derived from WIT types (wasmtime-py's ``ValType``s).

Mapping (the same in both directions, documented in ``wit/README.md``):

=======================  ==============================================================
WIT                      JSON
=======================  ==============================================================
bool, s*/u*, f32/f64     boolean, integer (with its range), number
char, string             string (char: exactly one code point)
list<u8>                 string, base64 (``contentEncoding: base64``)
list<T>, tuple<...>      array (a tuple has a fixed length)
record                   object with every field required
option<T>                T or null
result<T, E>             ``{"ok": T}`` or ``{"err": E}`` (a top-level ``err`` is a tool error)
variant                  ``{"tag": case, "value": payload}``
enum                     string, one of the case names
flags                    array of unique flag names
=======================  ==============================================================
"""

from __future__ import annotations

import base64
from typing import Any

from wbcore_runtime.contract.errors import InvalidArgs

_INT_RANGES = {
    "S8": (-(1 << 7), (1 << 7) - 1), "S16": (-(1 << 15), (1 << 15) - 1),
    "S32": (-(1 << 31), (1 << 31) - 1), "S64": (-(1 << 63), (1 << 63) - 1),
    "U8": (0, (1 << 8) - 1), "U16": (0, (1 << 16) - 1), "U32": (0, (1 << 32) - 1), "U64": (0, (1 << 64) - 1),
}


def _kind(ty: Any) -> str:
    return type(ty).__name__


def _is_bytes(ty: Any) -> bool:
    return _kind(ty) == "ListType" and _kind(ty.element) == "U8"


def schema(ty: Any) -> dict[str, Any]:
    """The JSON Schema of a WIT type."""
    k = _kind(ty)
    if k == "Bool":
        return {"type": "boolean"}
    if k in _INT_RANGES:
        lo, hi = _INT_RANGES[k]
        return {"type": "integer", "minimum": lo, "maximum": hi}
    if k in ("F32", "F64"):
        return {"type": "number"}
    if k == "Char":
        return {"type": "string", "minLength": 1, "maxLength": 1}
    if k == "String":
        return {"type": "string"}
    if k == "ListType":
        if _is_bytes(ty):
            return {"type": "string", "contentEncoding": "base64"}
        return {"type": "array", "items": schema(ty.element)}
    if k == "TupleType":
        els = [schema(e) for e in ty.elements]
        return {"type": "array", "prefixItems": els, "minItems": len(els), "maxItems": len(els)}
    if k == "RecordType":
        fields = ty.fields
        return {
            "type": "object",
            "properties": {n: schema(t) for n, t in fields},
            "required": [n for n, _ in fields],
            "additionalProperties": False,
        }
    if k == "OptionType":
        inner = schema(ty.payload)
        return {"anyOf": [inner, {"type": "null"}]}
    if k == "ResultType":
        def side(name: str, t: Any) -> dict[str, Any]:
            body = schema(t) if t is not None else {"type": "null"}
            return {
                "type": "object", "properties": {name: body}, "required": [name],
                "additionalProperties": False,
            }

        return {"oneOf": [side("ok", ty.ok), side("err", ty.err)]}
    if k == "VariantType":
        cases = []
        for name, t in ty.cases:
            props: dict[str, Any] = {"tag": {"const": name}}
            req = ["tag"]
            if t is not None:
                props["value"] = schema(t)
                req.append("value")
            cases.append(
                {"type": "object", "properties": props, "required": req, "additionalProperties": False}
            )
        return {"oneOf": cases}
    if k == "EnumType":
        return {"type": "string", "enum": list(ty.names)}
    if k == "FlagsType":
        return {"type": "array", "items": {"type": "string", "enum": list(ty.names)}, "uniqueItems": True}
    return {"description": f"WIT type {k} (not representable in JSON)"}


def params_schema(params: list[tuple[str, Any]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {n: schema(t) for n, t in params},
        "required": [n for n, _ in params],
        "additionalProperties": False,
    }


class _Rec:
    """The attribute bag wasmtime-py lowers a record from."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def from_json(ty: Any, value: Any, where: str = "") -> Any:
    """A JSON value → the Python value wasmtime-py lowers for ``ty``; ``InvalidArgs`` naming ``where``."""
    from wasmtime.component import Variant

    k = _kind(ty)
    at = where or "value"

    def bad(want: str) -> InvalidArgs:
        return InvalidArgs(f"{at}: expected {want}, got {type(value).__name__} {str(value)[:60]!r}")

    if k == "Bool":
        if not isinstance(value, bool):
            raise bad("a boolean")
        return value
    if k in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        lo, hi = _INT_RANGES[k]
        if not lo <= value <= hi:
            raise InvalidArgs(f"{at}: {value} is outside {k.lower()} range [{lo}, {hi}]")
        return value
    if k in ("F32", "F64"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("a number")
        return float(value)
    if k == "Char":
        if not isinstance(value, str) or len(value) != 1:
            raise bad("a one-character string")
        return value
    if k == "String":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if k == "ListType":
        if _is_bytes(ty):
            if not isinstance(value, str):
                raise bad("a base64 string")
            try:
                return base64.b64decode(value, validate=True)
            except ValueError:
                raise InvalidArgs(f"{at}: not valid base64") from None
        if not isinstance(value, list):
            raise bad("an array")
        return [from_json(ty.element, v, f"{at}[{i}]") for i, v in enumerate(value)]
    if k == "TupleType":
        els = ty.elements
        if not isinstance(value, list) or len(value) != len(els):
            raise bad(f"an array of {len(els)}")
        return tuple(from_json(t, v, f"{at}[{i}]") for i, (t, v) in enumerate(zip(els, value, strict=True)))
    if k == "RecordType":
        if not isinstance(value, dict):
            raise bad("an object")
        fields = ty.fields
        names = {n for n, _ in fields}
        extra = sorted(set(value) - names)
        if extra:
            raise InvalidArgs(
                f"{at}: unknown field(s) {', '.join(extra)}; fields: {', '.join(n for n, _ in fields)}"
            )
        out = {}
        for n, t in fields:
            if n not in value:
                raise InvalidArgs(f"{at}: missing field {n!r}")
            out[n] = from_json(t, value[n], f"{at}.{n}")
        return _Rec(out)
    if k == "OptionType":
        return None if value is None else from_json(ty.payload, value, at)
    if k == "ResultType":
        if not isinstance(value, dict) or len(value) != 1 or not ({"ok", "err"} & set(value)):
            raise bad('{"ok": ...} or {"err": ...}')
        ((tag, payload),) = value.items()
        case_ty = ty.ok if tag == "ok" else ty.err
        inner = None if case_ty is None else from_json(case_ty, payload, f"{at}.{tag}")
        return Variant(tag, inner) if ty._tagged() else inner
    if k == "VariantType":
        if not isinstance(value, dict) or "tag" not in value:
            raise bad('{"tag": case, "value": ...}')
        cases = dict(ty.cases)
        tag = value["tag"]
        if tag not in cases:
            raise InvalidArgs(f"{at}: unknown case {tag!r}; cases: {', '.join(cases)}")
        case_ty = cases[tag]
        inner = None if case_ty is None else from_json(case_ty, value.get("value"), f"{at}.value")
        if ty._tagged():
            return Variant(tag, inner)
        return inner
    if k == "EnumType":
        if value not in ty.names:
            raise InvalidArgs(f"{at}: {value!r} is not one of {', '.join(ty.names)}")
        return value
    if k == "FlagsType":
        if not isinstance(value, list) or any(v not in ty.names for v in value):
            raise bad(f"an array of flags from {', '.join(ty.names)}")
        return set(value)
    raise InvalidArgs(f"{at}: WIT type {k} cannot be passed from JSON")


def _case_of(ty: Any, value: Any) -> tuple[str, Any]:
    """(case, payload) of a lifted variant-like value (tagged or not)."""
    from wasmtime.component import Variant

    if isinstance(value, Variant):
        return value.tag, value.payload
    for name, t in ty._cases():
        if t is None:
            if value is None:
                return name, None
            continue
        classes: set[type] = set()
        t.add_classes(classes)
        if isinstance(value, tuple(classes)):
            return name, value
    raise InvalidArgs(f"cannot tell the case of {value!r}")


def to_json(ty: Any, value: Any) -> Any:
    """A lifted WIT value → JSON."""
    k = _kind(ty)
    if k in ("Bool", "String", "Char") or k in _INT_RANGES:
        return value
    if k in ("F32", "F64"):
        return value
    if k == "ListType":
        if _is_bytes(ty):
            return base64.b64encode(bytes(value)).decode("ascii")
        return [to_json(ty.element, v) for v in value]
    if k == "TupleType":
        return [to_json(t, v) for t, v in zip(ty.elements, value, strict=True)]
    if k == "RecordType":
        return {n: to_json(t, getattr(value, n)) for n, t in ty.fields}
    if k == "OptionType":
        return None if value is None else to_json(ty.payload, value)
    if k == "ResultType":
        tag, payload = _case_of(ty, value)
        case_ty = ty.ok if tag == "ok" else ty.err
        return {tag: None if case_ty is None else to_json(case_ty, payload)}
    if k == "VariantType":
        tag, payload = _case_of(ty, value)
        case_ty = dict(ty.cases)[tag]
        return {"tag": tag} if case_ty is None else {"tag": tag, "value": to_json(case_ty, payload)}
    if k == "EnumType":
        return value
    if k == "FlagsType":
        return sorted(value)
    return repr(value)
