"""``workbooks-c2pa``: an Ed25519-signed manifest embedded in a published HTML page.

``sign`` inserts exactly one element (``docs/bundles.md`` gives the bytes)::

    <script type="application/workbooks-c2pa+json" id="wb-c2pa-manifest">JSON</script>LF

before the first ``</head>`` (else ``</body>``, else at the end). JSON is the manifest in
canonical JSON (its signature included) with every ``<`` written ``\\u003c``. The page's
hash is sha256 of the page bytes with that element (through its LF) cut out, so removing
the element gives back the page as it was before signing. The manifest holds the page hash,
the sha256 and size of each asset (local files the page references by ``src``/``href``, or
named with ``--asset``), the signer (did:key or did:web) and the signing time.

``verify`` answers two separate questions: ``asset_integrity`` (the page and every asset
match their hashes: a pure read, no key) and ``signature`` (the manifest verifies under the
signer's key); ``valid`` is both.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import html
import os
import posixpath
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from wbcore_publish import canonical
from wbcore_publish.workspace import read_regular
from wbcore_runtime.trust import identity as _identity
from wbcore_runtime.guard import paths
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.contract.errors import InvalidArgs, WbError

FORMAT = "workbooks-c2pa/1"
MEDIA_TYPE = "application/workbooks-c2pa+json"
ELEMENT_ID = "wb-c2pa-manifest"
OPEN = f'<script type="{MEDIA_TYPE}" id="{ELEMENT_ID}">'.encode("ascii")
CLOSE = b"</script>\n"
MAX_PAGE = 64 << 20
MAX_ASSET = 64 << 20
MAX_ASSETS = 1000
MAX_MANIFEST = 1 << 20
# Any <script …id=wb-c2pa-manifest…>, however written: more than one is refused, and the one
# there is must be exactly what sign writes.
_ANY_ELEMENT = re.compile(rb"<script\b[^>]*\bid\s*=\s*[\"']?" + ELEMENT_ID.encode() + rb"\b", re.IGNORECASE)
_REF = re.compile(rb"""\b(?:src|href)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>"']+))""", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True, slots=True)
class Split:
    """A page cut at its manifest element: ``body`` is the page without it."""

    body: bytes
    manifest_text: bytes | None
    at: int


def split(page: bytes, where: str) -> Split:
    """Find the one manifest element; refuse two, or one not written exactly as sign writes it."""
    found = list(_ANY_ELEMENT.finditer(page))
    if not found:
        return Split(page, None, -1)
    if len(found) > 1:
        raise InvalidArgs(f"{where}: {len(found)} {ELEMENT_ID} elements; a signed page has exactly one")
    start = found[0].start()
    if not page.startswith(OPEN, start):
        raise InvalidArgs(f"{where}: the {ELEMENT_ID} element is not written as `wbx publish sign` writes it "
                          f"({OPEN.decode()}…</script>); re-sign the page")
    end = page.find(b"</script>", start)
    if end < 0 or not page.startswith(CLOSE, end):
        raise InvalidArgs(f"{where}: the {ELEMENT_ID} element is not closed by </script> and a line feed")
    text = page[start + len(OPEN):end]
    if len(text) > MAX_MANIFEST:
        raise InvalidArgs(f"{where}: the embedded manifest is larger than {MAX_MANIFEST} bytes")
    return Split(page[:start] + page[end + len(CLOSE):], text, start)


def embed(obj: Mapping[str, Any]) -> bytes:
    return OPEN + canonical.serialize(obj).replace(b"<", b"\\u003c") + CLOSE


def _insert_at(body: bytes) -> int:
    low = body.lower()
    for tag in (b"</head>", b"</body>"):
        i = low.find(tag)
        if i >= 0:
            return i
    return len(body)


def _local_ref(raw: bytes) -> str | None:
    """A reference's path inside the page's folder, or None when it is not a local file."""
    try:
        value = html.unescape(raw.decode("utf-8")).strip()
    except UnicodeDecodeError:
        return None
    if not value or value.startswith(("#", "/", "\\")) or _SCHEME.match(value):
        return None
    value = unquote(value.split("#", 1)[0].split("?", 1)[0])
    norm = posixpath.normpath(value)
    if not value or norm in (".", "") or norm == ".." or norm.startswith("../") or "\x00" in norm:
        return None
    return norm


def discover(body: bytes) -> list[str]:
    """Local files the page references through ``src``/``href`` (in page order, once each)."""
    seen: dict[str, None] = {}
    for m in _REF.finditer(body):
        ref = _local_ref(next(g for g in m.groups() if g is not None))
        if ref is not None:
            seen.setdefault(ref, None)
    return list(seen)


def _asset(root: Path, rel: str, where: str) -> bytes:
    norm = posixpath.normpath(rel)
    if rel.startswith("/") or norm == ".." or norm.startswith("../"):
        raise InvalidArgs(f"{where}: asset {rel!r} is outside the page's folder")
    # the one containment rule (refuses a link out, a FIFO, a second hard link), then the read
    path = paths.inside(root, norm, label="the page's folder")
    return read_regular(path, MAX_ASSET, where)


@dataclass(frozen=True, slots=True)
class Signed:
    page: Path
    signer: str
    signed_at: str
    assets: tuple[str, ...]
    skipped: tuple[str, ...]  # references seen but not covered (missing, not a file, outside)


