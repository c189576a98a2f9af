"""SOURCE: the generic REST/JSON connector — every page of an entity, as rows.

Every request goes through the core's one fetcher and SSRF guard (``wbcore_runtime.guard.fetch``,
``NetGuard.from_env``): a source on a private or loopback address is refused unless the
deployer allows it (``WB_ALLOW_PRIVATE_HOSTS`` / ``WB_ALLOW_PRIVATE_SOURCES``), and so is a
``Link: rel=next`` that points off the source's origin. Each request is one audited
decision (``cap: net, op: fed.get``) under the toolkit's principal; the audit keeps the
URL's scheme, host and path only.

Bounded while the work runs: each page by a byte budget as it streams, the whole read by a
total budget, the page count by ``#+MAX_PAGES``, rows by :data:`MAX_ROWS`, every request by
the deadline left; ``#+RATE_LIMIT`` paces requests (within the deadline) and
``#+CACHE_TTL`` serves fresh pages from ``wbcore_federation.cache`` and revalidates stale ones
with ``If-None-Match``.

Auth never hands a secret to this code: ``hmac-sha256 <name>`` asks the secrets broker
(through the Dock, so the grant is checked and the call audited by digest) to sign
``METHOD\\nPATH?QUERY\\nTIMESTAMP``; ``bearer-env <VAR>`` sends a token the deployer keeps
in the runtime's environment. Neither value is put in a message, a log or the audit.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from wbcore_federation.cache import PageCache
from wbcore_federation.spec import Entity, Source
from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.dispatch.audit import digest, redact_target
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, Timeout, WbError
from wbcore_runtime.guard.netguard import NetGuard

PAGE_BYTES = 8 << 20
TOTAL_BYTES = 64 << 20
MAX_ROWS = 200_000
TIMEOUT_S = 120.0
_LINK_RE = re.compile(r'<([^>]*)>\s*;([^,]*)')


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    rows: tuple[dict[str, Any], ...]
    bytes: int


def _dig(doc: Any, path: str, where: str) -> Any:
    cur = doc
    for part in path.split(".") if path else ():
        if not isinstance(cur, dict) or part not in cur:
            raise InvalidArgs(
                f"{where}: the page has no {path!r} (ROWS_PATH / cursor field); check the source's shape"
            )
        cur = cur[part]
    return cur


def next_link(header: str) -> str | None:
    """The ``rel="next"`` target of an RFC 8288 ``Link`` header, if any."""
    for target, params in _LINK_RE.findall(header or ""):
        rels = re.findall(r'rel\s*=\s*"?([^";]+)"?', params)
        if any("next" in r.split() for r in rels):
            return target.strip()
    return None


class Connector:
    """One source's connection state: its guard, its Dock context, its byte budget."""

    def __init__(self, runtime: Any, source: Source, *, caps: frozenset[str], tenant: str = "default",
                 timeout: float = TIMEOUT_S, url_params: Mapping[str, str] | None = None) -> None:
        self.runtime = runtime
        self.source = source
        self.env: Mapping[str, str] = runtime.env
        self.guard = NetGuard.from_env(self.env)
        self.principal = Principal(tenant, source.toolkit)
        self.caps = caps
        self.dock = runtime.dock
        self.ctx = self.dock.context(
            principal=self.principal, caps=caps, timeout=timeout, toolkit=source.toolkit
        )
        self.deadline = time.monotonic() + timeout
        self.spent = 0
        #: The values of the source's ``{name}`` placeholders (``--param``), checked here, once.
        self.url_params = dict(url_params or {})
        origin = urlsplit(source.url(source.entities[0], self.url_params, self.env))
        self.origin = (origin.scheme, (origin.hostname or "").lower(), origin.port)
        self.cache: PageCache | None = None
        if source.cache_ttl > 0:
            root = runtime.home / "federation" / "cache" / tenant / source.toolkit
            self.cache = PageCache(root, source.cache_ttl, f"{source.auth.scheme}:{source.auth.name}")
        self.sent: deque[float] = deque()
        self._env_ok: set[str] = set()  # variables whose grant was checked (and audited) once

    def _pace(self) -> None:
        """``#+RATE_LIMIT``: wait for a slot, never past the read's deadline."""
        if self.source.rate is None:
            return
        n, per = self.source.rate
        while True:
            now = time.monotonic()
            while self.sent and now - self.sent[0] >= per:
                self.sent.popleft()
            if len(self.sent) < n:
                self.sent.append(now)
                return
            wait = per - (now - self.sent[0])
            if now + wait > self.deadline:
                raise Timeout(f"{self.source.toolkit}: #+RATE_LIMIT {n}/{per:g}s leaves no slot before the "
                              "read's deadline; stopped")
            time.sleep(wait)

    # --- one request ------------------------------------------------------------------

    def _auth_headers(self, url: str) -> dict[str, str]:
        auth = self.source.auth
        if auth.scheme == "none":
            return {}
        if auth.scheme == "bearer-env":
            self._consent_env(auth.name)
            token = self.env.get(auth.name, "")
            if not token:
                raise InvalidArgs(f"{self.source.toolkit}: #+AUTH names {auth.name}, which is not set in the "
                                  "runtime's environment; the deployer sets it")
            return {"Authorization": f"Bearer {token}"}
        parts = urlsplit(url)
        ts = str(int(time.time()))
        message = f"GET\n{parts.path or '/'}{'?' + parts.query if parts.query else ''}\n{ts}".encode()
        signed = self.dock.call(self.ctx, "secrets", "sign", {"name": auth.name, "message": message})
        return {
            "Authorization": f"WB-HMAC-SHA256 key={auth.name}, ts={ts}, "
                             f"sig={bytes(signed['signature']).hex()}"
        }

    def _consent_env(self, name: str) -> None:
        """The deployer's grant naming ``name`` (the core's ``consent.check_env``) before its
        value is read; audited with the variable's name, never its value."""
        from wbcore_runtime.trust import consent

        if name in self._env_ok:
            return
        try:
            consent.check_env(self.runtime.home, self.runtime.toolkit(self.source.toolkit), name)
        except CapabilityDenied as exc:
            self.dock.audit.record(
                principal=self.principal.key, cap="env", op="env.read", args_digest="", outcome="denied",
                kind=exc.kind.value, reason="no grant names it", target=name,
            )
            raise
        self.dock.audit.record(principal=self.principal.key, cap="env", op="env.read", args_digest="",
                               outcome="allowed", target=name)
        self._env_ok.add(name)

    def _audit(
        self, url: str, outcome: str, *, exc: WbError | None = None, nbytes: int = 0, t0: float
    ) -> None:
        self.dock.audit.record(
            principal=self.principal.key, cap="net", op="fed.get", args_digest=digest(url.encode()),
            outcome=outcome, kind=exc.kind.value if exc else None,
            reason=(getattr(exc, "reason", None) or exc.kind.value) if exc else None,
            target=url, nbytes=nbytes, ms=(time.perf_counter() - t0) * 1000)

    def get(self, url: str) -> tuple[Any, _fetch.Fetched]:
        """GET one page (JSON) through the guard; audited allowed or denied."""
        t0 = time.perf_counter()
        cached = self.cache.get(url) if self.cache is not None else None
        if cached is not None and self.cache is not None and self.cache.fresh(cached) and "net" in self.caps:
            self._charge(len(cached.body))
            self.dock.audit.record(
                principal=self.principal.key, cap="net", op="fed.cache", args_digest=digest(url.encode()),
                outcome="allowed", target=url, nbytes=len(cached.body), ms=0.0,
            )
            got = _fetch.Fetched(url, 200, len(cached.body), "", "application/json", (("link", cached.link),))
            return self._json(cached.body, url), got
        try:
            if "net" not in self.caps:
                exc = CapabilityDenied(
                    f"{self.source.toolkit}: cap 'net' is not granted; a federation source "
                    f"needs it (wbx toolkit grant {self.source.toolkit} net)"
                )
                exc.reason = "not-granted"  # type: ignore[attr-defined]
                raise exc
            p = urlsplit(url)
            try:
                here = (p.scheme, (p.hostname or "").lower(), p.port)
            except ValueError:  # a malformed port in a Link target
                here = (p.scheme, "", None)
            if here != self.origin:
                exc2 = CapabilityDenied(f"{self.source.toolkit}: a page points off the source's origin "
                                        f"({p.scheme}://{p.hostname}); not followed")
                exc2.reason = "off-origin"  # type: ignore[attr-defined]
                raise exc2
            self._pace()
            left = self.deadline - time.monotonic()
            budget = min(PAGE_BYTES, TOTAL_BYTES - self.spent)
            if left <= 0 or budget <= 0:
                raise InvalidArgs(f"{self.source.toolkit}: the read is over its "
                                  f"{'deadline' if left <= 0 else f'{TOTAL_BYTES}-byte budget'}; stopped")
            headers = {"Accept": self.source.accept, **self._auth_headers(url)}
            if cached is not None and cached.etag:
                headers["If-None-Match"] = cached.etag
            body, got = _fetch.get_bytes(
                url, guard=self.guard,
                limits=_fetch.FetchLimits(max_bytes=budget, timeout=left, max_redirects=0), env=self.env,
                headers=headers, ok=(200, 304) if cached is not None and cached.etag else (200,),
            )
        except WbError as exc:
            self._audit(url, "denied", exc=exc, t0=t0)
            raise
        self.spent += got.size
        self._audit(url, "allowed", nbytes=got.size, t0=t0)
        if got.status == 304 and cached is not None and self.cache is not None:
            self._charge(len(cached.body))
            self.cache.refresh(url, cached)  # still current: fresh for another TTL
            got = _fetch.Fetched(
                url, 200, len(cached.body), got.sha256, "application/json", (("link", cached.link),)
            )
            return self._json(cached.body, url), got
        doc = self._json(body, url)
        if self.cache is not None:
            self.cache.put(url, etag=got.header("etag"), link=got.header("link"), body=body)
        return doc, got

    def _charge(self, size: int) -> None:
        """A page served from the cache counts toward the read's byte budget as a fetched one does."""
        if size > TOTAL_BYTES - self.spent:
            raise InvalidArgs(f"{self.source.toolkit}: the read is over its {TOTAL_BYTES}-byte budget "
                              "(cached pages count too); stopped")
        self.spent += size

    @staticmethod
    def _json(body: bytes, url: str) -> Any:
        from wbcore_runtime.contract import jsonbound

        try:
            return jsonbound.loads(body, what="the page")  # too deep a page is refused, not a RecursionError
        except jsonbound.JsonRefused as exc:
            raise InvalidArgs(f"{_shown(url)}: {exc}") from None

    # --- every page of an entity ----------------------------------------------------------

    def pages(self, entity: Entity, params: Mapping[str, str] | None = None) -> Iterator[Page]:
        src = self.source
        url = src.url(entity, self.url_params, self.env)
        if params:
            url += "?" + urlencode(sorted(params.items()))
        page_no = 1
        pag = entity.pagination or src.pagination
        if pag.style == "page":
            url = _with_param(url, pag.param, "1")
        for _ in range(src.max_pages):
            doc, got = self.get(url)
            raw = _dig(doc, entity.rows_path, _shown(url))
            if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
                raise InvalidArgs(
                    f"{_shown(url)}: the rows at {entity.rows_path or 'the top level'!r} are not a list "
                    "of objects; set :ROWS_PATH:"
                )
            yield Page(url, tuple(raw), got.size)
            nxt: str | None = None
            if pag.style == "link":
                target = next_link(got.header("link"))
                nxt = urljoin(url, target) if target else None
            elif pag.style == "cursor":
                cursor = _dig(doc, pag.field, _shown(url)) if _has(doc, pag.field) else None
                if cursor not in (None, ""):
                    nxt = _with_param(url, pag.param, str(cursor))
            elif pag.style == "page" and raw:
                page_no += 1
                nxt = _with_param(url, pag.param, str(page_no))
            if not nxt or nxt == url:
                return
            url = nxt
        raise InvalidArgs(f"{src.toolkit}/{entity.name}: more than #+MAX_PAGES {src.max_pages} pages; "
                          "raise #+MAX_PAGES or narrow the query")

    def row_pages(
        self, entity: Entity, params: Mapping[str, str] | None = None
    ) -> Iterator[tuple[dict[str, Any], ...]]:
        """Every row, a page at a time: a page is fetched when the one before is consumed."""
        n = 0
        for page in self.pages(entity, params):
            n += len(page.rows)
            if n > MAX_ROWS:
                raise InvalidArgs(
                    f"{self.source.toolkit}/{entity.name}: more than {MAX_ROWS} rows; narrow the query"
                )
            yield page.rows

    def rows(self, entity: Entity, params: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        return [r for page in self.row_pages(entity, params) for r in page]


def _has(doc: Any, path: str) -> bool:
    cur = doc
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return False
        cur = cur[part]
    return True


def _shown(url: str) -> str:
    """A URL as messages show it (the audit's one redaction: no user-info, query or fragment)."""
    return redact_target(url) or ""


def _with_param(url: str, name: str, value: str) -> str:
    p = urlsplit(url)
    q = [(k, v) for k, v in parse_qsl(p.query, keep_blank_values=True) if k != name] + [(name, value)]
    return urlunsplit((p.scheme, p.netloc, p.path, urlencode(q), ""))
