"""The demo's local web site: a real HTTP server on 127.0.0.1, inside the ``wbx demo`` process,
so the network toolkits show real results with no public internet.

It serves small, realistic content: an article page (``fetch``), a JSON API with a POST echo
(``http``), a PEP 503 simple index holding one real wheel with its sha256 (``pip-fetch``), and a
paginated REST/JSON API (the federation shape). The guests reach it only through the Dock and
the SSRF guard, which refuse loopback unless the deployer opens it
(:data:`wbcore_runtime.guard.netguard.ENV_GUEST_PRIVATE_HOSTS` for guests,
:data:`~wbcore_runtime.guard.netguard.ENV_PRIVATE_HOSTS` for host-side sources): the demo sets both,
for 127.0.0.1 only and for its own process only, and says so.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from base64 import urlsafe_b64encode
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

HOST = "127.0.0.1"
MAX_BODY = 64 << 10  # the echo route reads at most this much of a request body
PACKAGE, VERSION = "wb-greeting", "1.0.0"
WHEEL_NAME = f"wb_greeting-{VERSION}-py3-none-any.whl"

ARTICLE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>WebAssembly - the demo wiki</title></head>
<body><main>
<h1>WebAssembly</h1>
<p><b>WebAssembly</b> (Wasm) is a portable binary instruction format for a stack-based virtual
machine. A module imports everything it may touch beyond its own memory, so a host decides,
call by call, what it can reach.</p>
<h2>Sandboxing</h2>
<p>A module runs in linear memory with no ambient access to files, sockets or the clock; the
host links only the imports it grants.</p>
</main></body></html>
"""

# A small release history: the federation source pages through it, the http route shows one.
RELEASES = [
    {"id": 1, "version": "0.1.0", "date": "2025-03-02", "yanked": False, "notes": "first release"},
    {"id": 2, "version": "0.2.0", "date": "2025-05-19", "yanked": False, "notes": "kernels and the fabric"},
    {"id": 3, "version": "0.2.1", "date": "2025-05-21", "yanked": True, "notes": "bad build, withdrawn"},
    {"id": 4, "version": "0.3.0", "date": "2025-08-30", "yanked": False, "notes": "federation and agents"},
    {"id": 5, "version": "1.0.0", "date": "2025-11-14", "yanked": False, "notes": "stable manifest format"},
]
PAGE_SIZE = 2


def wheel() -> bytes:
    """A real, installable wheel (PEP 427): one module, its metadata and RECORD; the same bytes
    every time (fixed timestamps), so its sha256 is stable."""
    module = b'"""Say hello."""\n\n\ndef greet(name: str = "world") -> str:\n    return f"hello, {name}"\n'
    info = f"wb_greeting-{VERSION}.dist-info"
    files = {
        "wb_greeting/__init__.py": module,
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n"
                             "Summary: Say hello (the wbx demo's package)\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: wbx-demo\nRoot-Is-Purelib: true\nTag: "
                         b"py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
        f"{len(data)}\n"
        for name, data in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2025, 11, 14, 0, 0, 0)), data)
    return buf.getvalue()


class _Handler(BaseHTTPRequestHandler):
    server_version = "wbx-demo-site/1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        pass  # the demo prints what each tool got; the server stays quiet

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, doc: object, status: int = 200, extra: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(doc).encode() + b"\n", "application/json", extra)

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        site: DemoSite = self.server.site  # type: ignore[attr-defined]
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        if path == "/wiki/WebAssembly":
            return self._send(200, ARTICLE.encode(), "text/html; charset=utf-8")
        if path == "/api/releases/latest":
            return self._json(RELEASES[-1])
        # paginated (RFC 8288 Link: rel="next"), as the federation source reads it
        if path == "/api/releases":
            page = int((query.get("page") or ["1"])[0]) if (query.get("page") or ["1"])[0].isdigit() else 1
            rows = RELEASES[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
            extra = {}
            if page * PAGE_SIZE < len(RELEASES):
                extra["Link"] = f'<{site.url}/api/releases?page={page + 1}>; rel="next"'
            return self._json({"items": rows}, extra=extra)
        if path == f"/simple/{PACKAGE}/":
            link = (f'<a href="/packages/{WHEEL_NAME}#sha256={site.wheel_sha256}" '
                    f'data-requires-python="&gt;=3.8">{WHEEL_NAME}</a>')
            page_html = (f"<!DOCTYPE html><html><body><h1>Links for {PACKAGE}</h1>\n{link}<br/>\n"
                         "</body></html>\n")
            return self._send(200, page_html.encode(), "text/html")
        if path == f"/packages/{WHEEL_NAME}":
            return self._send(200, site.wheel, "application/octet-stream")
        return self._json({"error": f"no such page: {path}"}, 404)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_POST(self) -> None:  # noqa: N802 - an echo: what the tool sent, as the server saw it
        size = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
        body = self.rfile.read(size).decode("utf-8", "replace")
        try:
            sent: object = json.loads(body)
        except ValueError:
            sent = body
        self._json({"received": sent, "content_type": self.headers.get("Content-Type"),
                    "method": self.command, "path": self.path}, 201)


class DemoSite:
    """The running site: ``url`` is its base (``http://127.0.0.1:<port>``); stop with :meth:`close`."""

    def __init__(self) -> None:
        self.wheel = wheel()
        self.wheel_sha256 = hashlib.sha256(self.wheel).hexdigest()
        self.server = ThreadingHTTPServer((HOST, 0), _Handler)
        self.server.site = self  # type: ignore[attr-defined]
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="wbx-demo-site", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> DemoSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
