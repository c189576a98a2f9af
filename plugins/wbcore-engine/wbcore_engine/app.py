"""The engine service as an ASGI app (starlette): every route, bounded and guarded.

Routes (``/openapi.json`` describes them, :mod:`wbcore_engine.openapi`):

- ``GET  /v1/toolkits`` · ``GET /v1/toolkits/{id}`` · ``GET /v1/toolkits/{id}/verify``
- ``POST /v1/toolkits`` — push: the body is a toolkit archive; it goes through the one install
  path (``contract.installs.service(runtime).install``, served by wbcore-install: staged,
  verified, then landed, all or nothing); ``?dry_run=1`` answers the diff of caps, trust and
  signer and lands nothing
- ``POST /v1/calls/{name}`` — one call through :mod:`wbcore_runtime.dispatch.dispatcher`; its
  ``mounts`` (host folders) are a remote caller's, granted only inside ``WB_MOUNT_ROOTS``
- ``POST /v1/sessions`` · ``GET /v1/sessions/{id}`` · ``GET /v1/sessions/{id}/events`` (SSE) ·
  ``POST|GET /v1/sessions/{id}/review`` · ``DELETE /v1/sessions/{id}`` — the agent loop's
  sessions through :class:`wbcore_engine.sessions.SessionHost` (``501`` when none is installed)
- ``GET  /v1/audit`` · ``GET /v1/audit/events`` (SSE) — the Dock's audit trail
- ``/console/…`` — the web console (:mod:`wbcore_engine.console`): pages over the same
  engine, logged in with the same token, behind the same Host/Origin rules

Every request passes :func:`wbcore_runtime.guard.httpguard.refusal` (bearer token, Host, Origin) first.
Every body is read against a size cap while it arrives and within a deadline; every call,
wait and stream has an upper bound (:class:`EngineLimits`); the connection-level bounds (a deadline
for a whole request, connection and stream caps, the idle timeout) are the HTTP server's
(``wbcore_runtime.contract.http_server``, served by wbcore-http-server). The audit endpoints read
from the end of the trail (tail) or follow it from a cursor (SSE): memory per request is a block
and a batch, not the trail.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from wbcore_engine import sessions as _sessions
from wbcore_runtime.guard import httpguard
from wbcore_runtime.contract import audit_trail, http_server, jsonbound
from wbcore_runtime.contract.errors import ErrorKind, NotFound, WbError

MiB = 1 << 20
#: HTTP status per error kind.
STATUS = {
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.INVALID_ARGS: 400,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.CAPABILITY_DENIED: 403,
    ErrorKind.INTERNAL: 500,
}
#: The principal a client of the engine is named by in the audit trail (pushes, mounts).
REMOTE = "engine"
_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_ARCHIVES = (".tar.gz", ".tgz", ".tar", ".zip")


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Every size and wait the engine bounds (seconds, bytes)."""

    max_push: int = 64 * MiB
    max_json: int = 4 * MiB
    body_wait_s: float = 60.0
    max_call_s: float = 300.0
    max_stream_s: float = 3600.0
    heartbeat_s: float = 15.0
    poll_s: float = 0.25
    max_tail: int = 1000
    max_review: int = 100
    #: Sessions alive at once (not yet done, failed or cancelled) started through this engine.
    max_sessions: int = 32
    #: Ended sessions the session host keeps in memory (their status and events; the oldest
    #: dropped first, a running one never), and for how long each (seconds).
    ended_sessions: int = 100
    ended_session_s: float = 3600.0
    #: Audit decisions sent per SSE read, and the bytes one read of the trail may take.
    audit_batch: int = 500
    audit_read_bytes: int = 1 * MiB
    #: Worker threads the SSE streams' polls share (apart from the routes' default pool).
    stream_threads: int = 8
    #: The connection-level bounds (request deadline, connection and stream caps, idle timeout).
    server: http_server.ServerLimits = http_server.ServerLimits()


