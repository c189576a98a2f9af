"""What the scripted OCI registries of the OCI tests share: a loopback HTTP handler that
answers with whole bodies and says nothing on stderr. Each test scripts its registry by
subclassing it (``do_GET`` etc.) with the state it inspects."""

from __future__ import annotations

import http.server


class ScriptedHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def _reply(self, status: int, body: bytes = b"",
               headers: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
