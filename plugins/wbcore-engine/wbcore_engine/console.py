"""The engine's web console: server-rendered pages (Jinja2) over the same engine, at ``/console``.

Same process, same token, same Host/Origin rules as the API:

- **Host / Origin** go through :func:`wbcore_runtime.guard.httpguard.refusal` with the engine's
  own names (421 / 403), before anything else;
- **login** is the engine's token, entered once on ``/console/login`` and compared by
  :func:`wbcore_runtime.guard.httpguard.token_matches`; it opens a console session kept
  server-side, named by a random id in an http-only, ``SameSite=Strict`` cookie scoped to
  ``/console`` (the token itself is never put in a cookie or a page);
- **CSRF**: every state-changing form (grant, revoke, push, start, cancel, review, logout)
  carries the session's CSRF token, compared in constant time; the login form carries a
  double-submit token of its own;
- without a session every page answers ``401`` saying only that the token is needed.

Every read is bounded: toolkits and audit lines come a page at a time
(:data:`PAGE`, :data:`AUDIT_PAGE`; a filtered audit page looks at no more than
:data:`AUDIT_SCAN` lines), request bodies are read against the API's caps
(:func:`wbcore_engine.app.read_body`), live views reuse the API's SSE streams (capped per
client by the HTTP server's ``stream_gate``, ``wbcore_runtime.contract.http_server``), and the
tables the console keeps (logins, sessions it started, staged pushes) have fixed sizes.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from wbcore_engine import app as _app
from wbcore_engine import sessions as _sessions
from wbcore_runtime.contract import audit_trail
from wbcore_runtime.guard import httpguard
from wbcore_runtime.contract.errors import WbError

PREFIX = "/console"
COOKIE = "wbx_console"
LOGIN_COOKIE = "wbx_console_login"
#: Console logins alive at once (the oldest is dropped past it) and how long one lasts.
MAX_LOGINS = 64
LOGIN_TTL_S = 12 * 3600.0
#: Rows per page of the toolkits list and of the audit trail; audit lines one filtered page may look at.
PAGE = 50
AUDIT_PAGE = 50
AUDIT_SCAN = 20_000
#: Sessions the console lists (the newest it started), pushes staged for confirmation, pipeline runs listed.
MAX_SESSIONS_LISTED = 100
MAX_STAGED_PUSHES = 2
STAGED_TTL_S = 600.0
MAX_PIPELINE_RUNS = 50
#: A console form (urlencoded) is small; a push form carries the archive (the API's push cap).
MAX_FORM = 64 << 10
#: Characters of a tool call's input or output shown per step (the rest is cut, and says so).
MAX_SHOWN = 4000

_HEADERS = {
    "cache-control": "no-store",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with a form
    # post, which the engine's Origin rule (rightly) refuses
    "referrer-policy": "same-origin",
    # everything is served by the engine: no CDN, no inline script
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' "
                               "data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; "
                               "base-uri 'none'",
}


class Console:
    """The console's routes and the little state it keeps (bounded tables)."""

    def __init__(self, engine: Any, policy: httpguard.Policy) -> None:
        import jinja2

        self.engine = engine
        self.policy = policy
        self.env = jinja2.Environment(loader=jinja2.PackageLoader("wbcore_engine", "templates"),
                                      autoescape=True, trim_blocks=True, lstrip_blocks=True)
        self.env.filters["clip"] = _clip
        self.env.filters["short"] = lambda v: v if not v or len(v) <= 32 else f"{v[:22]}…{v[-6:]}"
        self.env.filters["when"] = lambda t: (
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(t))) if t else ""
        )
        self.lock = threading.Lock()
        self.logins: OrderedDict[str, tuple[str, float]] = OrderedDict()  # login id -> (csrf, expiry)
        self.started: OrderedDict[str, dict[str, Any]] = OrderedDict()  # session id -> what started it
        self.staged: OrderedDict[str, tuple[bytes, str, bool, bool, float]] = OrderedDict()
        self.chain: dict[str, Any] | None = None  # the last chain verification
        self.verifying = False  # one verification of the whole chain at a time

    # --- login state --------------------------------------------------------------------

    def login(self) -> tuple[str, str]:
        sid, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self.lock:
            self.logins[sid] = (csrf, time.monotonic() + LOGIN_TTL_S)
            while len(self.logins) > MAX_LOGINS:
                self.logins.popitem(last=False)
        return sid, csrf

    def csrf_of(self, request: Request) -> str | None:
        """The CSRF token of this request's login, or ``None`` when it has none (or it expired)."""
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        with self.lock:
            got = self.logins.get(sid)
            if got is None:
                return None
            if got[1] < time.monotonic():
                del self.logins[sid]
                return None
            return got[0]

    def logout(self, request: Request) -> None:
        with self.lock:
            self.logins.pop(request.cookies.get(COOKIE, ""), None)

    # --- rendering ----------------------------------------------------------------------

    def page(self, request: Request, template: str, code: int = 200, **ctx: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(prefix=PREFIX, csrf=self.csrf_of(request),
                                                      path=request.url.path, **ctx)
        return HTMLResponse(html, status_code=code, headers=_HEADERS)

    def need_login(self, request: Request) -> HTMLResponse:
        return self.page(request, "needed.html", code=401, next=request.url.path)

    def problem(self, request: Request, status: int, title: str, message: str) -> HTMLResponse:
        return self.page(request, "problem.html", code=status, title=title, message=message)

    async def form(self, request: Request, *, limit: int = MAX_FORM) -> dict[str, str]:
        """A urlencoded form, read against ``limit`` bytes and the API's body deadline."""
        from wbcore_engine.app import read_body

        raw = await read_body(request, limit, self.engine.limits.body_wait_s)
        try:
            pairs = parse_qsl(
                raw.decode("utf-8"), keep_blank_values=True, max_num_fields=64, strict_parsing=False
            )
        except (UnicodeDecodeError, ValueError) as exc:
            raise Refused(400, "bad form", f"the form could not be read: {exc}") from None
        return dict(pairs)

    def check_csrf(self, request: Request, sent: str | None) -> None:
        want = self.csrf_of(request)
        if want is None:
            raise Refused(401, "login needed", "log in with the engine's token first")
        if not sent or not hmac.compare_digest(sent.encode(), want.encode()):
            raise Refused(
                403, "CSRF token missing or wrong",
                "this form did not come from a console page of this login; reload the page and try again",
            )


class Refused(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


def _clip(value: Any, n: int = MAX_SHOWN) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= n else text[:n] + f"… ({len(text) - n} more characters)"


def _caps(raw: str) -> list[str]:
    caps = [c for c in raw.replace(",", " ").split() if c]
    if len(caps) > 64 or any(len(c) > 64 for c in caps):
        raise Refused(400, "bad caps", "name at most 64 caps of at most 64 characters each")
    return list(dict.fromkeys(caps))


# --- pages ----------------------------------------------------------------------------------


async def login_page(c: Console, request: Request) -> Response:
    if request.method == "GET":
        token = secrets.token_urlsafe(24)  # the login form's double-submit CSRF token
        resp = c.page(request, "login.html", login_csrf=token, next=_next(request.query_params.get("next")))
        resp.set_cookie(LOGIN_COOKIE, token, max_age=600, path=PREFIX, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
        return resp
    form = await c.form(request)
    sent, kept = form.get("login_csrf", ""), request.cookies.get(LOGIN_COOKIE, "")
    if not sent or not kept or not hmac.compare_digest(sent.encode(), kept.encode()):
        raise Refused(403, "CSRF token missing or wrong", "reload the login page and enter the token again")
    given = form.get("token", "")
    if c.policy.token is None or not httpguard.secret_matches(given.strip().encode("utf-8"), c.policy.token):
        return c.page(request, "login.html", code=401, login_csrf=sent, next=_next(form.get("next")),
                      error="that is not this engine's token")
    sid, _ = c.login()
    done = RedirectResponse(_next(form.get("next")), status_code=303, headers=_HEADERS)
    done.set_cookie(COOKIE, sid, max_age=int(LOGIN_TTL_S), path=PREFIX, httponly=True, samesite="strict",
                    secure=request.url.scheme == "https")
    done.delete_cookie(LOGIN_COOKIE, path=PREFIX)
    return done


def _next(raw: str | None) -> str:
    """Where to go after logging in: a console path only (never another site)."""
    if (
        raw
        and raw.startswith(PREFIX + "/")
        and "//" not in raw
        and "\\" not in raw
        and not raw.startswith(PREFIX + "/login")
    ):
        return raw
    return PREFIX + "/toolkits"


async def logout(c: Console, request: Request) -> Response:
    form = await c.form(request)
    c.check_csrf(request, form.get("csrf"))
    c.logout(request)
    resp = RedirectResponse(PREFIX + "/login", status_code=303, headers=_HEADERS)
    resp.delete_cookie(COOKIE, path=PREFIX)
    return resp


# --- toolkits ---


def _row(rt: Any, tk: Any) -> dict[str, Any]:
    m = tk.manifest
    return {"id": tk.id, "version": m.version, "trust": m.trust, "signer": m.author_did, "status": m.status,
            "declared": list(m.caps), "effective": sorted(rt.effective_caps(tk)), "tagline": m.tagline}


async def toolkits(c: Console, request: Request) -> Response:
    q = request.query_params.get("q", "")[:128].lower()
    page = _app.whole(request.query_params.get("page"), "page", 1, 1, 1 << 20)
    refresh = request.query_params.get("refresh") == "1"

    def read() -> tuple[list[dict[str, Any]], int, list[str]]:
        rt = c.engine.runtime
        with c.engine.lock:
            found = rt.discover(refresh=refresh)
            ids = sorted(i for i in found.toolkits if not q or q in i.lower())
            chosen = ids[(page - 1) * PAGE: page * PAGE]  # only one page's rows are built (and verified)
            rows = []
            for i in chosen:
                row = _row(rt, found.toolkits[i])
                report = rt.verify(i)
                failed = [c for c in report.checks if not c.ok and not c.warning]
                row["verified"] = report.ok
                row["verify_note"] = f"{failed[0].area}: {failed[0].message}"[:200] if failed else ""
                rows.append(row)
            return rows, len(ids), [str(e)[:300] for e in found.errors[:20]]

    rows, total, errors = await c.engine.thread(read)
    return c.page(
        request, "toolkits.html", rows=rows, total=total, page=page, pages=max(1, -(-total // PAGE)), q=q,
        errors=errors,
    )


def _show(c: Console, ident: str) -> dict[str, Any]:
    from wbcore_runtime.trust import consent

    rt = c.engine.runtime
    with c.engine.lock:
        tk = rt.toolkit(ident)
        row = _row(rt, tk)
        report = rt.verify(ident).as_dict()
        g = consent.ConsentStore(rt.home).get(ident)
    row["granted"] = sorted(g.caps) if g else []
    row["granted_env"] = sorted(g.env) if g else []  # variable names only, never their values
    row["checks"] = report["checks"]
    row["ok"] = report["ok"]
    return row


async def toolkit(c: Console, request: Request) -> Response:
    from wbcore_engine.app import _ident

    ident = _ident(request.path_params["ident"], "toolkit id")
    row = await c.engine.thread(_show, c, ident)
    return c.page(request, "toolkit.html", tk=row, flash=request.query_params.get("done", "")[:300])


async def change_caps(c: Console, request: Request) -> Response:
    """Grant or revoke: first a confirmation showing exactly what changes, then (confirm=1) the change."""
    from wbcore_engine.app import _ident
    from wbcore_runtime.trust import consent

    ident = _ident(request.path_params["ident"], "toolkit id")
    action = request.path_params["action"]
    form = await c.form(request)
    c.check_csrf(request, form.get("csrf"))
    caps = _caps(form.get("caps", ""))
    rt = c.engine.runtime

    def plan() -> dict[str, Any]:
        with c.engine.lock:
            tk = rt.toolkit(ident)
            old = consent.ConsentStore(rt.home).get(ident)
            before = sorted(old.caps) if old else []
            if action == "grant":
                wanted, signer = consent.checked_grant(
                    rt, tk, caps, []
                )  # the one grant decision (wbx toolkit grant's)
                after = (
                    sorted(set(before) | set(wanted)) if not old or old.signer == signer else sorted(wanted)
                )
            else:
                if old is None:
                    raise Refused(400, "nothing to revoke", f"{ident} has no grants to revoke")
                unknown = [x for x in caps if x not in old.caps]
                if unknown:
                    raise Refused(400, "not granted", f"{ident} holds no grant of {' '.join(unknown)}")
                wanted, signer = caps, old.signer
                after = sorted(set(before) - set(caps)) if caps else []
            # the effective caps the change would leave, by the one effective-caps function
            would = consent.Grant(
                ident, frozenset(after), signer, time.time(), old.env if old else frozenset()
            )
            return {"before": before, "after": after, "added": sorted(set(after) - set(before)),
                    "removed": sorted(set(before) - set(after)), "signer": signer, "wanted": wanted,
                    "effective": sorted(rt.effective_caps(tk)),
                    "effective_after": sorted(rt.effective_caps(tk, assume=would))}

    p = await c.engine.thread(plan)
    if form.get("confirm") != "1":
        return c.page(request, "confirm.html", action=action, ident=ident, plan=p, caps=" ".join(caps))

    def apply() -> str:
        store = consent.ConsentStore(rt.home)
        with c.engine.lock:
            if action == "grant":
                store.grant(ident, p["wanted"], p["signer"])
            else:
                store.revoke(ident, caps or None)
            rt.discover(refresh=True)
            effective = sorted(rt.effective_caps(rt.toolkit(ident)))
        # one audit line per change, like a push: who (the console's login), what, on which toolkit
        rt.dock.audit.record(principal="console", cap="consent", op=action, args_digest="", outcome="allowed",
                             target=f"{ident}:{','.join(p['added'] or p['removed']) or '-'}")
        return (f"{action} {' '.join(p['added'] or p['removed']) or 'nothing'}; effective now: "
                f"{' '.join(effective) or 'none'}")

    done = await c.engine.thread(apply)
    return RedirectResponse(f"{PREFIX}/toolkits/{quote(ident)}?{urlencode({'done': done})}", status_code=303,
                            headers=_HEADERS)


async def push(c: Console, request: Request) -> Response:
    """GET: the form. POST with a file: the dry run's diff, the archive staged. POST with
    ``staged``: land it (the API's push path)."""
    if request.method == "GET":
        return c.page(request, "push.html")
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        return await _push_preview(c, request)
    form = await c.form(request)
    c.check_csrf(request, form.get("csrf"))
    key = form.get("staged", "")
    with c.lock:
        got = c.staged.pop(key, None)
    if got is None or got[4] < time.monotonic():
        raise Refused(
            400, "nothing staged", "the previewed archive is gone (it is kept 10 minutes); upload it again"
        )
    data, name, force, first_party, _ = got
    result = await c.engine.thread(c.engine._push, data, name, False, force, first_party, True)
    return c.page(request, "pushed.html", result=result)


async def _push_preview(c: Console, request: Request) -> Response:
    # the whole upload read against the push cap and the body deadline while it arrives (the API's
    # read_body): starlette's parser caps form fields, but spools a file part to disk unbounded
    raw = await _app.read_body(request, c.engine.limits.max_push + MAX_FORM, c.engine.limits.body_wait_s)
    sent = [False]

    async def replay() -> dict[str, Any]:
        if sent[0]:
            return {"type": "http.disconnect"}
        sent[0] = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async with Request(request.scope, replay).form(max_files=1, max_fields=8,
                                                   max_part_size=c.engine.limits.max_push) as form:
        c.check_csrf(request, str(form.get("csrf", "")))
        upload = form.get("archive")
        if upload is None or isinstance(upload, str):
            raise Refused(
                400, "no archive", "choose the toolkit archive to push (.tar.gz, .tgz, .tar or .zip)"
            )
        name = Path(upload.filename or "toolkit.tar.gz").name
        if not name.endswith(_app._ARCHIVES) or name.startswith("."):
            raise Refused(
                400, "bad archive name", f"{name[:64]!r}: name the archive <id>.tar.gz, .tgz, .tar or .zip"
            )
        data = await upload.read(c.engine.limits.max_push + 1)
        if len(data) > c.engine.limits.max_push:
            raise Refused(413, "too large", f"the archive exceeds the {c.engine.limits.max_push}-byte cap")
        force, first_party = form.get("force") == "1", form.get("first_party") == "1"
    if not data:
        raise Refused(400, "empty archive", "the archive is empty")
    diff = await c.engine.thread(c.engine._push, data, name, True, force, first_party, False)
    key = secrets.token_urlsafe(16)
    with c.lock:
        c.staged[key] = (data, name, force, first_party, time.monotonic() + STAGED_TTL_S)
        while len(c.staged) > MAX_STAGED_PUSHES:
            c.staged.popitem(last=False)
    return c.page(request, "push.html", diff=diff["changes"], staged=key, name=name)


# --- sessions ---


def _known(c: Console) -> list[tuple[str, dict[str, Any]]]:
    """The sessions the console lists, newest first: those it started (the last
    :data:`MAX_SESSIONS_LISTED`) and those still alive that the API started (at most the
    engine's ``max_sessions``)."""
    with c.lock:
        mine = list(c.started.items())
    with c.engine.session_lock:
        api = [s for s in c.engine.started if s not in c.started]
    return [(sid, info) for sid, info in reversed(mine)] + [
        (sid, {"id": sid, "agent": "", "task": "(started over the API)", "started": None})
        for sid in sorted(api)
    ]


def _host(c: Console) -> _sessions.SessionHost:
    if c.engine.sessions is None:
        raise Refused(501, "no agent sessions", _sessions.NOT_AVAILABLE)
    return c.engine.sessions


async def sessions_page(c: Console, request: Request) -> Response:
    if request.method == "POST":
        form = await c.form(request)
        c.check_csrf(request, form.get("csrf"))
        host = _host(c)
        from wbcore_engine.app import _ident

        agent = _ident(form.get("agent", ""), "agent id")
        task = form.get("task", "").strip()
        if not task:
            raise Refused(400, "no task", "say what the agent should do")
        options: dict[str, Any] = {}
        if form.get("model"):
            options["model"] = form["model"]
        if form.get("max_steps"):
            # its range is the run options' own (check_options, as over the API)
            options["max_steps"] = _app.whole(form["max_steps"], "max_steps", 20, -(1 << 62), 1 << 62)
        options = _sessions.check_options(options)
        sid = await c.engine.thread(lambda: c.engine._create(host, agent, task, options))
        with c.lock:
            c.started[sid] = {"id": sid, "agent": agent, "task": task[:300], "started": time.time()}
            while len(c.started) > MAX_SESSIONS_LISTED:
                c.started.popitem(last=False)
        return RedirectResponse(f"{PREFIX}/sessions/{quote(sid)}", status_code=303, headers=_HEADERS)
    rows = []
    host = c.engine.sessions
    for sid, info in _known(c):
        status: dict[str, Any] = {}
        if host is not None:
            try:
                status = dict(await c.engine.thread(host.status, sid))
            except WbError:
                status = {"status": "gone"}
        rows.append(
            {
                **info, "agent": info["agent"] or status.get("agent", ""),
                "status": status.get("status", "?"), "step": status.get("step", ""),
            }
        )
    return c.page(request, "sessions.html", rows=rows, available=host is not None)


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as the page shows them: one row each, a step's tool calls with their input, output
    and time."""
    out = []
    for ev in events:
        if ev.get("type") == "text":
            continue  # the model's streamed text deltas: the step that follows carries the whole text
        data = ev.get("data")
        row: dict[str, Any] = {
            "seq": ev.get("seq"), "type": ev.get("type"), "t": ev.get("t"), "data": data, "calls": [],
        }
        if ev.get("type") == "step" and isinstance(data, dict):
            # the agent loop's step: tool_calls [{id, name, arguments}] and results [{id, ok, text, ms}]
            results = {r.get("id"): r for r in data.get("results") or [] if isinstance(r, dict)}
            for call in data.get("tool_calls") or []:
                if isinstance(call, dict):
                    res = results.get(call.get("id"), {})
                    row["calls"].append(
                        {
                            "name": call.get("name"), "input": call.get("arguments", {}),
                            "output": res.get("text", ""), "ok": res.get("ok"), "ms": res.get("ms"),
                        }
                    )
            row["text"] = data.get("text") or ""
        out.append(row)
    return out


async def session_page(c: Console, request: Request) -> Response:
    from wbcore_engine.app import _ident

    host = _host(c)
    sid = _ident(request.path_params["sid"], "session id")
    status = dict(await c.engine.thread(host.status, sid))
    events = list(await c.engine.thread(lambda: host.events(sid, after=0, timeout=0)))
    last = max((int(e.get("seq", 0)) for e in events), default=0)
    return c.page(request, "session.html", sid=sid, status=status, steps=_steps(events), last=last,
                  ended=status.get("status") in _sessions.TERMINAL)


async def session_cancel(c: Console, request: Request) -> Response:
    from wbcore_engine.app import _ident

    form = await c.form(request)
    c.check_csrf(request, form.get("csrf"))
    host = _host(c)
    sid = _ident(request.path_params["sid"], "session id")
    await c.engine.thread(host.cancel, sid)
    return RedirectResponse(f"{PREFIX}/sessions/{quote(sid)}", status_code=303, headers=_HEADERS)


async def session_events(c: Console, request: Request) -> Response:
    return await c.engine.session_events(request)  # the API's stream, bounds and all


# --- review ---


def _review_of(host: Any, sid: str) -> list[dict[str, Any]] | None:
    items = getattr(host, "review_items", None)
    got = items(sid) if callable(items) else None
    return list(got) if got is not None else None


async def review_page(c: Console, request: Request) -> Response:
    host = _host(c)
    groups, unsupported = [], False
    for sid, info in _known(c):
        try:
            items = await c.engine.thread(_review_of, host, sid)
        except WbError:
            continue
        if items is None:
            unsupported = True
            break
        if items:
            groups.append({"session": sid, "agent": info["agent"], "items": items})
    pending = sum(1 for g in groups for i in g["items"] if i.get("decision") is None)
    return c.page(request, "review.html", groups=groups, pending=pending, unsupported=unsupported)


async def review_decide(c: Console, request: Request) -> Response:
    from wbcore_engine.app import _ident

    form = await c.form(request)
    c.check_csrf(request, form.get("csrf"))
    host = _host(c)
    sid = _ident(request.path_params["sid"], "session id")
    position = _app.whole(request.path_params["pos"], "item", 0, 0, 1_000_000)
    decision = form.get("decision", "")
    if decision not in ("approved", "rejected"):
        raise Refused(400, "bad decision", "approve or reject the item")
    decide = getattr(host, "decide_review", None)
    if not callable(decide):
        raise Refused(501, "no review decisions", "this engine's session host cannot record review decisions")
    await c.engine.thread(lambda: decide(sid, position, decision, form.get("note", "")))
    return RedirectResponse(f"{PREFIX}/review", status_code=303, headers=_HEADERS)


# --- audit ---


async def audit_page(c: Console, request: Request) -> Response:
    qp = request.query_params
    filters = {k: qp.get(k, "")[:128] for k in ("toolkit", "cap", "outcome")}
    before = _app.whole(qp.get("before"), "before", 0, 0, 1 << 62) or None

    def match(e: dict[str, Any]) -> bool:
        if filters["toolkit"] and filters["toolkit"] not in (e.get("principal") or "") \
                and filters["toolkit"] not in (e.get("target") or ""):
            return False
        if filters["cap"] and e.get("cap") != filters["cap"]:
            return False
        return not filters["outcome"] or e.get("outcome") == filters["outcome"]

    keep = match if any(filters.values()) else None
    audit, trail = c.engine.runtime.dock.audit, audit_trail.service(c.engine.runtime)
    # a line lacking a filter's text is skipped unparsed (json escapes aside, a value that
    # appears in a field appears in its line); `match` then decides on the parsed line
    sieve = tuple(json.dumps(v)[1:-1].encode() for v in filters.values() if v)
    rows, older = await c.engine.thread(lambda: trail.page(audit, AUDIT_PAGE, before=before, match=keep,
                                                                scan=AUDIT_SCAN, contains=sieve))
    newest = rows[0].get("seq") if rows and not before else None
    return c.page(request, "audit.html", rows=rows, older=older, filters=filters, chain=c.chain,
                  newest=newest if isinstance(newest, int) else -1, paged=before is not None,
                  query=urlencode({k: v for k, v in filters.items() if v}))


async def audit_verify(c: Console, request: Request) -> Response:
    """Verify the whole chain (a read of the trail: on demand, one at a time)."""
    form = await c.form(request)
    c.check_csrf(request, form.get("csrf"))
    audit, trail = c.engine.runtime.dock.audit, audit_trail.service(c.engine.runtime)

    def run() -> dict[str, Any]:
        t0 = time.perf_counter()
        problems = trail.verify(audit)
        return {"ok": not problems, "problems": [str(p)[:300] for p in problems[:20]], "count": len(problems),
                "ms": round((time.perf_counter() - t0) * 1000, 1), "at": time.time()}

    with c.lock:
        busy, c.verifying = c.verifying, True
    if busy:
        raise Refused(429, "already verifying", "a verification of the chain is running; reload in a moment")
    try:
        c.chain = await c.engine.thread(run)
    finally:
        c.verifying = False
    return RedirectResponse(f"{PREFIX}/audit", status_code=303, headers=_HEADERS)


async def audit_events(c: Console, request: Request) -> Response:
    return await c.engine.audit_events(request)


# --- pipelines ---


def _runs(home: Path) -> list[dict[str, Any]]:
    import heapq
    import os

    root = home / "pipelines"
    try:
        entries = [e for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    newest = heapq.nlargest(MAX_PIPELINE_RUNS, entries, key=lambda e: e.stat().st_mtime)
    out = []
    for e in newest:
        res = _result(Path(e.path))
        out.append(
            {
                "run_id": e.name, "name": res.get("name", "?") if res else "?",
                "success": res.get("success") if res else None, "wall_s": res.get("wall_s") if res else None,
                "stages": len(res.get("stages", [])) if res else 0, "t": e.stat().st_mtime,
            }
        )
    return out


def _result(folder: Path) -> dict[str, Any] | None:
    path = folder / "result.json"
    try:
        if path.is_symlink() or path.stat().st_size > 4 << 20:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _kept(folder: Path, name: Any) -> str | None:
    """The start of what a stage carried on (its kept ``NN-op.out`` file), at most :data:`MAX_SHOWN` bytes."""
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        return None
    path = folder / name
    try:
        if path.is_symlink():
            return None
        with path.open("rb") as fh:
            data = fh.read(MAX_SHOWN + 1)
    except OSError:
        return None
    text = data[:MAX_SHOWN].decode("utf-8", errors="replace")
    return text + ("…" if len(data) > MAX_SHOWN else "")


async def pipelines(c: Console, request: Request) -> Response:
    runs = await c.engine.thread(_runs, c.engine.runtime.home)
    return c.page(request, "pipelines.html", runs=runs)


async def pipeline_run(c: Console, request: Request) -> Response:
    from wbcore_engine.app import _ident

    run_id = _ident(request.path_params["run"], "run id")
    folder = c.engine.runtime.home / "pipelines" / run_id

    def read() -> dict[str, Any] | None:
        res = _result(folder)
        for stage in (res or {}).get("stages", []):
            stage["carried"] = _kept(folder, stage.get("kept"))
        return res

    res = await c.engine.thread(read)
    if res is None:
        raise Refused(404, "no such run", f"no finished pipeline run {run_id!r} under $WB_HOME/pipelines")
    return c.page(request, "pipeline.html", run=res)


async def static(c: Console, request: Request) -> Response:
    name = request.path_params["name"]
    kinds = {"console.js": "text/javascript", "console.css": "text/css"}
    if name not in kinds:
        raise Refused(404, "not found", "no such file")
    body = (Path(__file__).parent / "static" / name).read_bytes()
    return Response(body, media_type=kinds[name], headers={**_HEADERS, "cache-control": "max-age=300"})


async def root(c: Console, request: Request) -> Response:
    return RedirectResponse(PREFIX + "/toolkits", status_code=303, headers=_HEADERS)


#: (path, methods, handler, login needed)
ROUTES: list[tuple[str, list[str], Any, bool]] = [
    ("", ["GET"], root, False),
    ("/", ["GET"], root, False),
    ("/login", ["GET", "POST"], login_page, False),
    ("/logout", ["POST"], logout, True),
    ("/static/{name}", ["GET"], static, False),
    ("/toolkits", ["GET"], toolkits, True),
    ("/toolkits/{ident}", ["GET"], toolkit, True),
    ("/toolkits/{ident}/{action:str}", ["POST"], change_caps, True),
    ("/push", ["GET", "POST"], push, True),
    ("/sessions", ["GET", "POST"], sessions_page, True),
    ("/sessions/{sid}", ["GET"], session_page, True),
    ("/sessions/{sid}/cancel", ["POST"], session_cancel, True),
    ("/sessions/{sid}/events", ["GET"], session_events, True),
    ("/review", ["GET"], review_page, True),
    ("/review/{sid}/{pos}", ["POST"], review_decide, True),
    ("/audit", ["GET"], audit_page, True),
    ("/audit/verify", ["POST"], audit_verify, True),
    ("/audit/events", ["GET"], audit_events, True),
    ("/pipelines", ["GET"], pipelines, True),
    ("/pipelines/{run}", ["GET"], pipeline_run, True),
]


def app(engine: Any, policy: httpguard.Policy) -> Any:
    """The console's ASGI app (starlette), every route behind the login check."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    from wbcore_engine.app import HttpError

    console = Console(engine, policy)

    def wrap(handler: Any, needs_login: bool) -> Any:
        async def route(request: Request) -> Response:
            if needs_login and console.csrf_of(request) is None:
                return console.need_login(request)
            if request.path_params.get("action") not in (None, "grant", "revoke"):
                return console.problem(request, 404, "not found", "grant or revoke")
            try:
                return await handler(console, request)
            except Refused as exc:
                return console.problem(request, exc.status, exc.title, exc.message)
            except HttpError as exc:
                return console.problem(request, exc.status, exc.error, exc.message)
            except WbError as exc:
                from wbcore_engine.app import STATUS

                return console.problem(request, STATUS[exc.kind], exc.name, exc.message)

        return route

    routes = [Route(PREFIX + path, wrap(h, login), methods=methods) for path, methods, h, login in ROUTES]
    out = Starlette(routes=routes)
    out.state.console = console
    return out


def is_console(path: str) -> bool:
    return path == "/" or path == PREFIX or path.startswith(PREFIX + "/")


class Paths:
    """ASGI: console paths to the console app, the rest to the API app (both already guarded)."""

    def __init__(self, console: Any, api: Any) -> None:
        self.console, self.api = console, api

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_console(scope.get("path", "")):
            await self.console(scope, receive, send)
            return
        await self.api(scope, receive, send)


class Split:
    """ASGI: ``/console…`` (and ``/``) to the console behind the engine's Host/Origin rules and
    its own login; everything else to the API behind its bearer token (``httpguard.Guard``)."""

    def __init__(self, console: Any, api: Any, policy: httpguard.Policy) -> None:
        self.console = console
        self.api = api
        # the same names, checked by the same function; the token is the console's login (cookie)
        self.hosts = httpguard.Guard(console, httpguard.Policy(None, policy.names, policy.surface))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if is_console(path):
            if path == "/":
                scope = {**scope, "path": PREFIX}
            await self.hosts(scope, receive, send)
            return
        await self.api(scope, receive, send)
