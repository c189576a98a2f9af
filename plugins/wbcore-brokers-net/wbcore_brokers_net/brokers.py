"""The net, browse, tcp, udp and tls broker drivers: argument checking around the guard."""

from __future__ import annotations

import html
import re
import time
from typing import Any

from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import BrokerCall
from wbcore_runtime.contract.errors import InvalidArgs

from wbcore_brokers_net import allowlist, sockets
from wbcore_brokers_net.guard import NetGuard
from wbcore_brokers_net.http import CappedHttp

DEFAULT_TIMEOUT = 30.0
ENVELOPE = 256  # an exchange's answer besides its data: the peer address and CBOR framing


def _deadline(call: BrokerCall) -> float:
    asked = call.arg("timeout", (int, float), DEFAULT_TIMEOUT)
    if asked <= 0:
        raise InvalidArgs(f"{call.cap}: timeout must be > 0")
    return time.monotonic() + min(float(asked), call.ctx.remaining(DEFAULT_TIMEOUT))


def _bytes(call: BrokerCall, name: str) -> bytes:
    v = call.args.get(name, b"")
    if isinstance(v, str):
        v = v.encode()
    if not isinstance(v, (bytes, bytearray)):
        raise InvalidArgs(f"{call.cap}.{call.op}: {name!r} must be bytes or text")
    return bytes(v)


class NetBroker:
    """``net``: an HTTP(S) exchange. ``browse``: a GET whose HTML is reduced to text."""

    def __init__(self, guard: NetGuard | None = None, *, verify: Any = True, text_only: bool = False) -> None:
        self.guard = guard or NetGuard()
        self.http = CappedHttp(self.guard, verify=verify)
        self.text_only = text_only

    def handle(self, call: BrokerCall) -> Any:
        url = call.arg("url", str)
        headers = call.arg("headers", dict, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise InvalidArgs(f"{call.cap}: headers must map text to text")
        call.target(url)
        method = "GET" if self.text_only else call.arg("method", str, "GET")
        asked = call.arg("max_bytes", int, None)
        got = self.http.fetch(url, method=method, headers=headers, body=_bytes(call, "body"),
                              allowed_hosts=call.ctx.allowed_hosts, deadline=_deadline(call),
                              max_body=min(asked or call.ctx.max_response, call.ctx.max_response),
                              on_hop=call.target)
        if self.text_only:
            # undecodable bytes become U+FFFD (3 bytes): the text is re-measured
            text = html_to_text(got.body)
            ByteBudget.for_call(call, None, f"browse {got.url}").take(ByteBudget.size_of(text))
            return {"status": got.status, "url": got.url, "text": text}
        return {"status": got.status, "url": got.url, "headers": got.headers, "body": got.body,
                "redirects": got.redirects}


_SCRIPT = re.compile(r"(?is)<(script|style|noscript)\b.*?</\1\s*>")
_TAG = re.compile(r"(?s)<[^>]*>")


def html_to_text(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace")
    text = _TAG.sub(" ", _SCRIPT.sub(" ", text))
    return re.sub(r"[ \t\r\f\v]+", " ", re.sub(r"\n\s*\n+", "\n\n", html.unescape(text))).strip()


class SocketBroker:
    """``tcp`` / ``udp`` / ``tls``: one request/response exchange with a pinned peer."""

    def __init__(self, kind: str, guard: NetGuard | None = None, *, cafile: str | None = None) -> None:
        self.kind = kind
        self.guard = guard or NetGuard()
        self.cafile = cafile

    def handle(self, call: BrokerCall) -> Any:
        host = call.arg("host", str)
        port = call.arg("port", int)
        call.target(f"{self.kind}://{host}:{port}")
        allowlist.check(call.ctx.allowed_hosts, self.kind, host, port)
        pin = self.guard.pin(host, port)
        data = _bytes(call, "data")
        # the read loop stops there: at most what the answer can carry (less its small envelope)
        read_max = min(call.arg("read_max", int, 1 << 20), max(0, call.ctx.max_response - ENVELOPE))
        deadline = _deadline(call)
        if self.kind == "tcp":
            out = sockets.tcp(pin, data, read_max, deadline)
        elif self.kind == "tls":
            out = sockets.tls(pin, data, read_max, deadline, self.cafile)
        else:
            out = sockets.udp(pin, data, read_max, deadline)
        return {"data": out, "peer": pin.ip}
