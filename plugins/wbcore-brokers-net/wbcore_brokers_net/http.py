"""CappedHttp: one HTTP exchange on httpx, pinned, streamed, capped, with a deadline.

Each hop (the first request and every redirect) is checked by :class:`NetGuard` and
the toolkit's ``#+ALLOWED_HOSTS``, then sent to the *pinned* address: the URL carries
the checked IP, the ``Host`` header and TLS SNI carry the name, and the certificate is
verified against the name (headers dripped a byte at a time end at the deadline too:
``guard.deadline.cut_at``). Bodies are streamed raw (no decompression) and every chunk is
taken from a :class:`~wbcore_runtime.dispatch.budget.ByteBudget` as it arrives: the exchange is cancelled
the moment the body passes ``max_bytes`` (the caller passes ``min(max_bytes,
max_response)``), holding at most the cap plus one network read (≤ 64 KiB). The
deadline bounds connect, every read and the whole exchange. No connection pooling
across calls (a pooled TLS session for one name must not serve another), no proxies
from the environment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from wbcore_runtime.guard import deadline as _deadline
from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.dispatch.budget import ByteBudget
from wbcore_runtime.dispatch.dock import refuse
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, Timeout

from wbcore_brokers_net import allowlist
from wbcore_brokers_net.guard import NetGuard

MiB = 1 << 20
DEFAULT_MAX_BODY = 16 * MiB
MAX_REDIRECTS = 5
MAX_REQUEST_BODY = 16 * MiB
_HOP_HEADERS = {"host", "connection", "keep-alive", "proxy-authorization", "proxy-connection", "te",
                "trailer", "transfer-encoding", "upgrade", "content-length"}
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@dataclass
class Fetched:
    status: int
    url: str
    headers: list[list[str]]
    body: bytes
    redirects: int


class CappedHttp:
    def __init__(self, guard: NetGuard, *, verify: Any = True, max_body: int = DEFAULT_MAX_BODY) -> None:
        self.guard = guard
        if isinstance(verify, str):  # a CA bundle path the deployer configured
            import ssl

            verify = ssl.create_default_context(cafile=verify)
        self.verify = verify
        self.max_body = max_body

    def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        allowed_hosts: tuple[str, ...] = (),
        deadline: float,
        max_body: int | None = None,
        on_hop: Any = None,
    ) -> Fetched:
        import httpx

        cap = min(max_body or self.max_body, self.max_body)
        method = method.upper()
        if method not in METHODS:
            raise InvalidArgs(f"net: method {method!r} not supported; known: {', '.join(METHODS)}")
        if len(body) > MAX_REQUEST_BODY:
            raise refuse(InvalidArgs, "too-large",
                         f"net: request body of {len(body)} bytes exceeds the {MAX_REQUEST_BODY}-byte cap")
        sent_headers = _fetch.sendable({k: v for k, v in (headers or {}).items()
                                        if k.lower() not in _HOP_HEADERS}, "net")
        if not any(k.lower() == "accept-encoding" for k in sent_headers):
            sent_headers["Accept-Encoding"] = "identity"  # raw bytes are capped: no decompression bombs
        if len(sent_headers) > 64 or sum(len(k) + len(v) for k, v in sent_headers.items()) > 64 << 10:
            raise refuse(InvalidArgs, "too-large", "net: more than 64 headers or 64 KiB of headers")
        for hop in range(MAX_REDIRECTS + 1):
            scheme = urlsplit(url).scheme.lower()
            if scheme not in allowlist.DEFAULT_PORTS:
                raise refuse(CapabilityDenied, "scheme",
                             f"net: scheme {scheme!r} is not allowed (http, https)")
            if on_hop:
                on_hop(url)
            # the one hop check (credentials, port, the pin) with the toolkit's #+ALLOWED_HOSTS
            at = _fetch.hop(url, self.guard, ("http", "https"),
                            lambda s, h, p: allowlist.check(allowed_hosts, s, h, p))
            host = at.host
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise refuse(Timeout, "deadline", f"net: deadline passed before {host}")
            hdrs = {**sent_headers, "Host": at.host_header}
            timeout = httpx.Timeout(remaining)
            with _fetch.client(timeout=remaining, verify=self.verify) as client, \
                    _deadline.cut_at(deadline) as cut:
                req = client.build_request(method, at.pinned, headers=hdrs, content=body or None,
                                           extensions={**at.extensions, "timeout": timeout.as_dict(),
                                                       **cut.extensions})
                try:
                    resp = client.send(req, stream=True)
                except httpx.HTTPError as exc:
                    if isinstance(exc, httpx.TimeoutException) or cut.fired:
                        raise refuse(Timeout, "deadline",
                                     f"net: {host} did not answer before the deadline") from None
                    raise refuse(CapabilityDenied if "certificate" in str(exc).lower() else InvalidArgs,
                                 "connect", f"net: {method} {at.shown} failed: "
                                            f"{type(exc).__name__}: {str(exc)[:200]}") from None
                try:
                    if resp.is_redirect and "location" in resp.headers:
                        nxt = urljoin(url, resp.headers["location"])
                        sent_headers = _fetch.carried(sent_headers, url, nxt)
                        url = nxt
                        if resp.status_code in (301, 302, 303) and method != "HEAD":
                            method, body = "GET", b""
                        continue
                    data = bytearray()
                    budget = ByteBudget(cap, f"net: response body from {host} (cancelled)")
                    try:
                        for chunk in resp.iter_raw():
                            budget.take(len(chunk))  # before the chunk is kept
                            if cut.fired:
                                break
                            data += chunk
                    except httpx.HTTPError as exc:
                        if isinstance(exc, httpx.TimeoutException) or cut.fired:
                            raise refuse(Timeout, "deadline",
                                         f"net: {host} stalled past the deadline") from None
                        raise InvalidArgs(f"net: reading the body from {host} failed: "
                                          f"{type(exc).__name__}") from None
                    if cut.fired:  # the deadline ended the body early: never a short answer
                        raise refuse(Timeout, "deadline",
                                     f"net: body from {host} still streaming at the deadline; cancelled")
                    return Fetched(resp.status_code, url, [[k, v] for k, v in resp.headers.items()],
                                   bytes(data), hop)
                finally:
                    resp.close()
        raise refuse(InvalidArgs, "redirects", f"net: more than {MAX_REDIRECTS} redirects")
