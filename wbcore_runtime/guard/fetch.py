"""The one fetcher: every URL wbcore downloads on a toolkit's or a person's behalf.

``BUILD_SRC`` ``wasm:``/``archive:`` sources, ``wbx toolkit install <url>`` and did:web
documents all come through :func:`download` / :func:`get_bytes`; the net and llm brokers
open their connections with :func:`client` (the same TLS and no-environment rules), and the
net broker's hops are checked, pinned and stripped of credentials by :func:`hop` and :func:`carried`.

- **SSRF guard on every hop**: the first request and every redirect are checked by
  :class:`wbcore_runtime.guard.netguard.NetGuard` and sent to the *pinned* address (the URL carries the
  checked IP, ``Host`` and TLS SNI carry the name; the certificate is verified against
  the name). Private ranges are refused unless the deployer allows them
  (``WB_ALLOW_PRIVATE_SOURCES=1``, ``WB_ALLOW_PRIVATE_HOSTS``; see ``wbcore_runtime.guard.netguard``).
- **Credentials stay with their origin**: ``Authorization``, ``Proxy-Authorization`` and
  ``Cookie`` headers a caller passes are dropped when a redirect leaves the origin
  (scheme, host, port) they were sent to.
- **Bounded while streaming**: the byte cap is counted chunk by chunk as the body
  arrives (a lying or absent ``Content-Length`` changes nothing) and one deadline bounds
  connect, every read and the whole exchange, redirects included (:func:`cut_at` ends a
  read still waiting then: headers dripped a byte at a time pass every per-read timeout).
  No decompression (``Accept-Encoding: identity``): the capped bytes are the bytes on the wire.
- **TLS against the system trust store** (``truststore``), plus ``SSL_CERT_FILE`` and
  ``SSL_CERT_DIR`` (from the process or the runtime's environment), so a corporate
  TLS-intercepting proxy's CA works. No proxy or ``.netrc`` is taken from the environment.
- **Failures say what failed**: a name that does not resolve is ``dns`` (exit 68), a
  refused connection ``unreachable`` (69), a certificate or handshake failure ``tls``
  (76), a 404 ``not-found``, the deadline ``timeout``, a cap ``invalid-args``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import ssl
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from wbcore_runtime.contract.errors import InvalidArgs, NotFound, Timeout, TlsError, Unreachable, WbError
from wbcore_runtime.dispatch.audit import redact_target
from wbcore_runtime.guard.deadline import Cut, cut_at
from wbcore_runtime.guard.netguard import NetGuard

MiB = 1 << 20
DEFAULT_PORTS = {"http": 80, "https": 443}


class StatusRefused(InvalidArgs):
    """The server is there and answered a 4xx other than not-found; ``status`` says which, so a
    caller can say what to do (credentials wanted, forbidden) without reading the message."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class FetchLimits:
    max_bytes: int = 256 * MiB
    timeout: float = 120.0  # the whole exchange: every hop, every read
    max_redirects: int = 5
    schemes: tuple[str, ...] = ("https", "http")


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # after redirects
    status: int
    size: int
    sha256: str
    content_type: str = ""
    #: The final response's headers (lower-cased names), for callers that page (``Link``),
    #: cache (``ETag``) or follow a protocol (``Location``, ``Docker-Content-Digest``).
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str:
        name = name.lower()
        return next((v for k, v in self.headers if k == name), "")


_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def _origin(url: str) -> tuple[str, str, int | None]:
    p = urlsplit(url)
    try:
        port = p.port
    except ValueError:
        port = None
    scheme = p.scheme.lower()
    return scheme, (p.hostname or "").lower(), port or DEFAULT_PORTS.get(scheme)


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def sendable(headers: Mapping[str, str], shown: str) -> dict[str, str]:
    """``headers`` as they may go on the wire, else refused naming the header, never its value (a
    token read from a file keeps its ``\r``; a registry's token endpoint may answer any bytes)."""
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise InvalidArgs(f"{shown}: header name {name!r} is not an HTTP token")
        if not all(" " <= c <= "~" or c == "\t" for c in value):
            raise InvalidArgs(f"{shown}: header {name}: its value holds a line ending, a control or a "
                              "non-ASCII character (a file's line ending?); the value is not shown")
    return dict(headers)


def carried(headers: Mapping[str, str], old: str, new: str) -> dict[str, str]:
    """The headers a redirect from ``old`` to ``new`` sends on: credentials are for the origin
    the caller named, so a hop to another (a registry's storage, a CDN, an open redirect) drops them."""
    if _origin(new) == _origin(old):
        return dict(headers)
    return {k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS}


