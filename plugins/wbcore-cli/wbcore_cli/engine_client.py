"""The client side of the engine API (``wbx toolkit push``; ``wbx agent run --engine``,
:func:`run_on_engine`).

HTTP through the standard library only (urllib): the core depends on no HTTP client. Every request has a
timeout; every answer is read against a size cap; an SSE stream ends at its deadline.
The token comes from ``--token`` or ``WB_ENGINE_TOKEN`` and is never printed.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import typer

from wbcore_runtime.contract.cli_output import emit_json
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs, NotFound, Timeout, WbError
from wbcore_runtime.store.archive import deterministic_targz
from wbcore_runtime.guard import fetch, httpguard, paths
from wbcore_runtime.trust import signing

TOKEN_ENV = "WB_ENGINE_TOKEN"
MAX_ANSWER = 16 << 20
MAX_EVENT = 4 << 20
DEFAULT_TIMEOUT = 120.0

_KINDS: dict[int, type[WbError]] = {400: InvalidArgs, 401: CapabilityDenied, 403: CapabilityDenied,
                                    404: NotFound, 408: Timeout, 413: InvalidArgs, 421: CapabilityDenied,
                                    422: InvalidArgs, 501: NotFound, 504: Timeout}


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed as urllib does, but the token stays with the engine's origin
    (``fetch.carried``): a redirect elsewhere arrives without it (and is answered 401)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            new.headers = fetch.carried(new.headers, req.full_url, new.full_url)
        return new


_OPENER = urllib.request.build_opener(_Redirects)


def _url(base: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgs(f"engine URL {base!r}: use http(s)://host:port (e.g. http://127.0.0.1:8766)")
    url = base.rstrip("/") + path
    q = {k: v for k, v in (query or {}).items() if v not in (None, False)}
    return url + ("?" + urllib.parse.urlencode({k: ("1" if v is True else v) for k, v in q.items()})
                  if q else "")


def _request(url: str, token: str | None, *, method: str = "GET", body: bytes | None = None,
             content_type: str | None = None, accept: str = "application/json") -> urllib.request.Request:
    headers = {"accept": accept}
    if token:  # the engine's own rule: a token it could never match is refused here, unshown
        headers["authorization"] = f"Bearer {httpguard.check_token(token, option=f'--token / {TOKEN_ENV}')}"
    if content_type:
        headers["content-type"] = content_type
    return urllib.request.Request(url, data=body, method=method, headers=headers)


def _read(resp: Any, limit: int) -> bytes:
    data = resp.read(limit + 1)
    if len(data) > limit:
        raise Internal(f"the engine's answer exceeds the {limit}-byte cap")
    return data


def _raise(exc: urllib.error.HTTPError, url: str) -> WbError:
    try:
        doc = json.loads(_read(exc, 1 << 16) or b"{}")
        message = doc.get("message") or doc.get("error_description") or doc.get("error") or ""
    except (ValueError, WbError, OSError):
        message = ""
    hint = " (send the engine's token: --token or WB_ENGINE_TOKEN)" if exc.code == 401 else ""
    return _KINDS.get(exc.code, Internal)(f"engine {url}: HTTP {exc.code}: {message}{hint}")


def call(base: str, path: str, *, token: str | None, method: str = "GET",
         query: Mapping[str, Any] | None = None, body: bytes | None = None, content_type: str | None = None,
         timeout: float = DEFAULT_TIMEOUT) -> Any:
    """One JSON request; the parsed answer, or the ``WbError`` its status maps to."""
    url = _url(base, path, query)
    try:
        with _OPENER.open(_request(url, token, method=method, body=body, content_type=content_type),
                          timeout=timeout) as resp:
            return json.loads(_read(resp, MAX_ANSWER) or b"null")
    except urllib.error.HTTPError as exc:
        raise _raise(exc, url) from None
    except urllib.error.URLError as exc:
        raise NotFound(f"engine {base}: cannot connect ({exc.reason})") from None
    except TimeoutError:
        raise Timeout(f"engine {url}: no answer within {timeout:g} s") from None


#: A push that builds waits for the engine's compilers (a first build of a lane can take minutes).
BUILD_TIMEOUT = 900.0


def push(base: str, archive: bytes, *, name: str, token: str | None, dry_run: bool = False,
         force: bool = False, first_party: bool = False, build: bool = True,
         timeout: float | None = None) -> Any:
    """Upload a toolkit archive to ``POST /v1/toolkits``; the engine builds what landed unless
    ``build`` is false."""
    wait = timeout if timeout is not None else (BUILD_TIMEOUT if build and not dry_run else DEFAULT_TIMEOUT)
    return call(base, "/v1/toolkits", token=token, method="POST", body=archive,
                content_type="application/gzip",
                query={"name": name, "dry_run": dry_run, "force": force, "first_party": first_party,
                       "build": "1" if build else "0"}, timeout=wait)


def events(base: str, path: str, *, token: str | None, wait: float = 3600.0,
           query: Mapping[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` pairs of an SSE stream until it ends, the server closes it, or
    ``wait`` seconds pass (heartbeats and comments are skipped)."""
    url = _url(base, path, {**(query or {}), "wait": wait})
    deadline = time.monotonic() + wait + 30
    try:
        resp = _OPENER.open(_request(url, token, accept="text/event-stream"), timeout=60)
    except urllib.error.HTTPError as exc:
        raise _raise(exc, url) from None
    except urllib.error.URLError as exc:
        raise NotFound(f"engine {base}: cannot connect ({exc.reason})") from None
    with resp:
        event, data = "message", list[str]()
        while time.monotonic() < deadline:
            line = resp.readline(MAX_EVENT + 1)
            if not line:
                return
            if len(line) > MAX_EVENT:
                raise Internal(f"engine {url}: an event line exceeds the {MAX_EVENT}-byte cap")
            text = line.decode("utf-8", errors="replace").rstrip("\r\n")
            if not text:
                if data:
                    yield event, json.loads("\n".join(data))
                    if event == "end":
                        return
                event, data = "message", []
            elif text.startswith("event:"):
                event = text[6:].strip()
            elif text.startswith("data:"):
                data.append(text[5:].strip())


