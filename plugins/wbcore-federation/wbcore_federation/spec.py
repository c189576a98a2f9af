"""A federation toolkit's declaration, read from its ``manifest.org``.

The SOURCE is the toolkit's keywords; each entity is a heading tagged ``:entity:``::

    #+EXEC: federation
    #+CAPS: net secrets
    #+SOURCE: http-json                      (the connector; a plugin may add others)
    #+URL: https://tracker.example/api       (the base URL every entity path joins)
    #+AUTH: hmac-sha256 tracker-key          (or: bearer-env TRACKER_TOKEN; or none)
    #+PAGINATION: link                       (or: cursor <field.path> <param>; page <param>; none)
    #+ROWS_PATH: data.items                  (where the rows sit in a page; default: the top level)
    #+MAX_PAGES: 50
    #+CACHE_TTL: 300                         (seconds a page is served from the cache; then ETag revalidation)
    #+RATE_LIMIT: 10/1                       (at most 10 requests per 1 s)
    #+SYNC: issues tracker.org               (the entity ``wbx fed sync`` mirrors, and the Org file)

    ** Issues :entity:
       :PROPERTIES:
       :ENTITY: issues
       :PATH: /issues
       :KEY: id
       :TITLE: title
       :FIELDS: id title state owner_id
       :PUSHDOWN: state                      (filters the source applies as ?state=…)
       :PAGINATION: cursor next_cursor cursor (this entity's own, else #+PAGINATION)
       :END:

Seed 000's single-source form — ``#+URL``, ``#+ROWS_PATH``, ``#+ENV_KEYS`` and no ``:entity:``
heading — is one entity named after the toolkit, read from ``#+URL`` itself (key ``#+KEY``,
default ``id``); ``#+ENV_KEYS: VAR`` is ``#+AUTH: bearer-env VAR``.

Every value is checked here, once, with the file and line in the message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from wbcore_runtime.contract.errors import InvalidArgs

ENTITY_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
PATH_RE = re.compile(r"^/(?:[A-Za-z0-9._~/-]|\{[a-z][a-z0-9_]{0,62}\})*$")  # {name}: a --param
SECRET_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
ENV_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
MAX_PAGES = 1000
DEFAULT_KIND = "http-json"
MAX_TTL = 7 * 24 * 3600
DEFAULT_MAX_PAGES = 100


class SpecError(InvalidArgs):
    """The federation declaration is malformed; says where and how to fix it."""


@dataclass(frozen=True, slots=True)
class Auth:
    scheme: str  # "none" | "hmac-sha256" | "bearer-env"
    name: str = ""  # the secret's name in the broker, or the environment variable's


@dataclass(frozen=True, slots=True)
class Pagination:
    style: str  # "none" | "link" | "cursor" | "page"
    field: str = ""  # cursor: where the next cursor sits in a page (dotted path)
    param: str = ""  # cursor/page: the query parameter that carries it


@dataclass(frozen=True, slots=True)
class Entity:
    name: str
    path: str
    key: str
    title: str
    fields: tuple[str, ...]  # () = every field the rows carry
    rows_path: str
    pushdown: tuple[str, ...] = ()  # fields the source filters on as ?field=value
    pagination: Pagination | None = None  # this entity's own :PAGINATION: (else the source's)


@dataclass(frozen=True, slots=True)
class Source:
    toolkit: str
    kind: str  # the connector (``#+SOURCE``; default http-json), a wbcore_federation_sources name
    keywords: dict[str, str]  # every keyword, for a custom connector's own settings
    base_url: str
    auth: Auth
    pagination: Pagination
    max_pages: int
    entities: tuple[Entity, ...]
    sync_entity: str | None
    sync_file: str | None
    cache_ttl: int = 0  # seconds; 0 = no cache
    rate: tuple[int, float] | None = None  # (requests, per seconds)
    #: The ``{name}`` placeholders of ``#+URL`` and the entities' paths, each a value the
    #: caller gives (``--param name=value``), filled in percent-encoded as one path segment.
    params: tuple[str, ...] = ()
    #: ``#+ACCEPT``: the JSON media type the source is asked for (a package index answers its
    #: JSON form, PEP 691, only to ``application/vnd.pypi.simple.v1+json``).
    accept: str = "application/json"

    def url(self, entity: Entity, values: Mapping[str, str], env: Mapping[str, str]) -> str:
        """The entity's URL with its placeholders filled: :func:`fill`."""
        return fill(self.base_url + entity.path, values, env, self.toolkit)

    def entity(self, name: str) -> Entity:
        for e in self.entities:
            if e.name == name:
                return e
        known = ", ".join(e.name for e in self.entities) or "none declared"
        raise InvalidArgs(f"{self.toolkit} has no entity {name!r} (entities: {known})")