@dataclass(frozen=True, slots=True)
class Hop:
    """One hop checked and pinned: send to ``pinned`` (the checked IP) with ``host_header`` as
    ``Host`` and ``extensions`` (TLS SNI: the certificate is verified against the name)."""

    host: str
    pinned: str
    host_header: str
    extensions: dict[str, str]
    shown: str  # the URL as messages show it: no user-info, no query (a presigned link's)


def hop(url: str, guard: NetGuard, schemes: tuple[str, ...],
        check: Callable[[str, str, int], None] | None = None) -> Hop:
    """Check ``url`` (scheme, no credentials, a host, a port; ``check`` adds the caller's
    narrowing, e.g. a toolkit's ``#+ALLOWED_HOSTS``) and pin it through ``guard``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    shown = redact_target(url) or url
    if scheme not in schemes:
        raise InvalidArgs(f"{shown}: only {', '.join(schemes)} URLs are fetched")
    if parts.username or parts.password:  # the refusal never echoes them
        raise InvalidArgs(f"{shown}: credentials in the URL are not allowed")
    host = parts.hostname or ""
    if not host:
        raise InvalidArgs(f"{shown}: the URL names no host")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise InvalidArgs(f"{shown}: bad port") from None
    if check is not None:
        check(scheme, host, port)
    pin = guard.pin(host, port)
    pinned = urlunsplit((scheme, f"{pin.ip_for_url}:{port}", parts.path or "/", parts.query, ""))
    named = f"[{host}]" if ":" in host else host
    return Hop(host, pinned, named if port == DEFAULT_PORTS[scheme] else f"{named}:{port}",
               {"sni_hostname": pin.host} if scheme == "https" else {}, shown)


def ssl_context(env: Mapping[str, str] | None = None) -> ssl.SSLContext:
    """Verify peers against the system trust store and any ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``."""
    seen = os.environ if env is None else env
    cafile = seen.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_FILE") or ""
    cadirs = seen.get("SSL_CERT_DIR") or os.environ.get("SSL_CERT_DIR") or ""
    return _context(cafile, cadirs)


@functools.lru_cache(maxsize=8)
def _context(cafile: str, cadirs: str) -> ssl.SSLContext:
    # One context per trust configuration: building one reads the whole CA store.
    import truststore

    ctx: ssl.SSLContext = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if cafile:
            ctx.load_verify_locations(cafile=cafile)
        for d in cadirs.split(os.pathsep):
            if d and os.path.isdir(d):
                ctx.load_verify_locations(capath=d)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"SSL_CERT_FILE/SSL_CERT_DIR cannot be loaded ({exc}); "
                       "point them at PEM certificates") from None
    return ctx


def client(*, timeout: float, verify: Any = None, env: Mapping[str, str] | None = None) -> Any:
    """The one place wbcore makes an ``httpx.Client``: no proxies or credentials from the
    environment, no redirects followed (callers re-check each hop), TLS from :func:`ssl_context`.

    ``verify``: an ``ssl.SSLContext``, a CA bundle path the deployer configured, or None
    for the system trust store.
    """
    import httpx

    if verify is None or verify is True:
        verify = ssl_context(env)
    elif isinstance(verify, (str, os.PathLike)):
        verify = ssl.create_default_context(cafile=os.fspath(verify))
    return httpx.Client(verify=verify, trust_env=False, follow_redirects=False,
                        timeout=httpx.Timeout(timeout))


def bounded_transport(*, max_bytes: int, what: str, http: ModuleType | None = None,
                      env: Mapping[str, str] | None = None) -> Any:
    """The transport of an httpx client wbcore does not drive (a vendor SDK's): TLS from
    :func:`ssl_context`, raw bytes (``Accept-Encoding: identity``; an encoded answer is refused,
    never inflated), each answer cut at ``max_bytes`` as it streams and at the request's timeout
    counted from its start, the whole exchange, not each read (a drip or a keep-alive stream ends
    there): ``InvalidArgs``/``Timeout`` naming ``what``. ``http``: the SDK's httpx (or its fork)."""
    if http is None:
        import httpx

        http = httpx
    failed = http.HTTPError

    class Capped(http.SyncByteStream):  # type: ignore[name-defined]
        def __init__(self, inner: Any, url: str, wait: float | None, cut: Cut,
                     done: contextlib.ExitStack) -> None:
            self.inner, self.url, self.wait, self.cut, self.done = inner, url, wait, cut, done

        def __iter__(self) -> Any:
            total = 0
            try:
                for chunk in self.inner:
                    total += len(chunk)
                    if total > max_bytes:
                        raise InvalidArgs(f"{what} {self.url}: answer over the {max_bytes}-byte cap; stopped")
                    if self.cut.fired:
                        break
                    yield chunk
            except failed as exc:
                if not self.cut.fired:
                    raise transport_error(exc, f"{what} {self.url}", http=http) from None
            if self.cut.fired:  # the deadline ended the body, with an error or early: never an answer
                raise Timeout(f"{what} {self.url}: answer not complete within {self.wait:g} s; stopped")

        def close(self) -> None:
            with self.done:
                self.inner.close()

    class Bounded(http.HTTPTransport):  # type: ignore[name-defined]
        def handle_request(self, request: Any) -> Any:
            wait = (request.extensions.get("timeout") or {}).get("read")
            request.headers["Accept-Encoding"] = "identity"
            url = str(request.url.copy_with(query=None))
            done = contextlib.ExitStack()
            # the headers too: a server may drip them a byte at a time (no wait: a cut never fired)
            cut = Cut() if wait is None else done.enter_context(cut_at(time.monotonic() + wait))
            request.extensions = {**request.extensions, **cut.extensions}
            try:
                resp = super().handle_request(request)
            except BaseException:
                done.close()
                raise
            coding = resp.headers.get("content-encoding", "identity").strip().lower()
            if coding not in ("", "identity"):
                resp.close()
                done.close()
                raise InvalidArgs(f"{what} {url}: answered with Content-Encoding {coding} though identity "
                                  "was asked; compressed answers are not inflated (a decompression bomb)")
            resp.stream = Capped(resp.stream, url, wait, cut, done)
            return resp

    return Bounded(verify=ssl_context(env), trust_env=False)


def _ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLError):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