class HttpError(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error, self.message = status, error, message


def _error(status: int, error: str, message: str) -> JSONResponse:
    return JSONResponse({"error": error, "message": message}, status_code=status)


def _ident(value: str, what: str) -> str:
    if not _ID.match(value):
        raise HttpError(400, "invalid-args", f"{what} {value[:64]!r} must match [A-Za-z0-9._-]{{1,128}}")
    return value


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "").lower() in ("1", "true", "yes", "on")


def _after(request: Request, default: int) -> int:
    """``?after=`` or, when a client reconnects, its ``Last-Event-ID``."""
    if "after" not in request.query_params and "last-event-id" in request.headers:
        return whole(request.headers["last-event-id"], "Last-Event-ID", default, -1, 1 << 62)
    return whole(request.query_params.get("after"), "?after", default, -1, 1 << 62)


def whole(raw: str | None, what: str, default: int, low: int, high: int) -> int:
    """A count or a sequence number sent as text (the API's query and headers, the console's
    forms and paths): decimal digits within ``low..high``, ``default`` when absent, else 400
    naming it and its range. One parser, so both doors accept and refuse the same values."""
    if raw is None or raw == "":
        return default
    if not re.fullmatch(r"-?[0-9]{1,19}", raw):  # no 1.5 truncated to 1, no 1e3, no 4300-digit text
        raise HttpError(400, "invalid-args", f"{what}={raw[:32]!r} is not a whole number")
    if not low <= (value := int(raw)) <= high:
        raise HttpError(400, "invalid-args", f"{what}={value} is outside {low}..{high}")
    return value


