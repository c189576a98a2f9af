"""The client side of the engine API (``wbx toolkit push``; ``wbx agent run --engine``,
:func:`run_on_engine`).

HTTP on the one client (``guard.fetch.client``: no proxy or credentials from the environment, no
redirect followed, so the token goes to the URL given and nowhere else). Every exchange has one
deadline that ends it whatever it waits on (``guard.deadline.cut_at``: an engine dripping its answer
a byte at a time is cut too); every answer is read against a size cap. The token comes from
``--token`` or ``WB_ENGINE_TOKEN`` and is never printed.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import typer

from wbcore_runtime.contract.cli_output import emit_json
from wbcore_runtime.contract.errors import CapabilityDenied, Internal, InvalidArgs, NotFound, Timeout, WbError
from wbcore_runtime.store.archive import deterministic_targz
from wbcore_runtime.dispatch.audit import redact_target
from wbcore_runtime.guard import deadline as _deadline
from wbcore_runtime.guard import fetch, httpguard, paths
from wbcore_runtime.trust import signing

TOKEN_ENV = "WB_ENGINE_TOKEN"
MAX_ANSWER = 16 << 20
MAX_EVENT = 4 << 20
DEFAULT_TIMEOUT = 120.0

_KINDS: dict[int, type[WbError]] = {400: InvalidArgs, 401: CapabilityDenied, 403: CapabilityDenied,
                                    404: NotFound, 408: Timeout, 413: InvalidArgs, 421: CapabilityDenied,
                                    422: InvalidArgs, 501: NotFound, 504: Timeout}


def _url(base: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgs(f"engine URL {base!r}: use http(s)://host:port (e.g. http://127.0.0.1:8766)")
    url = base.rstrip("/") + path
    q = {k: v for k, v in (query or {}).items() if v not in (None, False)}
    return url + ("?" + urllib.parse.urlencode({k: ("1" if v is True else v) for k, v in q.items()})
                  if q else "")


@contextlib.contextmanager
def _exchange(url: str, token: str | None, *, timeout: float, method: str = "GET", body: bytes | None = None,
              content_type: str | None = None, accept: str = "application/json") -> Iterator[Any]:
    """One request to the engine, its answer streaming, ended at ``timeout`` seconds from now
    whatever it waits on; an error status is raised as the ``WbError`` it maps to."""
    import httpx

    headers = {"accept": accept, "accept-encoding": "identity"}  # the capped bytes are the sent ones
    if token:  # the engine's own rule: a token it could never match is refused here, unshown
        headers["authorization"] = f"Bearer {httpguard.check_token(token, option=f'--token / {TOKEN_ENV}')}"
    if content_type:
        headers["content-type"] = content_type
    shown = redact_target(url) or url
    with fetch.client(timeout=timeout) as client, _deadline.cut_at(time.monotonic() + timeout) as cut:
        try:
            with client.stream(method, url, headers=headers, content=body, extensions=cut.extensions) as resp:
                if resp.is_redirect:  # never followed: the token is for the URL given
                    where = redact_target(urllib.parse.urljoin(url, resp.headers.get("location", "")))
                    raise InvalidArgs(f"engine {shown}: answered HTTP {resp.status_code}, a redirect to "
                                      f"{where}; give that URL as the engine's")
                if resp.status_code >= 400:
                    raise _raise(resp.status_code, _read(resp, 1 << 16, shown, quiet=True), shown)
                yield resp
        except httpx.HTTPError as exc:
            if cut.fired or isinstance(exc, httpx.TimeoutException):
                raise Timeout(f"engine {shown}: no answer within {timeout:g} s") from None
            why = f"{type(exc).__name__}: {str(exc)[:200]}"
            raise NotFound(f"engine {shown}: cannot connect ({why})") from None
        if cut.fired:  # the deadline ended the answer early: never a short one
            raise Timeout(f"engine {shown}: no answer within {timeout:g} s")


def _read(resp: Any, limit: int, shown: str, *, quiet: bool = False) -> bytes:
    data = bytearray()
    for chunk in resp.iter_raw():
        data += chunk
        if len(data) > limit:
            if quiet:
                return bytes(data[:limit])
            raise Internal(f"engine {shown}: the answer exceeds the {limit}-byte cap")
    return bytes(data)


def _raise(status: int, body: bytes, shown: str) -> WbError:
    try:
        doc = json.loads(body or b"{}")
        message = doc.get("message") or doc.get("error_description") or doc.get("error") or ""
    except (ValueError, AttributeError):
        message = ""
    hint = " (send the engine's token: --token or WB_ENGINE_TOKEN)" if status == 401 else ""
    return _KINDS.get(status, Internal)(f"engine {shown}: HTTP {status}: {message}{hint}")


def call(base: str, path: str, *, token: str | None, method: str = "GET",
         query: Mapping[str, Any] | None = None, body: bytes | None = None, content_type: str | None = None,
         timeout: float = DEFAULT_TIMEOUT) -> Any:
    """One JSON request; the parsed answer, or the ``WbError`` its status maps to."""
    url = _url(base, path, query)
    with _exchange(url, token, timeout=timeout, method=method, body=body, content_type=content_type) as resp:
        data = _read(resp, MAX_ANSWER, redact_target(url) or url)
    return json.loads(data or b"null")


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
    with _exchange(url, token, timeout=wait + 30, accept="text/event-stream") as resp:
        event, data, pending = "message", list[str](), bytearray()
        for chunk in resp.iter_raw():
            pending += chunk
            while (end := pending.find(b"\n")) >= 0:
                line, pending = bytes(pending[:end]), pending[end + 1:]
                text = line.decode("utf-8", errors="replace").rstrip("\r")
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
            if len(pending) > MAX_EVENT:
                raise Internal(f"engine {redact_target(url)}: an event line exceeds the {MAX_EVENT}-byte cap")


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
