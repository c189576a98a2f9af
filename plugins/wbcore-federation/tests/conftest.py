"""A local REST server that mimics a tracker API: issues (Link-header pages), users (cursor pages)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

TOKEN = "tok-SEKRIT-4d1f9a"  # the bearer token the deployer holds in the environment
HMAC_KEY = b"hmac-SEKRIT-7c2e0b5a"  # the broker-held key (never leaves the broker)

ISSUES = [
    {"id": i, "title": f"Issue number {i}", "state": "open" if i % 3 else "closed", "owner_id": 100 + i % 4,
     "labels": ["bug"] if i % 2 else []}
    for i in range(1, 8)
]  # 7 issues: pages of 3, 3, 1
# pages of 2, 1, 1
USERS = [{"id": 100 + i, "name": f"user-{i}", "email": f"u{i}@example.test"} for i in range(4)]


@dataclass
class Api:
    base: str
    issues: list[dict[str, Any]]
    users: list[dict[str, Any]]
    auth: str = "bearer"  # or "hmac" or "none"
    seen: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


def _authorized(api: Api, handler: http.server.BaseHTTPRequestHandler) -> bool:
    got = handler.headers.get("Authorization", "")
    if api.auth == "none":
        return True
    if api.auth == "bearer":
        return got == f"Bearer {TOKEN}"
    m = re.match(r"^WB-HMAC-SHA256 key=([^,]+), ts=(\d+), sig=([0-9a-f]+)$", got)
    if not m or m.group(1) != "tracker-key":
        return False
    want = hmac.new(HMAC_KEY, f"GET\n{handler.path}\n{m.group(2)}".encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, m.group(3))


@pytest.fixture
def api() -> Iterator[Api]:
    state = Api("", [dict(r) for r in ISSUES], [dict(r) for r in USERS])

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(doc).encode()
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if status == 200 and self.headers.get("If-None-Match") == etag:
                state.statuses.append(304)
                self.send_response(304)
                self.send_header("ETag", etag)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            state.statuses.append(status)
            self.send_response(status)
            self.send_header("ETag", etag)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            state.seen.append(self.path)
            state.headers.append(dict(self.headers))
            if not _authorized(state, self):
                self._send(401, {"error": "unauthorized"})
                return
            parts = urlsplit(self.path)
            q = {k: v[0] for k, v in parse_qs(parts.query).items()}
            if parts.path == "/api/issues":
                rows = [r for r in state.issues if "state" not in q or r["state"] == q["state"]]
                page = int(q.get("page", "1"))
                chunk = rows[(page - 1) * 3: page * 3]
                headers = {}
                if page * 3 < len(rows):
                    nxt = f"/api/issues?page={page + 1}" + (f"&state={q['state']}" if "state" in q else "")
                    headers["Link"] = f'<{nxt}>; rel="next", </api/issues?page=1>; rel="first"'
                self._send(200, {"data": {"items": chunk}}, headers)
            elif parts.path == "/api/users":
                sizes = {"": (0, 2), "c2": (2, 3), "c3": (3, 4)}
                start, end = sizes[q.get("cursor", "")]
                nxt = {"": "c2", "c2": "c3", "c3": None}[q.get("cursor", "")]
                self._send(200, {"data": {"items": state.users[start:end]}, "next_cursor": nxt})
            elif parts.path == "/api/huge":
                self._send(200, {"data": {"items": [{"id": 1, "blob": "x" * (9 << 20)}]}})
            elif parts.path == "/api/away":
                self._send(200, {"data": {"items": [{"id": 1}]}},
                           {"Link": '<http://169.254.169.254/latest/meta-data>; rel="next"'})
            else:
                self._send(404, {"error": "no such path"})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{server.server_address[1]}/api"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def tracker_manifest(base: str, *, auth: str = "bearer-env TRACKER_TOKEN", caps: str = "net",
                     extra: str = "") -> str:
    return f"""#+TITLE: Tracker
#+TOOLKIT: tracker
#+VERSION: 0.1.0
#+STATUS: stable
#+TAGLINE: Use tracker to read and mirror the issue tracker.
#+EXEC: federation
#+CAPS: {caps}
#+URL: {base}
#+AUTH: {auth}
#+PAGINATION: link
#+ROWS_PATH: data.items
#+SYNC: issues tracker.org
{extra}
* Tracker :toolkit:
  :PROPERTIES:
  :ID: tracker
  :STATUS: stable
  :END:

Issues and users of the tracker.

** Issues :entity:
   :PROPERTIES:
   :ENTITY: issues
   :PATH: /issues
   :KEY: id
   :TITLE: title
   :FIELDS: id title state owner_id labels
   :PUSHDOWN: state
   :END:

** Users :entity:
   :PROPERTIES:
   :ENTITY: users
   :PATH: /users
   :KEY: id
   :PAGINATION: cursor next_cursor cursor
   :END:
"""