def _seconds(request: Request, name: str, default: float, low: float, high: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise HttpError(400, "invalid-args", f"?{name}={raw[:32]!r} is not a number of seconds") from None
    if not low <= value <= high:  # NaN and infinities too
        raise HttpError(400, "invalid-args", f"?{name}={raw[:32]} is outside {low:g}..{high:g} seconds")
    return value


async def read_body(request: Request, limit: int, wait_s: float) -> bytes:
    """The request body, refused (413) as soon as it passes ``limit`` bytes and (408)
    when it has not fully arrived within ``wait_s`` seconds."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, "too-large", f"the body of {declared} bytes exceeds the {limit}-byte cap")
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(wait_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HttpError(413, "too-large", f"the body exceeds the {limit}-byte cap")
                chunks.append(chunk)
    except TimeoutError:
        raise HttpError(408, "timeout", f"the body did not arrive within {wait_s:g} s") from None
    return b"".join(chunks)


async def read_json(request: Request, limits: EngineLimits) -> dict[str, Any]:
    raw = await read_body(request, limits.max_json, limits.body_wait_s)
    if not raw.strip():
        return {}
    try:
        doc = jsonbound.loads(raw)  # too deep a document is a 400, never a RecursionError's 500
    except jsonbound.JsonRefused as exc:
        raise HttpError(exc.status, "invalid-args" if exc.status == 400 else "too-large", str(exc)) from None
    if not isinstance(doc, dict):
        raise HttpError(400, "invalid-args", "the body must be a JSON object")
    return doc


def _text_or_b64(key: str, data: bytes) -> dict[str, str]:
    try:
        return {key: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{key}_b64": base64.b64encode(data).decode()}


def sse(event: str, data: Any, ident: Any = None) -> bytes:
    """One Server-Sent Events message (``data`` as one JSON line)."""
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


class Engine:
    """The routes' shared state: the runtime, the session host, the limits."""

    def __init__(
        self,
        runtime: Any,
        *,
        sessions: _sessions.SessionHost | None = None,
        limits: EngineLimits = EngineLimits(),
    ) -> None:
        self.runtime = runtime
        self.sessions = sessions if sessions is not None else _sessions.host_for(runtime)
        self.limits = limits
        bound = getattr(self.sessions, "bound_ended", None)  # optional: a host may bound itself
        if callable(bound):
            bound(limits.ended_sessions, limits.ended_session_s)
        # discovery, installs and resolution share the runtime: one request at a time changes them
        self.lock = threading.Lock()
        # the sessions this engine started and may still be running (the max_sessions cap)
        self.session_lock = threading.Lock()
        self.started: set[str] = set()
        self._stream_limiter: anyio.CapacityLimiter | None = None  # made on the event loop, at first use

    async def thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args)

    async def stream_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A stream's poll, on threads of its own: however many subscribers poll, the other
        routes keep the default pool (and a poll never blocks, so none holds a thread idle)."""
        if self._stream_limiter is None:
            self._stream_limiter = anyio.CapacityLimiter(self.limits.stream_threads)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._stream_limiter)

    # --- toolkits ---------------------------------------------------------------------

    def _list(self) -> dict[str, Any]:
        from wbcore_runtime.trust import verdict as trust

        with self.lock:
            found = self.runtime.discover(refresh=True)
            return {
                "toolkits": [
                    {
                        "id": t.id, "version": t.manifest.version, "status": t.manifest.status,
                        "exec": t.manifest.exec, "trust": t.manifest.trust, "tagline": t.manifest.tagline,
                        "unavailable": trust.unavailable_reason(t, self.runtime),
                    }
                    for t in found.toolkits.values()
                ],
                "errors": [str(e) for e in found.errors],
            }

    def _show(self, ident: str) -> dict[str, Any]:
        with self.lock:
            tk = self.runtime.toolkit(ident)
            m = tk.manifest
            return {
                "id": tk.id, "version": m.version, "title": m.title, "tagline": m.tagline, "status": m.status,
                "exec": m.exec, "trust": m.trust, "signer": m.author_did, "caps": list(m.caps),
                "effective_caps": sorted(self.runtime.effective_caps(tk)),
                "skills": [s.slug for s in tk.skills],
            }

    def _verify(self, ident: str) -> dict[str, Any]:
        with self.lock:
            return self.runtime.verify(ident).as_dict()

    async def toolkits(self, request: Request) -> Response:
        return JSONResponse(await self.thread(self._list))

    async def toolkit(self, request: Request) -> Response:
        ident = _ident(request.path_params["ident"], "toolkit id")
        return JSONResponse(await self.thread(self._show, ident))

    async def verify(self, request: Request) -> Response:
        ident = _ident(request.path_params["ident"], "toolkit id")
        report = await self.thread(self._verify, ident)
        return JSONResponse(report, status_code=200 if report["ok"] else 422)

    # --- push ----------------------------------------------------------------------------

    async def push(self, request: Request) -> Response:
        name = request.query_params.get("name", "toolkit.tar.gz")
        if not name.endswith(_ARCHIVES) or "/" in name or name.startswith("."):
            raise HttpError(
                400, "invalid-args", f"?name={name[:64]!r}: name the archive <id>.tar.gz, .tgz, .tar or .zip"
            )
        data = await read_body(request, self.limits.max_push, self.limits.body_wait_s)
        if not data:
            raise HttpError(
                400, "invalid-args",
                "the body is empty: send the toolkit archive (wbx toolkit push packs one)",
            )
        dry = _flag(request, "dry_run")
        build = request.query_params.get("build", "1").lower() not in ("0", "false", "no")
        result = await self.thread(
            self._push, data, name, dry, _flag(request, "force"), _flag(request, "first_party"), build
        )
        return JSONResponse(result)

    def _push(self, data: bytes, name: str, dry: bool, force: bool, first_party: bool,
              build: bool = True) -> dict[str, Any]:
        from wbcore_runtime.contract import installs
        from wbcore_runtime.store import leftovers
        from wbcore_runtime.guard import unpack

        home = self.runtime.home
        try:
            install = installs.service(self.runtime)  # NotFound naming wbcore-install when none is served
        except WbError as exc:
            if not dry:  # a push meant to land is audited whatever stops it, a missing installer too
                self._audit_push(data, name, "denied", time.perf_counter(), kind=exc.kind.value,
                                 reason="no-installer")
            raise
        base = home / leftovers.STAGING
        base.mkdir(parents=True, exist_ok=True)
        work = leftovers.mkdtemp(leftovers.STAGING_PREFIX, dir=base)
        try:
            archive = work / name
            fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            kw = {"force": force, "env": self.runtime.env, "first_party": first_party}
            with self.lock:
                if dry:
                    changes = install.preview(home, str(archive), **kw)
                    return {"dry_run": True, "changes": [c.as_dict() for c in changes]}
                t0 = time.perf_counter()
                try:
                    landed = install.install(home, str(archive), **kw)
                except WbError as exc:
                    self._audit_push(data, name, "denied", t0, kind=exc.kind.value, reason="install-refused")
                    raise
                self._audit_push(data, name, "allowed", t0, target=" ".join(i.entry.id for i in landed))
                self.runtime.discover(refresh=True)
                # A pushed toolkit is built here, in the engine's own build sandbox, so its
                # commands answer at once (?build=0 lands it only; POST …/build later).
                built = [self._build(i.entry.id) for i in landed] if build else []
            return {
                "dry_run": False,
                "installed": [
                    {
                        "id": i.entry.id, "version": i.entry.version, "trust": i.entry.trust,
                        "signer": i.entry.signer, "digest": i.entry.digest, "caps": list(i.caps),
                        "unchanged": i.unchanged, "path": str(i.path),
                    }
                    for i in landed
                ],
                "builds": [b for b in built if b is not None],
            }
        finally:
            unpack.remove_tree(work)

    def _build(self, ident: str, *, force: bool = False) -> dict[str, Any] | None:
        """``builder.build_row`` for a toolkit that has something to build (else ``None``)."""
        from wbcore_runtime.build import builder

        if not builder.wants_build(self.runtime.toolkit(ident).manifest):
            return None
        return builder.build_row(self.runtime, ident, force=force)

    async def build(self, request: Request) -> Response:
        ident = request.path_params["ident"]
        force = _flag(request, "force")

        def run() -> dict[str, Any]:
            with self.lock:
                row = self._build(ident, force=force)
            if row is None:
                raise HttpError(
                    400,
                    "invalid-args",
                    f"{ident} has nothing to build (no buildable #+EXEC with #+BUILD_SRC)",
                )
            return row

        return JSONResponse(await self.thread(run))

    def _audit_push(self, data: bytes, name: str, outcome: str, t0: float, **kw: Any) -> None:
        """One audit line per push that was meant to land: who (the engine's token holder),
        the archive's sha256, what landed or why it did not."""
        from wbcore_runtime.dispatch.audit import digest

        self.runtime.dock.audit.record(
            principal=REMOTE, cap="engine", op="push", args_digest=digest(data), outcome=outcome,
            nbytes=len(data), ms=(time.perf_counter() - t0) * 1000, **({"target": name} | kw),
        )

    # --- calls ---------------------------------------------------------------------------

    async def call(self, request: Request) -> Response:
        name = _ident(request.path_params["name"], "command name")
        doc = await read_json(request, self.limits)
        argv = doc.get("argv", [])
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise HttpError(400, "invalid-args", "'argv' must be a list of strings")
        if "stdin_b64" in doc:
            try:
                stdin = base64.b64decode(str(doc["stdin_b64"]), validate=True)
            except ValueError:
                raise HttpError(400, "invalid-args", "'stdin_b64' is not base64") from None
        else:
            stdin = str(doc.get("stdin", "")).encode()
        timeout = doc.get("timeout", self.limits.max_call_s)
        if not isinstance(timeout, (int, float)) or not 0 < timeout <= self.limits.max_call_s:
            raise HttpError(
                400, "invalid-args", f"'timeout' must be a number in (0, {self.limits.max_call_s:g}] seconds"
            )
        tier = doc.get("tier")
        from wbcore_runtime.dispatch import mounts as granting

        # bounded here (count, bytes); granted by the core's one check, as the engine client's
        mounts = granting.requested(doc.get("mounts"), "'mounts'")
        cancel = threading.Event()
        try:
            result = await self.thread(self._call, name, argv, stdin, float(timeout), tier, cancel, mounts)
        finally:
            cancel.set()  # a client that left stops the guest at its next tick
        return JSONResponse({"exit_code": result.exit_code, **_text_or_b64("stdout", result.stdout),
                             **_text_or_b64("stderr", result.stderr), "usage": result.usage.as_dict()})

    def _call(
        self, name: str, argv: list[str], stdin: bytes, timeout: float, tier: Any, cancel: threading.Event,
        mounts: tuple[str, ...] = (),
    ) -> Any:
        from wbcore_runtime.dispatch import dispatcher as dispatch

        # the token holder is not the deployer: its mounts only inside WB_MOUNT_ROOTS, audited as "engine"
        return dispatch.call_command(self.runtime, name, tuple(argv), stdin, timeout=timeout, cancel=cancel,
                                     tier=str(tier) if tier else None, mounts=mounts, remote=REMOTE)

    # --- the audit trail ------------------------------------------------------------------

    async def audit(self, request: Request) -> Response:
        tail = whole(request.query_params.get("tail"), "?tail", 100, 1, self.limits.max_tail)
        after = whole(request.query_params.get("after"), "?after", -1, -1, 1 << 62)
        # read backwards from the end of the trail: a block and `tail` lines, whatever its size
        trail = audit_trail.service(self.runtime)
        entries = await self.thread(lambda: trail.tail(self.runtime.dock.audit, tail, after=after))
        return JSONResponse({"entries": entries})

    async def audit_events(self, request: Request) -> Response:
        after = _after(request, -1)
        wait = _seconds(request, "wait", self.limits.max_stream_s, 0.1, self.limits.max_stream_s)
        trail = audit_trail.service(self.runtime)  # none served: an error answer, not a broken stream

        async def stream() -> AsyncIterator[bytes]:
            # reads only what is new, a batch at a time
            cursor = trail.cursor(self.runtime.dock.audit, after)
            deadline, beat = time.monotonic() + wait, time.monotonic()
            yield sse("ready", {"after": after})
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    return
                entries: list[dict[str, Any]] = []
                if cursor.pending():  # one stat on the event loop; a thread only when the trail grew
                    entries = await self.stream_thread(cursor.read, self.limits.audit_batch,
                                                       self.limits.audit_read_bytes)
                for e in entries:
                    yield sse("audit", e, e.get("seq"))
                if not entries:
                    if time.monotonic() - beat >= self.limits.heartbeat_s:
                        beat = time.monotonic()
                        yield b": heartbeat\n\n"
                    await anyio.sleep(self.limits.poll_s)
            yield sse("end", {"reason": "the stream's wait ended", "after": cursor.last})

        return _stream(stream())

    # --- agent sessions ---------------------------------------------------------------------

    def _host(self) -> _sessions.SessionHost:
        if self.sessions is None:
            raise HttpError(501, "not-implemented", _sessions.NOT_AVAILABLE)
        return self.sessions

    async def session_create(self, request: Request) -> Response:
        host = self._host()
        doc = await read_json(request, self.limits)
        agent: Any = doc.get("agent")
        task = doc.get("task")
        if not isinstance(task, str) or not task:
            raise HttpError(
                400, "invalid-args", 'send {"agent": <id> or "agent_org": <Org text>, "task": <text>}'
            )
        if isinstance(doc.get("agent_org"), str):
            # the definition itself, as the client sent it, read by the agent loop that runs it
            try:
                loop = self.runtime.agents
            except NotFound as exc:  # an embedder's session host, and no loop to read Org
                raise HttpError(501, "not-implemented", f"agent_org: {exc.message}") from None
            agent = loop.parse(doc["agent_org"], "agent_org")
        elif not isinstance(agent, str) or not agent:
            raise HttpError(
                400, "invalid-args", 'send {"agent": <id> or "agent_org": <Org text>, "task": <text>}'
            )
        else:
            # an id the engine's search path knows; never a path on the engine's host
            agent = _ident(agent, "agent id")
            if agent.endswith(".org"):
                raise HttpError(
                    400,
                    "invalid-args",
                    f"agent {agent!r}: name an agent id, or send the definition "
                    "as agent_org (wbx agent run --engine does)",
                )
        options = doc.get("options", {})
        if not isinstance(options, dict):
            raise HttpError(400, "invalid-args", "'options' must be a JSON object")
        options = _sessions.check_options(options)  # every number within its documented range, else 400
        sid = await self.thread(lambda: self._create(host, agent, task, options))
        status = await self.thread(host.status, sid)
        return JSONResponse(
            {"id": sid, **dict(status), "events": f"/v1/sessions/{sid}/events"}, status_code=201
        )

    def _create(self, host: _sessions.SessionHost, agent: Any, task: str, options: dict[str, Any]) -> str:
        """Start a session unless :attr:`EngineLimits.max_sessions` are alive (429)."""
        with self.session_lock:
            alive = set()
            for sid in self.started:
                try:
                    if host.status(sid).get("status") not in _sessions.TERMINAL:
                        alive.add(sid)
                except WbError:
                    continue  # gone from the host: not alive
            self.started = alive
            if len(alive) >= self.limits.max_sessions:
                raise HttpError(
                    429,
                    "too-many-sessions",
                    f"{len(alive)} sessions are running (the cap is "
                    f"{self.limits.max_sessions}); wait for one to end or cancel one",
                )
            sid = host.create(agent=agent, task=task, options=options)
            self.started.add(sid)
            return sid

    async def session_status(self, request: Request) -> Response:
        host = self._host()
        sid = _ident(request.path_params["sid"], "session id")
        return JSONResponse(dict(await self.thread(host.status, sid)))

    async def session_cancel(self, request: Request) -> Response:
        host = self._host()
        sid = _ident(request.path_params["sid"], "session id")
        return JSONResponse(dict(await self.thread(host.cancel, sid)))

    async def session_review(self, request: Request) -> Response:
        host = self._host()
        sid = _ident(request.path_params["sid"], "session id")
        if request.method == "POST":
            item = await read_json(request, self.limits)
            if not item:
                raise HttpError(400, "invalid-args", "send the review item as a JSON object")
            return JSONResponse(dict(await self.thread(lambda: host.put_review(sid, item))), status_code=201)
        limit = whole(request.query_params.get("limit"), "?limit", 10, 1, self.limits.max_review)
        items = await self.thread(lambda: host.take_review(sid, limit=limit))
        return JSONResponse({"items": [dict(i) for i in items]})

    async def session_events(self, request: Request) -> Response:
        host = self._host()
        sid = _ident(request.path_params["sid"], "session id")
        after = _after(request, 0)
        wait = _seconds(request, "wait", self.limits.max_stream_s, 0.1, self.limits.max_stream_s)
        await self.thread(host.status, sid)  # an unknown id is 404 before the stream starts

        def gone(exc: WbError) -> dict[str, Any]:
            # the host dropped the session (it ended long ago, docs/engine.md "Bounds")
            return {"status": "gone", "error": exc.name, "message": exc.message}

        def poll(a: int) -> tuple[list[Any], dict[str, Any]]:
            # never blocks: an idle subscriber holds no thread between polls
            events = list(host.events(sid, after=a, timeout=0))
            try:
                return events, dict(host.status(sid))
            except WbError as exc:  # dropped between the two calls: its events still go out
                return events, gone(exc)

        async def stream() -> AsyncIterator[bytes]:
            last, deadline, beat = after, time.monotonic() + wait, time.monotonic()
            yield sse("ready", {"session": sid, "after": last})
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    return
                try:
                    events, status = await self.stream_thread(poll, last)
                except WbError as exc:
                    events, status = [], gone(exc)
                for ev in events:
                    last = int(ev.get("seq", last + 1))
                    yield sse(str(ev.get("type", "step")), dict(ev), last)
                    if ev.get("type") == "end":  # the host's own end event closes the stream
                        return
                if status["status"] == "gone":
                    yield sse("end", status, last)
                    return
                if status.get("status") in _sessions.TERMINAL:
                    # the run ended: what it logged before ending, then the end
                    try:
                        tail = (await self.stream_thread(poll, last))[0]
                    except WbError:
                        tail = []  # dropped meanwhile: the status above is the end
                    for ev in tail:
                        last = int(ev.get("seq", last + 1))
                        yield sse(str(ev.get("type", "step")), dict(ev), last)
                        if ev.get("type") == "end":
                            return
                    yield sse("end", dict(status), last)
                    return
                if not events:
                    if time.monotonic() - beat >= self.limits.heartbeat_s:
                        beat = time.monotonic()
                        yield b": heartbeat\n\n"
                    await anyio.sleep(self.limits.poll_s)
            yield sse("end", {"reason": "the stream's wait ended", "after": last})

        return _stream(stream())

    async def openapi(self, request: Request) -> Response:
        from wbcore_engine.openapi import document

        return JSONResponse(document())


def _stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


def _wrap(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def route(request: Request) -> Response:
        try:
            return await handler(request)
        except HttpError as exc:
            return _error(exc.status, exc.error, exc.message)
        except WbError as exc:
            return _error(STATUS[exc.kind], exc.name, exc.message)

    return route


def build(runtime: Any, *, token: str | None, served: http_server.HttpServer, bind: str = "127.0.0.1",
          allow_hosts: Any = (), sessions: _sessions.SessionHost | None = None,
          limits: EngineLimits = EngineLimits()) -> Any:
    """The engine's ASGI app, guarded by :class:`wbcore_runtime.guard.httpguard.Guard` (token, Host,
    Origin); its streams gated by ``served``, the HTTP server that will serve it (the caller chose it
    once, with ``contract.http_server.service(runtime)``: none served is ``NotFound`` naming
    wbcore-http-server)."""
    engine = Engine(runtime, sessions=sessions, limits=limits)
    routes = [
        Route("/openapi.json", _wrap(engine.openapi), methods=["GET"]),
        Route("/v1/toolkits", _wrap(engine.toolkits), methods=["GET"]),
        Route("/v1/toolkits", _wrap(engine.push), methods=["POST"]),
        Route("/v1/toolkits/{ident}/build", _wrap(engine.build), methods=["POST"]),
        Route("/v1/toolkits/{ident}", _wrap(engine.toolkit), methods=["GET"]),
        Route("/v1/toolkits/{ident}/verify", _wrap(engine.verify), methods=["GET"]),
        Route("/v1/calls/{name}", _wrap(engine.call), methods=["POST"]),
        Route("/v1/audit", _wrap(engine.audit), methods=["GET"]),
        Route("/v1/audit/events", _wrap(engine.audit_events), methods=["GET"]),
        Route("/v1/sessions", _wrap(engine.session_create), methods=["POST"]),
        Route("/v1/sessions/{sid}", _wrap(engine.session_status), methods=["GET"]),
        Route("/v1/sessions/{sid}", _wrap(engine.session_cancel), methods=["DELETE"]),
        Route("/v1/sessions/{sid}/events", _wrap(engine.session_events), methods=["GET"]),
        Route("/v1/sessions/{sid}/review", _wrap(engine.session_review), methods=["GET", "POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.engine = engine
    policy = httpguard.Policy.for_bind(bind, httpguard.check_token(token, option="--token / WB_ENGINE_TOKEN"),
                                       allow_hosts, surface="wbx engine serve")
    # the web console (/console): same process, same Host/Origin names, the token as its login
    from wbcore_engine import console

    both = console.Paths(console.app(engine, policy), app)
    # the SSE routes (API and console) hold their connection: capped per client and in all,
    # behind the token (or login) check
    gated = served.stream_gate(both, limits.server, is_stream=lambda scope: scope["path"].endswith("/events"))
    return console.Split(gated, httpguard.Guard(gated, policy), policy)