def sign(page: Path, ident: _identity.Identity, *, assets: Sequence[str] = (),
         did_web_host: str | None = None, env: Mapping[str, str] | None = None) -> Signed:
    """Embed a signed manifest in ``page`` (written atomically); an earlier one is replaced."""
    env = os.environ if env is None else env
    where = str(page)
    parts = split(read_regular(page, MAX_PAGE, "publish"), where)
    body = parts.body
    root = page.parent
    covered: dict[str, dict[str, Any]] = {}
    skipped: list[str] = []
    for rel in discover(body):
        try:
            data = _asset(root, rel, where)
        except (WbError, OSError):  # a reference to nothing local: reported, not covered
            skipped.append(rel)
            continue
        covered[rel] = {"path": rel, "sha256": _sha(data), "size": len(data)}
    for rel in assets:  # named assets must exist: an error, not a skip
        data = _asset(root, rel, where)
        covered[posixpath.normpath(rel)] = {"path": posixpath.normpath(rel), "sha256": _sha(data),
                                            "size": len(data)}
    if len(covered) > MAX_ASSETS:
        raise InvalidArgs(f"{where}: more than {MAX_ASSETS} assets")
    epoch = env.get("SOURCE_DATE_EPOCH")
    now = int(epoch) if epoch and epoch.isdigit() else int(time.time())
    manifest = canonical.sign({
        "format": FORMAT,
        "page": {"sha256": _sha(body), "size": len(body), "at": _insert_at(body)},
        "assets": sorted(covered.values(), key=lambda a: a["path"].encode("utf-8")),
        "signer": canonical.signer_did(ident, did_web_host),
        "signed_at": _dt.datetime.fromtimestamp(now, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }, ident)
    at = _insert_at(body)
    atomic_write(page, body[:at] + embed(manifest) + body[at:], mode=stat.S_IMODE(page.stat().st_mode))
    return Signed(page, manifest["signer"], manifest["signed_at"],
                  tuple(a["path"] for a in manifest["assets"]), tuple(skipped))


@dataclass(frozen=True)
class Report:
    signature: bool
    asset_integrity: bool
    signer: str | None = None
    signed_at: str | None = None
    signature_reason: str = ""
    changes: tuple[str, ...] = field(default=())

    @property
    def valid(self) -> bool:
        return self.signature and self.asset_integrity

    def as_json(self) -> dict[str, Any]:
        return {"signature": self.signature, "asset_integrity": self.asset_integrity, "valid": self.valid,
                "signer": self.signer, "signed_at": self.signed_at, "signature_reason": self.signature_reason,
                "changes": list(self.changes)}


def integrity(page_dir: Path, parts: Split, manifest: Mapping[str, Any], where: str) -> list[str]:
    """Every difference between the page and its assets as they are and as the manifest lists them."""
    changes: list[str] = []
    signed_page = manifest.get("page")
    if not isinstance(signed_page, dict) or signed_page.get("sha256") != _sha(parts.body):
        changes.append("the page changed (its sha256 without the manifest element differs)")
    elif signed_page.get("at") != parts.at:
        # The element is inert, but moved (into an attribute, say) it would change what renders.
        changes.append(f"the manifest element moved (at byte {parts.at}, signed at {signed_page.get('at')})")
    assets = manifest.get("assets")
    if not isinstance(assets, list) or len(assets) > MAX_ASSETS:
        return changes + ["the manifest's asset list is malformed"]
    for a in assets:
        if (not isinstance(a, dict) or not isinstance(a.get("path"), str)
                or not isinstance(a.get("sha256"), str)):
            changes.append(f"malformed asset entry {str(a)[:80]}")
            continue
        try:
            data = _asset(page_dir, a["path"], where)
        except (WbError, OSError) as exc:  # missing, a link, outside: each is a failed asset, said plainly
            changes.append(f"asset {a['path']} unreadable ({getattr(exc, 'message', exc)})")
            continue
        if _sha(data) != a["sha256"]:
            changes.append(f"asset {a['path']} changed (sha256 {_sha(data)[:12]}…, signed "
                           f"{a['sha256'][:12]}…)")
    return changes


def verify(page: Path, *, env: Mapping[str, str] | None = None, allow_http_loopback: bool = False,
           resolve_web: bool = True) -> Report:
    """Check a signed page: asset integrity (no key) and the signature (the signer's key)."""
    where = str(page)
    try:
        parts = split(read_regular(page, MAX_PAGE, "publish"), where)
        if parts.manifest_text is None:
            return Report(False, False,
                          signature_reason=f"the page carries no {ELEMENT_ID} element (unsigned)",
                          changes=("no manifest",))
        manifest = canonical.parse(parts.manifest_text, f"{where}#{ELEMENT_ID}")
        if manifest.get("format") != FORMAT:
            raise InvalidArgs(f"{where}: the manifest's format is {manifest.get('format')!r}, expected "
                              f"{FORMAT!r}")
        if embed(manifest) != OPEN + parts.manifest_text + CLOSE:
            raise InvalidArgs(f"{where}: the embedded manifest is not in canonical form; re-sign the page")
    except InvalidArgs as exc:
        return Report(False, False, signature_reason=exc.message, changes=(exc.message,))
    changes = integrity(page.parent, parts, manifest, where)
    sig = canonical.check_signature(manifest, env=env, allow_http_loopback=allow_http_loopback,
                                    resolve_web=resolve_web)
    signed_at = manifest.get("signed_at") if isinstance(manifest.get("signed_at"), str) else None
    return Report(sig.ok, not changes, sig.signer, signed_at, sig.reason, tuple(changes))
