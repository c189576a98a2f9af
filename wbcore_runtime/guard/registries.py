"""Which package registry to fetch from: the one the user configured for npm or pip, never a
host written into wbcore.

The lanes fetch pinned upstream files from package registries (the ts and svelte compilers
from npm, jq's sources from a Python package index). Each file is sha256-pinned, so the
registry is a matter of *where* — and a deployer with a mirror (often on a private address)
has already told npm and pip where. We ask them, in their own order:

- **npm**: ``NPM_CONFIG_REGISTRY`` / ``npm_config_registry``, else ``npm config get registry``
  (npm's own answer: ``.npmrc`` in the project, the user's and the global one, and npm's
  built-in default), else ``registry=`` in ``$NPM_CONFIG_USERCONFIG`` or ``~/.npmrc``.
- **pip**: ``PIP_INDEX_URL``, else ``index-url`` from ``python -m pip config list`` (pip's
  own configuration files: site, user, global; the ``download``, then ``install``, then
  ``global`` section), else pip's built-in default index, read from pip itself.

Nothing here connects: :func:`npm_tarball` and :func:`pypi_file` hand URLs to the one
fetcher (:mod:`wbcore_runtime.guard.fetch`) with the caller's guard, which is
:meth:`wbcore_runtime.guard.netguard.NetGuard.from_env` — a mirror on a private address is
allowed by ``WB_ALLOW_PRIVATE_HOSTS=<host>`` (or ``WB_ALLOW_PRIVATE_SOURCES=1``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.contract.errors import InvalidArgs, NotFound
from wbcore_runtime.guard.netguard import NetGuard

ASK_TIMEOUT_S = 30.0
INDEX_PAGE_MAX = 8 << 20
_NPMRC_REGISTRY = re.compile(r"^\s*registry\s*=\s*(\S+)\s*$", re.MULTILINE)


def _http_url(url: str, where: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise InvalidArgs(f"{where}: {url!r} is not an http(s) URL; set it to your registry's URL")
    return url.strip()


def _ask(argv: list[str], env: Mapping[str, str]) -> str | None:
    """A configuration tool's answer (stdout), or None when it is missing or fails."""
    try:
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=ASK_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def npm_registry(env: Mapping[str, str] | None = None) -> str:
    """The npm registry the user configured (ends without ``/``)."""
    seen = os.environ if env is None else env
    for name in ("NPM_CONFIG_REGISTRY", "npm_config_registry"):
        if seen.get(name):
            return _http_url(seen[name], name).rstrip("/")
    npm = shutil.which("npm", path=seen.get("PATH") or os.environ.get("PATH"))
    if npm:
        said = _ask([npm, "config", "get", "registry"], {**os.environ, **seen})
        if said and said.strip() and said.strip() != "undefined":
            return _http_url(said.strip(), "npm config get registry").rstrip("/")
    rc = Path(seen.get("NPM_CONFIG_USERCONFIG") or Path(seen.get("HOME") or Path.home()) / ".npmrc")
    try:
        found = _NPMRC_REGISTRY.findall(rc.read_text(errors="replace"))
    except OSError:
        found = []
    if found:
        return _http_url(found[-1], str(rc)).rstrip("/")
    raise NotFound("no npm registry is configured: set NPM_CONFIG_REGISTRY=<your registry's URL>, put "
                   "registry=<URL> in ~/.npmrc, or install npm (its own default then applies)")


def npm_tarball(name: str, version: str, env: Mapping[str, str] | None = None) -> str:
    """The tarball URL of ``name@version`` on the configured registry (npm's layout)."""
    base = name.rsplit("/", 1)[-1]  # a scoped @scope/name keeps its scope in the path only
    return f"{npm_registry(env)}/{name}/-/{base}-{version}.tgz"


_PIP_DEFAULT = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
_PIP_KEYS = ("download.index-url", "install.index-url", "global.index-url")


def pip_index(env: Mapping[str, str] | None = None) -> str:
    """The simple index the user's pip would use (ends without ``/``)."""
    seen = os.environ if env is None else env
    if seen.get("PIP_INDEX_URL"):
        return _http_url(seen["PIP_INDEX_URL"], "PIP_INDEX_URL").rstrip("/")
    run_env = {**os.environ, **seen}
    listed = _ask([sys.executable, "-m", "pip", "config", "list"], run_env)
    if listed is not None:
        values = {}
        for line in listed.splitlines():
            key, eq, value = line.partition("=")
            if eq:
                values[key.strip()] = value.strip().strip("'\"")
        for key in _PIP_KEYS:
            if values.get(key):
                return _http_url(values[key].split()[0], f"pip config {key}").rstrip("/")
    default = _ask([sys.executable, "-c", _PIP_DEFAULT], run_env)
    if default and default.strip():
        return _http_url(default.strip(), "pip's default index").rstrip("/")
    raise NotFound("no Python package index is configured: set PIP_INDEX_URL=<your index's simple URL> or "
                   "`python -m pip config set global.index-url <URL>` (pip must be installed)")


def _normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = ""

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, self._text.strip()))
            self._href = None


def pypi_file(project: str, filename: str, sha256: str, *, guard: NetGuard,
              env: Mapping[str, str] | None = None, timeout: float = 60.0) -> str:
    """The URL of ``filename`` (pinned by ``sha256``) on the configured index's page for
    ``project`` (PEP 691 JSON or PEP 503 HTML), read through the one fetcher and ``guard``."""
    page_url = f"{pip_index(env)}/{_normalize(project)}/"
    body, got = _fetch.get_bytes(page_url, guard=guard, env=env,
                                 limits=_fetch.FetchLimits(max_bytes=INDEX_PAGE_MAX, timeout=timeout),
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    found: list[tuple[str, str]] = []  # (url, sha256 the index states, or "")
    if "json" in got.content_type:
        try:
            files = json.loads(body)["files"]
            found = [(str(f["url"]), str((f.get("hashes") or {}).get("sha256", ""))) for f in files
                     if f.get("filename") == filename]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidArgs(f"{page_url}: not a PEP 691 project page ({exc})") from None
    else:
        parser = _Anchors()
        parser.feed(body.decode("utf-8", "replace"))
        for href, text in parser.links:
            url, _, frag = href.partition("#")
            if text == filename or url.rsplit("/", 1)[-1] == filename:
                digest = re.search(r"sha256=([0-9a-fA-F]{64})", frag)
                found.append((url, digest.group(1).lower() if digest else ""))
    if not found:
        raise NotFound(f"{page_url}: the index lists no {filename} "
                       f"(is the index a full mirror of {project}?)")
    url, stated = found[0]
    if stated and stated != sha256:
        raise InvalidArgs(f"{page_url}: the index states sha256 {stated} for {filename}, "
                          f"not the pinned {sha256}")
    return urljoin(got.url, url)
