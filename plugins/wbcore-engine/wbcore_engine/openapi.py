"""The OpenAPI 3.1 document of the engine API, served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from wbcore_engine.sessions import MAX_MODEL_CHARS, RUN_RANGES
from wbcore_runtime.dispatch.mounts import MAX_MOUNTS, MAX_SPEC_BYTES, ROOTS_ENV

_ERROR = {
    "description": "error",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_JSON = {"application/json": {"schema": {"type": "object"}}}
_SSE = {"text/event-stream": {"schema": {"type": "string"}}}


def _op(summary: str, *, ok: str = "200", body: dict[str, Any] | None = None, stream: bool = False,
        params: list[dict[str, Any]] | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    responses: dict[str, Any] = {ok: {"description": "ok", "content": _SSE if stream else _JSON},
                                 "401": {"description": "missing or wrong bearer token"}, "default": _ERROR}
    for code, text in (extra or {}).items():
        responses[code] = {"description": text}
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": True, "content": body}
    if params:
        op["parameters"] = params
    return op


def _path(name: str, desc: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": desc,
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"}}


def _query(name: str, desc: str, typ: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": desc, "schema": {"type": typ}}


_NO_SESSIONS = {"501": "no session host is installed (the agent loop)"}
_STREAMS = {"503": "the stream cap (in all or for this client) is reached; retry after Retry-After"}


def document() -> dict[str, Any]:
    tk = _path("ident", "toolkit id")
    sid = _path("sid", "session id")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "wbcore engine",
            "version": "1",
            "description": "Toolkits, push, calls, agent sessions and the audit trail of one $WB_HOME. "
            "Every request needs 'Authorization: Bearer <token>'. See docs/engine.md.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object", "required": ["error", "message"],
                    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
                },
                "Call": {
                    "type": "object",
                    "properties": {
                        "argv": {"type": "array", "items": {"type": "string"}}, "stdin": {"type": "string"},
                        "stdin_b64": {"type": "string"}, "timeout": {"type": "number"},
                        "tier": {"type": "string"},
                        "mounts": {
                            "type": "array", "maxItems": MAX_MOUNTS,
                            "items": {"type": "string", "maxLength": MAX_SPEC_BYTES},
                            "description": "host folders for this call, HOST[:GUEST][:ro|rw] (at most "
                            f"{MAX_SPEC_BYTES} bytes each), only inside the deployer's "
                            f"{ROOTS_ENV} and at a tier that binds folders (container, "
                            "microvm); 403 when unset or outside",
                        },
                    },
                },
                "Session": {
                    "type": "object",
                    "required": ["agent", "task"],
                    "properties": {
                        "agent": {"type": "string"},
                        "task": {"type": "string"},
                        "options": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "model": {"type": "string", "minLength": 1, "maxLength": MAX_MODEL_CHARS},
                                "max_steps": {
                                    "type": "integer", "minimum": RUN_RANGES["max_steps"][0],
                                    "maximum": RUN_RANGES["max_steps"][1],
                                },
                                "tool_timeout": {
                                    "type": "number", "minimum": RUN_RANGES["tool_timeout"][0],
                                    "maximum": RUN_RANGES["tool_timeout"][1],
                                },
                            },
                        },
                    },
                },
            },
        },
        "security": [{"bearer": []}],
        "paths": {
            "/openapi.json": {"get": _op("this document")},
            "/v1/toolkits": {
                "get": _op("list toolkits"),
                "post": _op(
                    "push a toolkit archive: verified, then landed (all or nothing)",
                    body={
                        "application/gzip": {"schema": {"type": "string", "format": "binary"}},
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    },
                    params=[
                        _query("name", "archive file name (.tar.gz, .tgz, .tar, .zip)"),
                        _query("dry_run", "1: answer the diff of caps, trust and signer; land nothing"),
                        _query("force", "1: replace an installed toolkit"),
                        _query("first_party", "1: the deployer vouches for a first-party toolkit"),
                        _query(
                            "build", "0: land only; else what landed is built here (builds: one row each)"
                        ),
                    ],
                    extra={"413": "archive larger than the cap", "408": "body did not arrive in time"},
                ),
            },
            "/v1/toolkits/{ident}": {"get": _op("show one toolkit", params=[tk])},
            "/v1/toolkits/{ident}/build": {
                "post": _op(
                    "build an installed toolkit in the engine's build sandbox",
                    params=[tk, _query("force", "1: skip the build cache")],
                )
            },
            "/v1/toolkits/{ident}/verify": {
                "get": _op("verify one toolkit", params=[tk], extra={"422": "the report has failures"})
            },
            "/v1/calls/{name}": {
                "post": _op(
                    "call a registered command (wbcore_runtime.dispatch.dispatcher)",
                    params=[_path("name", "command")],
                    body={"application/json": {"schema": {"$ref": "#/components/schemas/Call"}}},
                )
            },
            "/v1/audit": {
                "get": _op(
                    "recent audit decisions",
                    params=[
                        _query("tail", "how many", "integer"),
                        _query("after", "only seq > after", "integer"),
                    ],
                )
            },
            "/v1/audit/events": {
                "get": _op(
                    "audit decisions as they happen (SSE)", stream=True, extra=_STREAMS,
                    params=[
                        _query("after", "start after this seq", "integer"),
                        _query("wait", "seconds before the stream ends", "number"),
                    ],
                )
            },
            "/v1/sessions": {
                "post": _op(
                    "start an agent session", ok="201",
                    extra={**_NO_SESSIONS, "429": "the live-session cap is reached"},
                    body={"application/json": {"schema": {"$ref": "#/components/schemas/Session"}}},
                )
            },
            "/v1/sessions/{sid}": {
                "get": _op("session status", params=[sid], extra=_NO_SESSIONS),
                "delete": _op("cancel the session", params=[sid], extra=_NO_SESSIONS),
            },
            "/v1/sessions/{sid}/events": {
                "get": _op(
                    "session step events (SSE)", stream=True, extra={**_NO_SESSIONS, **_STREAMS},
                    params=[
                        sid, _query("after", "start after this seq", "integer"),
                        _query("wait", "seconds before the stream ends", "number"),
                    ],
                )
            },
            "/v1/sessions/{sid}/review": {
                "get": _op(
                    "take review items", params=[sid, _query("limit", "at most", "integer")],
                    extra=_NO_SESSIONS,
                ),
                "post": _op("put a review item", ok="201", params=[sid], extra=_NO_SESSIONS, body=_JSON),
            },
        },
    }
