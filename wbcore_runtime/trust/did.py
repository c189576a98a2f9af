"""``did:web``: the tenant's Ed25519 key republished at ``https://<host>/.well-known/did.json``.

did:key and did:web wrap one key, so a signature verifies under either (seed 004).
:func:`document` writes the DID document; :func:`resolve_web` fetches one over HTTPS
(bounded in size and time, no redirects) and returns its Ed25519 keys.

Testing local hosts: the resolver speaks plain ``http://`` only for a loopback host
(``127.0.0.1``, ``::1``, ``localhost``) and only when asked to, through
``allow_http_loopback=True`` or ``WB_DID_WEB_HTTP_LOOPBACK=1``. Everything else is
HTTPS, always.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from wbcore_runtime.trust import identity as _identity
from wbcore_runtime.contract.errors import InvalidArgs, Unreachable, WbError
from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.guard.netguard import NetGuard

DID_WEB_PREFIX = "did:web:"
ENV_HTTP_LOOPBACK = "WB_DID_WEB_HTTP_LOOPBACK"
MAX_DOCUMENT_BYTES = 64 * 1024
TIMEOUT_S = 5.0
_HOST_RE = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")
_SEGMENT_RE = re.compile(r"^[A-Za-z0-9._~%-]+$")


def did_for_host(host: str) -> str:
    """``example.com`` → ``did:web:example.com``; ``h:8443/u/a`` → ``did:web:h%3A8443:u:a``."""
    host = host.strip().removeprefix("https://").rstrip("/")
    name, _, path = host.partition("/")
    if not name or not _HOST_RE.match(name):
        raise InvalidArgs(f"did:web host {name!r} must be a host name or address, optionally with :port")
    parts = [quote(name, safe="[]")]
    for seg in (s for s in path.split("/") if s):
        if not _SEGMENT_RE.match(seg) or seg in (".", ".."):
            raise InvalidArgs(f"did:web path segment {seg!r} is not allowed")
        parts.append(seg)
    return DID_WEB_PREFIX + ":".join(parts)


def url_for(did: str, *, scheme: str = "https") -> str:
    """The document URL of a did:web (W3C did:web "Read")."""
    if not did.startswith(DID_WEB_PREFIX):
        raise InvalidArgs(f"{did[:60]!r} is not a did:web")
    parts = did[len(DID_WEB_PREFIX):].split("#", 1)[0].split(":")
    host = unquote(parts[0])
    if not host or not _HOST_RE.match(host):
        raise InvalidArgs(f"did:web {did[:80]!r} names no valid host")
    for seg in parts[1:]:
        if not seg or not _SEGMENT_RE.match(seg) or unquote(seg) in (".", ".."):
            raise InvalidArgs(f"did:web {did[:80]!r} has an invalid path segment {seg!r}")
    path = "/".join(unquote(s) for s in parts[1:])
    return f"{scheme}://{host}/" + (f"{path}/did.json" if path else ".well-known/did.json")


def document(ident: _identity.Identity, host: str) -> dict[str, Any]:
    """The did:web document for ``ident``'s key at ``host`` (also known as its did:key)."""
    did = did_for_host(host)
    mb = _identity.multibase_key(ident.public_key)
    vm = f"{did}#{mb}"
    return {
        "@context": ["https://www.w3.org/ns/did/v1", "https://w3id.org/security/multikey/v1"],
        "id": did,
        "alsoKnownAs": [ident.did],
        "verificationMethod": [{"id": vm, "type": "Multikey", "controller": did, "publicKeyMultibase": mb}],
        "authentication": [vm],
        "assertionMethod": [vm],
    }


def write_document(ident: _identity.Identity, host: str, out: Path) -> Path:
    """Write ``did.json`` atomically; returns its path."""
    data = json.dumps(document(ident, host), indent=2) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}.tmp"
    tmp.write_text(data, encoding="utf-8")
    os.replace(tmp, out)
    return out