def transport_error(exc: Exception, url: str, *, http: ModuleType | None = None) -> WbError:
    """An httpx (or ``http``) failure as the error a person can act on (tls, unreachable, timeout)."""
    if http is None:
        import httpx

        http = httpx

    if isinstance(exc, http.TimeoutException):
        return Timeout(f"{url}: no answer in time ({type(exc).__name__})")
    cause = _ssl_cause(exc)
    text = str(exc)
    if cause is not None or "CERTIFICATE_VERIFY_FAILED" in text or "[SSL" in text:
        why = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or text[:200]
        return TlsError(
            f"{url}: TLS failed ({why}); the certificate is checked against the system trust store and "
            "SSL_CERT_FILE / SSL_CERT_DIR — behind a TLS-intercepting proxy, point SSL_CERT_FILE at its CA"
        )
    return Unreachable(f"{url}: cannot connect ({type(exc).__name__}: {text[:200]})")


def stream(
    url: str,
    sink: Callable[[bytes], object],  # its return is ignored (a file's write returns a count)
    *,
    guard: NetGuard,
    limits: FetchLimits = FetchLimits(),
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    body: bytes | None = None,
    ok: tuple[int, ...] = (200,),
) -> Fetched:
    """GET ``url`` hop by hop through ``guard``, handing the body to ``sink`` as it streams.

    ``method``/``body``/``ok`` serve protocols beyond a download (the OCI distribution API's
    HEAD, POST and PUT): a request with a body never follows a redirect (it would resend the
    body somewhere the caller did not name), and any status outside ``ok`` is an error.
    """
    import httpx

    deadline = time.monotonic() + limits.timeout
    for _hop in range(limits.max_redirects + 1):
        at = hop(url, guard, limits.schemes)
        shown = at.shown
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Timeout(f"{shown}: not fetched within {limits.timeout:g}s")
        sent = {"Accept-Encoding": "identity", **sendable(headers or {}, shown), "Host": at.host_header}
        with client(timeout=min(30.0, remaining), env=env) as c, cut_at(deadline) as cut:
            req = c.build_request(method, at.pinned, headers=sent, content=body,
                                  extensions={**at.extensions, **cut.extensions})
            try:
                resp = c.send(req, stream=True)
            except httpx.HTTPError as exc:
                if cut.fired:
                    raise Timeout(f"{shown}: no answer within {limits.timeout:g}s") from None
                raise transport_error(exc, shown) from None
            try:
                if resp.is_redirect and resp.status_code not in ok:
                    if body is not None:
                        raise InvalidArgs(f"{shown}: HTTP {resp.status_code} redirect of a {method} "
                                          "with a body; not followed")
                    location = resp.headers.get("location")
                    if not location:
                        raise InvalidArgs(f"{shown}: HTTP {resp.status_code} redirect without a Location")
                    nxt = urljoin(url, location)
                    headers = carried(headers or {}, url, nxt)
                    url = nxt
                    continue
                if resp.status_code in (404, 410):
                    raise NotFound(f"{shown}: HTTP {resp.status_code} (not found)")
                if resp.status_code not in ok:
                    if resp.status_code >= 500:
                        raise Unreachable(f"{shown}: answered HTTP {resp.status_code}")
                    raise StatusRefused(f"{shown}: answered HTTP {resp.status_code}", resp.status_code)
                declared = resp.headers.get("content-length", "")
                if method != "HEAD" and declared.isdigit() and int(declared) > limits.max_bytes:
                    raise InvalidArgs(f"{shown}: {declared} bytes is over the {limits.max_bytes}-byte cap")
                h = hashlib.sha256()
                total = 0
                try:
                    for chunk in resp.iter_raw(1 << 16):
                        total += len(chunk)
                        if total > limits.max_bytes:
                            raise InvalidArgs(f"{shown}: over the {limits.max_bytes}-byte cap; "
                                              "download stopped")
                        if cut.fired:
                            break
                        h.update(chunk)
                        sink(chunk)
                except httpx.HTTPError as exc:
                    if not cut.fired:
                        raise transport_error(exc, shown) from None
                if cut.fired:  # the deadline ended the body, with an error or early: never an answer
                    raise Timeout(f"{shown}: not fetched within {limits.timeout:g}s; download stopped")
                kept = tuple((k.lower(), v) for k, v in resp.headers.multi_items())
                return Fetched(url, resp.status_code, total, h.hexdigest(),
                               resp.headers.get("content-type", ""), kept)
            finally:
                resp.close()
    raise InvalidArgs(f"{redact_target(url)}: more than {limits.max_redirects} redirects")