def _fail(path: Path, line: int, what: str, why: str) -> SpecError:
    return SpecError(f"{path}:{line}: {what}: {why}")


def load(
    toolkit_id: str, manifest_path: Path, keywords: dict[str, str], lines: dict[str, int], text: str
) -> Source:
    """The source a federation toolkit declares (``keywords``/``lines`` from its parsed manifest)."""
    def at(key: str) -> int:
        return lines.get(key, 1)

    kind = (keywords.get("SOURCE") or DEFAULT_KIND).strip()
    if not re.match(r"^[a-z][a-z0-9-]{0,62}$", kind):
        raise _fail(
            manifest_path, at("SOURCE"), "#+SOURCE", f"{kind!r} is not a connector name (e.g. {DEFAULT_KIND})"
        )
    url = (keywords.get("URL") or "").strip()
    bad = [n for n in PLACEHOLDER_RE.findall(url) if n != PIP_INDEX and not PARAM_RE.match(n)]
    if bad or url.count("{") != len(PLACEHOLDER_RE.findall(url)) or url.count("}") != url.count("{"):
        raise _fail(
            manifest_path,
            at("URL"),
            "#+URL",
            f"{url!r}: a placeholder is {{name}} (lowercase letters, digits, "
            f"_) in the path, or {{{PIP_INDEX}}} first (the deployer's pip index)",
        )
    if PIP_INDEX in PLACEHOLDER_RE.findall(url) and not url.startswith("{" + PIP_INDEX + "}"):
        raise _fail(
            manifest_path,
            at("URL"),
            "#+URL",
            f"{{{PIP_INDEX}}} stands for an index URL: write it first ({{{PIP_INDEX}}}/{{package}}/)",
        )
    # Validated with every placeholder standing for a plain value: a placeholder never names a host.
    parts = urlsplit(
        PLACEHOLDER_RE.sub(lambda m: "https://index.invalid" if m.group(1) == PIP_INDEX else "x", url)
    )
    if url or kind == DEFAULT_KIND:
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise _fail(
                manifest_path,
                at("URL"),
                "#+URL",
                f"{url!r} is not an http(s) base URL (e.g. https://api.example/v1)",
            )
        if parts.username or parts.password or parts.query or parts.fragment:
            raise _fail(
                manifest_path,
                at("URL"),
                "#+URL",
                "no credentials, query or fragment in the base URL (credentials come from #+AUTH)",
            )
    raw_auth = keywords.get("AUTH")
    if raw_auth is None and keywords.get("ENV_KEYS"):
        # Seed 000's form: the host-held secret named by #+ENV_KEYS is the bearer token.
        names = keywords["ENV_KEYS"].replace(",", " ").split()
        if len(names) != 1:
            raise _fail(
                manifest_path,
                at("ENV_KEYS"),
                "#+ENV_KEYS",
                "names more than one variable; say which one "
                "authenticates with #+AUTH: bearer-env <VARIABLE>",
            )
        raw_auth, auth_line = f"bearer-env {names[0]}", at("ENV_KEYS")
    else:
        auth_line = at("AUTH")
    auth = _auth(raw_auth or "none", manifest_path, auth_line)
    pagination = _pagination(keywords.get("PAGINATION", "none"), manifest_path, at("PAGINATION"))
    raw_pages = keywords.get("MAX_PAGES", str(DEFAULT_MAX_PAGES)).strip()
    if not raw_pages.isdigit() or not 0 < int(raw_pages) <= MAX_PAGES:
        raise _fail(
            manifest_path, at("MAX_PAGES"), "#+MAX_PAGES", f"{raw_pages!r}: a whole number 1..{MAX_PAGES}"
        )
    rows_default = (keywords.get("ROWS_PATH") or "").strip()
    entities = _entities(text, manifest_path, rows_default)
    if not entities and url:
        # Seed 000's single-source form: #+URL is the one entity, named after the toolkit.
        key = (keywords.get("KEY") or "id").strip()
        if not FIELD_RE.match(key):
            raise _fail(
                manifest_path, at("KEY"), "#+KEY", f"{key!r}: the field that identifies a row (e.g. id)"
            )
        name = re.sub(r"[^a-z0-9_]", "_", toolkit_id.lower())[:63]
        name = name if ENTITY_RE.match(name) else f"t_{name}"[:63]
        entities = [Entity(name, "", key, key, (), rows_default)]
    if not entities:
        raise _fail(
            manifest_path, 1, "entities", "no heading tagged :entity: (each needs :ENTITY:, :PATH: and :KEY:)"
        )
    sync_entity = sync_file = None
    if keywords.get("SYNC"):
        bits = keywords["SYNC"].split()
        if len(bits) != 2 or not bits[1].endswith(".org") or "/" in bits[1] or bits[1].startswith("."):
            raise _fail(
                manifest_path, at("SYNC"), "#+SYNC", "write it as <entity> <file>.org (a plain file name)"
            )
        sync_entity, sync_file = bits
        if sync_entity not in {e.name for e in entities}:
            raise _fail(manifest_path, at("SYNC"), "#+SYNC", f"{sync_entity!r} is not a declared entity")
    raw_ttl = keywords.get("CACHE_TTL", "0").strip()
    if not raw_ttl.isdigit() or int(raw_ttl) > MAX_TTL:
        raise _fail(manifest_path, at("CACHE_TTL"), "#+CACHE_TTL", f"{raw_ttl!r}: seconds, 0..{MAX_TTL}")
    rate = None
    if keywords.get("RATE_LIMIT"):
        m = re.match(r"^\s*(\d{1,6})\s*/\s*(\d+(?:\.\d+)?)\s*$", keywords["RATE_LIMIT"])
        if not m or int(m.group(1)) < 1 or not 0 < float(m.group(2)) <= 3600:
            raise _fail(manifest_path, at("RATE_LIMIT"), "#+RATE_LIMIT", f"{keywords['RATE_LIMIT']!r}: write "
                        "<requests>/<seconds> (10/1: at most ten requests a second)")
        rate = (int(m.group(1)), float(m.group(2)))
    names = [n for n in PLACEHOLDER_RE.findall(url + "".join(e.path for e in entities)) if n != PIP_INDEX]
    accept = (keywords.get("ACCEPT") or "application/json").strip()
    if not ACCEPT_RE.match(accept):
        raise _fail(manifest_path, at("ACCEPT"), "#+ACCEPT", f"{accept!r}: a JSON media type "
                    "(application/json, application/<vendor>+json)")
    # A base URL is joined with entity paths (/items): no trailing slash. The seed form's one
    # entity reads #+URL itself, where a trailing slash is the address (PEP 503 pages end in one).
    base = url if all(not e.path for e in entities) else url.rstrip("/")
    return Source(toolkit_id, kind, dict(keywords), base, auth, pagination, int(raw_pages), tuple(entities),
                  sync_entity, sync_file, int(raw_ttl), rate, tuple(dict.fromkeys(names)), accept)