def keys_in(doc: Any, did: str) -> list[bytes]:
    """Every Ed25519 key a DID document lists for ``did`` (other key types are skipped)."""
    if not isinstance(doc, dict):
        raise InvalidArgs(f"the document for {did} is not a JSON object")
    if doc.get("id") != did:
        raise InvalidArgs(f"the document served for {did} names itself {str(doc.get('id'))[:80]!r}")
    keys: list[bytes] = []
    # A key signs for the DID only if it is an assertion method (when the document lists them).
    assertion = doc.get("assertionMethod")
    methods = doc.get("verificationMethod") or []
    if not isinstance(methods, list):
        raise InvalidArgs(f"the document for {did}: verificationMethod is not a list")
    methods = list(methods)
    allowed: set[str] | None = None
    if isinstance(assertion, list):
        allowed = set()
        for ref in assertion:
            if isinstance(ref, str):
                allowed.add(ref if not ref.startswith("#") else did + ref)
            elif isinstance(ref, dict):
                methods.append(ref)
                if isinstance(ref.get("id"), str):
                    allowed.add(ref["id"] if not ref["id"].startswith("#") else did + ref["id"])
    for vm in methods:
        if not isinstance(vm, dict):
            continue
        vm_id = vm.get("id")
        if isinstance(vm_id, str) and vm_id.startswith("#"):
            vm_id = did + vm_id
        if allowed is not None and vm_id not in allowed:
            continue
        try:
            if isinstance(vm.get("publicKeyMultibase"), str):
                keys.append(_identity.decode_multikey(vm["publicKeyMultibase"]))
            elif isinstance(vm.get("publicKeyBase58"), str) and "Ed25519" in str(vm.get("type")):
                raw = _identity.b58decode(vm["publicKeyBase58"])
                if len(raw) == 32:
                    keys.append(raw)
            elif isinstance(vm.get("publicKeyJwk"), dict):
                jwk = vm["publicKeyJwk"]
                if jwk.get("kty") == "OKP" and jwk.get("crv") == "Ed25519" and isinstance(jwk.get("x"), str):
                    import base64

                    raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
                    if len(raw) == 32:
                        keys.append(raw)
        except (InvalidArgs, ValueError):
            continue
    return keys


def _is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host[1:].split("]", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def resolve_web(
    did: str,
    *,
    env: Mapping[str, str] | None = None,
    allow_http_loopback: bool = False,
    timeout: float = TIMEOUT_S,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> list[bytes]:
    """Fetch a did:web document and return its Ed25519 public keys (through the one fetcher)."""
    # The fetcher (ssl, the SSRF guard) loads only when a did:web is resolved, not with signing.

    env = os.environ if env is None else env
    https_url = url_for(did)
    host = https_url.split("/", 3)[2]
    insecure = allow_http_loopback or env.get(ENV_HTTP_LOOPBACK) == "1"
    loopback = insecure and _is_loopback(host)
    url = url_for(did, scheme="http") if loopback else https_url
    # The host comes from a manifest: the SSRF guard holds, except for the explicit loopback test mode.
    guard = NetGuard.from_env(env)
    if loopback:
        guard = NetGuard(allow_private=True, unresolved_is_dns_error=True)
    limits = _fetch.FetchLimits(max_bytes=max_bytes, timeout=timeout, max_redirects=0,
                           schemes=("http",) if loopback else ("https",))
    try:
        body, _ = _fetch.get_bytes(url, guard=guard, limits=limits, env=env,
                                   headers={"Accept": "application/did+json, application/json"})
    except WbError as exc:
        if isinstance(exc, _fetch.StatusRefused) and exc.status in (401, 403):
            # the host is there and said no: not a malformed identity, and fixable by whoever runs it
            raise Unreachable(
                f"{url} refused to serve the DID document (HTTP {exc.status}: it wants credentials); "
                f"a did:web document must be public — serve it without authentication, or sign with a did:key"
            ) from None
        if isinstance(exc, InvalidArgs):
            # the fetch could not get a document (a status, a cap, the SSRF guard): unresolved, not malformed
            raise Unreachable(f"{exc.message} (resolving {did} from {url})") from None
        raise type(exc)(f"{exc.message} (resolving {did} from {url})") from None
    try:
        doc = json.loads(bytes(body).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, a huge int, deep nesting
        raise InvalidArgs(f"{url}: not a JSON DID document ({exc})") from None
    keys = keys_in(doc, did.split("#", 1)[0])
    if not keys:
        raise InvalidArgs(f"{url}: the DID document lists no Ed25519 key")
    return keys


def public_keys(
    did: str, *, env: Mapping[str, str] | None = None, allow_http_loopback: bool = False
) -> list[bytes]:
    """The Ed25519 keys of a did:key (decoded) or a did:web (resolved); other methods refused."""
    did = did.strip()
    if did.startswith(_identity.DID_KEY_PREFIX):
        return [_identity.public_key_from_did(did)]
    if did.startswith(DID_WEB_PREFIX):
        return resolve_web(did, env=env, allow_http_loopback=allow_http_loopback)
    method = ":".join(did.split(":")[:2]) if did.startswith("did:") else did[:40]
    raise InvalidArgs(f"unknown DID method {method!r}; known: did:key, did:web")