def download(
    url: str,
    dest: Path,
    *,
    guard: NetGuard,
    limits: FetchLimits = FetchLimits(),
    env: Mapping[str, str] | None = None,
) -> Fetched:
    """Stream ``url`` into ``dest`` (written beside it, renamed when complete); the digest is of the bytes."""
    part = dest.with_name(f".{dest.name}.part")
    try:
        with part.open("wb") as fh:
            got = stream(url, fh.write, guard=guard, limits=limits, env=env)
        os.replace(part, dest)
        return got
    finally:
        part.unlink(missing_ok=True)


def get_bytes(
    url: str,
    *,
    guard: NetGuard,
    limits: FetchLimits,
    env: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    body: bytes | None = None,
    ok: tuple[int, ...] = (200,),
) -> tuple[bytes, Fetched]:
    """A small body in memory (bounded by ``limits.max_bytes`` while it streams)."""
    got_body = bytearray()
    got = stream(url, got_body.extend, guard=guard, limits=limits, env=env, headers=headers,
                 method=method, body=body, ok=ok)
    return bytes(got_body), got


def copy_local(src: Path, dest: Path, *, max_bytes: int, shown: str) -> str:
    """Copy a local regular file to ``dest`` (never a device, FIFO or link target swapped in),
    capped at ``max_bytes`` as it is read, as a download is; its sha256."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise NotFound(f"{shown}: no such file") from None
    except OSError as exc:
        raise InvalidArgs(f"{shown}: cannot open ({exc.strerror})") from None
    h, total = hashlib.sha256(), 0
    with os.fdopen(fd, "rb") as fh, dest.open("wb") as out:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise InvalidArgs(f"{shown}: not a regular file")
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            total += len(chunk)
            if total > max_bytes:
                raise InvalidArgs(f"{shown}: over the {max_bytes}-byte cap")
            h.update(chunk)
            out.write(chunk)
    return h.hexdigest()


def pinned(source: str | Path, dest: Path, sha256: str, *, what: str, max_bytes: int, timeout: float = 300.0,
           env: Mapping[str, str] | None = None) -> str:
    """The one pinned fetch: ``source``, a URL (:func:`download` under the deployer's guard) or
    a file a person handed over (:func:`copy_local`), at most ``max_bytes``, into ``dest``; bytes
    without ``sha256`` are ``InvalidArgs`` naming both digests and ``what``, and no ``dest``."""
    try:
        if isinstance(source, Path):
            got = copy_local(source, dest, max_bytes=max_bytes, shown=str(source))
        else:
            seen = os.environ if env is None else env
            got = download(source, dest, guard=NetGuard.from_env(seen),
                           limits=FetchLimits(max_bytes=max_bytes, timeout=timeout), env=seen).sha256
        if got != sha256:
            raise InvalidArgs(f"{source}: sha256 {got} is not the pinned {sha256} ({what}); nothing was kept")
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return str(source)


def local_path(spec: str, base: Path) -> Path | None:
    """The local file a ``file://`` URL or a toolkit-relative path names (None for http(s))."""
    if spec.startswith(("http://", "https://")):
        return None
    if spec.startswith("file://"):
        rest = spec[len("file://"):]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost"):]
        if not rest.startswith("/"):
            raise InvalidArgs(f"{spec}: a file:// URL names an absolute path (file:///path/to/file)")
        from urllib.parse import unquote

        return Path(unquote(rest))
    if "://" in spec:
        raise InvalidArgs(f"{spec}: only https://, http://, file:// URLs or paths inside the toolkit "
                          "are fetched")
    return base / spec