#: ``#+ACCEPT``: JSON, in one media type of its own (no parameters, no list).
ACCEPT_RE = re.compile(r"^application/(?:json|[a-z0-9.+-]{1,100}\+json)$")


#: ``{name}`` in ``#+URL`` or an entity's ``:PATH:``.
PLACEHOLDER_RE = re.compile(r"\{([^{}/]*)\}")
PARAM_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: ``{pip-index}``: the simple index the deployer's pip is configured with, without its trailing
#: slash (``wbcore_runtime.guard.registries.pip_index``: ``PIP_INDEX_URL``, pip's configuration, pip's
#: default), so a toolkit reading a package index names no host of its own.
PIP_INDEX = "pip-index"
#: One filled value: percent-encoded as a single path segment, so it can never add a path,
#: a query or a host.
MAX_PARAM_CHARS = 512


def fill(template: str, values: Mapping[str, str], env: Mapping[str, str], toolkit: str) -> str:
    """``template`` with ``{pip-index}`` and every ``{name}`` filled; a missing or unknown
    value is an :class:`InvalidArgs` that names the ``--param`` to give."""
    from urllib.parse import quote, urlsplit as _split

    wanted = [n for n in PLACEHOLDER_RE.findall(template) if n != PIP_INDEX]
    unknown = sorted(set(values) - set(wanted))
    if unknown:
        raise InvalidArgs(f"{toolkit}: no placeholder {', '.join(unknown)} in its URL; "
                          f"it takes {', '.join('--param ' + n + '=VALUE' for n in wanted) or 'no --param'}")
    missing = [n for n in dict.fromkeys(wanted) if not values.get(n)]
    if missing:
        raise InvalidArgs(f"{toolkit}: its URL needs {' '.join('--param ' + n + '=VALUE' for n in missing)}")
    for name, value in values.items():
        if len(value) > MAX_PARAM_CHARS:
            raise InvalidArgs(f"--param {name}: {len(value)} characters (at most {MAX_PARAM_CHARS})")
        if value in (".", ".."):
            # quote() leaves dots as they are, and a URL's dot segments are resolved (a/../ is /):
            # such a value would leave its one segment and climb the source's path.
            raise InvalidArgs(f"--param {name}: {value!r} is a dot segment, which would climb the URL's "
                              "path; give the value itself (e.g. --param package=httpx)")

    def one(m: re.Match[str]) -> str:
        if m.group(1) == PIP_INDEX:
            from wbcore_runtime.guard import registries

            index = _split(registries.pip_index(env))  # credentials in the index URL stay with pip
            return f"{index.scheme}://{index.netloc.rsplit('@', 1)[-1]}{index.path}".rstrip("/")
        return quote(values[m.group(1)], safe="")

    return PLACEHOLDER_RE.sub(one, template)