def toolkit_archive(folder: Path, ident: str) -> bytes:
    """The toolkit folder as a deterministic ``<id>/…`` ``.tar.gz`` (what push uploads):
    every regular file the signature covers (and the manifest and signature sidecar), each
    read through the folder's root so no symlink leads out; a symlink inside is refused."""
    import os
    import stat

    files: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in signing.EXCLUDED_DIRS)
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(folder).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise InvalidArgs(f"{path}: push packs regular files only; replace the symlink with the file "
                                  "it names")
            if stat.S_ISREG(mode):
                data = paths.read_file(folder, rel, signing.MAX_BYTES - total)
                total += len(data)
                files[rel] = data
    return deterministic_targz(ident, files)


def run_on_engine(engine: str, agent: str, task: str, *, token: str | None, options: dict[str, Any],
                  follow: bool = True, json_: bool = False) -> int:
    """``POST /v1/sessions`` then follow its SSE events; exit 0 when the run ends done."""
    doc: dict[str, Any] = {"task": task, "options": options}
    path = Path(agent)
    if agent.endswith(".org") or path.is_file():
        try:
            doc["agent_org"] = path.read_text(encoding="utf-8")  # the engine never reads our paths
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgs(f"{agent}: cannot read the agent definition ({exc})") from None
    else:
        doc["agent"] = agent
    created = call(engine, "/v1/sessions", token=token, method="POST",
                   body=json.dumps(doc).encode(), content_type="application/json")
    sid = created["id"]
    print(f"session {sid} on {engine}", file=sys.stderr, flush=True)
    if not follow:
        emit_json(created) if json_ else typer.echo(sid)
        return 0
    final: dict[str, Any] = {}
    for event, data in events(engine, f"/v1/sessions/{sid}/events", token=token):
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