def _auth(raw: str, path: Path, line: int) -> Auth:
    bits = raw.split()
    if not bits or bits == ["none"]:
        return Auth("none")
    if len(bits) == 2 and bits[0] == "hmac-sha256" and SECRET_RE.match(bits[1]):
        return Auth("hmac-sha256", bits[1])
    if len(bits) == 2 and bits[0] == "bearer-env" and ENV_RE.match(bits[1]):
        return Auth("bearer-env", bits[1])
    raise _fail(
        path,
        line,
        "#+AUTH",
        f"{raw!r}: use 'hmac-sha256 <secret name>' (signed by the secrets broker), "
        "'bearer-env <VARIABLE>' (a token the deployer holds in the environment) or 'none'",
    )


def _pagination(raw: str, path: Path, line: int) -> Pagination:
    bits = raw.split()
    if not bits or bits == ["none"]:
        return Pagination("none")
    if bits == ["link"]:
        return Pagination("link")
    if (
        len(bits) == 3
        and bits[0] == "cursor"
        and all(FIELD_RE.match(p) for p in bits[1].split("."))
        and FIELD_RE.match(bits[2])
    ):
        return Pagination("cursor", bits[1], bits[2])
    if len(bits) == 2 and bits[0] == "page" and FIELD_RE.match(bits[1]):
        return Pagination("page", "", bits[1])
    raise _fail(
        path,
        line,
        "#+PAGINATION",
        f"{raw!r}: use 'link' (RFC 8288 rel=next), 'cursor <field.path> <param>', 'page <param>' or 'none'",
    )


def _entities(text: str, path: Path, rows_default: str) -> list[Entity]:
    import orgparse

    out: list[Entity] = []
    root = orgparse.loads(text, filename=str(path))
    for node in root[1:]:
        if "entity" not in node.shallow_tags:
            continue
        line = node.linenumber
        props = {str(k).upper(): str(v).strip() for k, v in node.properties.items()}
        name = props.get("ENTITY", "")
        if not ENTITY_RE.match(name):
            raise _fail(
                path, line, ":ENTITY:", f"{name!r} must match {ENTITY_RE.pattern} (it names a SQL table)"
            )
        epath = props.get("PATH", "")
        if not PATH_RE.match(epath) or "//" in epath or "/../" in epath + "/" or "/./" in epath + "/":
            raise _fail(
                path, line, ":PATH:", f"{epath!r}: a path below #+URL (/items), no '..', query or host"
            )
        key = props.get("KEY", "")
        if not FIELD_RE.match(key):
            raise _fail(path, line, ":KEY:", f"{key!r}: the field that identifies a row (e.g. id)")
        title = props.get("TITLE", key)
        fields = tuple(props.get("FIELDS", "").split())
        for f in (title, *fields):
            if not FIELD_RE.match(f):
                raise _fail(path, line, ":FIELDS:/:TITLE:", f"{f!r} is not a field name")
        if fields and key not in fields:
            fields = (key, *fields)
        rows_path = props.get("ROWS_PATH", rows_default)
        if rows_path and not all(FIELD_RE.match(p) for p in rows_path.split(".")):
            raise _fail(
                path, line, ":ROWS_PATH:", f"{rows_path!r}: a dotted path of field names (data.items)"
            )
        pushdown = tuple(props.get("PUSHDOWN", "").split())
        for f in pushdown:
            if not FIELD_RE.match(f):
                raise _fail(path, line, ":PUSHDOWN:", f"{f!r} is not a field name")
        if name in {e.name for e in out}:
            raise _fail(path, line, ":ENTITY:", f"{name!r} is declared twice")
        own = _pagination(props["PAGINATION"], path, line) if props.get("PAGINATION") else None
        out.append(Entity(name, epath, key, title, fields, rows_path, pushdown, own))
    return out
