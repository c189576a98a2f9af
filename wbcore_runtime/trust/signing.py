"""Sign and verify a whole toolkit: the manifest's fields plus every file the agent reads.

The signed bytes are the *canonical form* of the toolkit folder, written down byte for
byte in ``docs/signing.md``::

    wbcore-toolkit-signature/1
    field <KEY> <value>              one per manifest keyword but SIGNATURE, sorted by KEY
    manifest <sha256> manifest.org   manifest bytes minus its SIGNATURE lines
    file <sha256> <path>             every other regular file, sorted by path bytes
    link <sha256> <path>             a symlink: sha256 of its target text

Every line ends in LF. ``.git/`` folders and the top-level ``.wb-signed`` are left out.
``#+SIGNATURE`` (and its mirrored ``:SIGNATURE:`` drawer line) hold the Ed25519
signature of those bytes, base64url without padding. ``.wb-signed`` keeps the form
as signed, so a failed verification can say *what* changed; it is never trusted
unless the signature verifies over it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from wbcore_runtime.trust import did as _did
from wbcore_runtime.trust import identity as _identity
from wbcore_runtime.toolkit import manifest as _manifest
from wbcore_runtime.guard import paths
from wbcore_runtime.contract.errors import InvalidArgs, ManifestError, WbError
from wbcore_runtime.store.artifacts import atomic_write

HEADER = "wbcore-toolkit-signature/1"
MANIFEST = "manifest.org"
SIDECAR = ".wb-signed"
EXCLUDED_DIRS = frozenset({".git"})
MAX_FILES = 10_000
MAX_BYTES = 512 << 20
SIG_LINE_RE = re.compile(rb"^[ \t]*(#\+SIGNATURE:|:SIGNATURE:)", re.IGNORECASE)
_KW_SIG_RE = re.compile(rb"^[ \t]*#\+SIGNATURE:", re.IGNORECASE)
ARTIFACT_SUFFIXES = (".wasm", ".cwasm", ".wat", ".tar.gz", ".tgz", ".zip")


class SigningError(InvalidArgs):
    """A toolkit cannot be put in canonical form (over a cap, an odd file, a bad manifest)."""


def strip_signature(manifest_bytes: bytes, path: Path | str = MANIFEST) -> bytes:
    """The manifest without its ``#+SIGNATURE:`` and ``:SIGNATURE:`` lines (at most one each).

    Lines are the parser's lines (:func:`wbcore_runtime.toolkit.manifest.lines`): a manifest with any
    other line break than LF or CRLF is refused here as it is by the parser, so the
    signed bytes and the parsed fields are cut at the very same places.
    """
    try:
        text = manifest_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = manifest_bytes[: exc.start].count(b"\n") + 1
        raise SigningError(f"{path}:{at}: not valid UTF-8") from None
    kept: list[str] = []
    kw = drawer = 0
    for line in _manifest.lines(text, path):
        raw = line.encode("utf-8")
        if SIG_LINE_RE.match(raw):
            if _KW_SIG_RE.match(raw):
                kw += 1
            else:
                drawer += 1
            continue
        kept.append(line)
    if kw > 1 or drawer > 1:
        raise SigningError("the manifest carries more than one #+SIGNATURE or :SIGNATURE: line")
    return "".join(kept).encode("utf-8")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path, budget: int) -> tuple[str, int]:
    """sha256 and size of a regular file, never following a link swapped in after lstat."""
    h = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            size += len(chunk)
            if size > budget:
                raise SigningError(f"{path}: the toolkit has more than {MAX_BYTES} bytes of files")
            h.update(chunk)
    return h.hexdigest(), size


def _entries(root: Path) -> list[tuple[str, str, str]]:
    """(kind, sha256, relpath) of every file to sign, sorted by relpath bytes."""
    found: list[tuple[str, str, str]] = []
    total = 0
    root_in = paths.Root.at(root)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if d not in EXCLUDED_DIRS]
        # A symlinked directory is listed in dirnames but not walked: record it as a link.
        for name in list(dirnames) + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if rel in (MANIFEST, SIDECAR):
                continue
            try:
                st = path.lstat()
            except OSError as exc:
                raise SigningError(f"{path}: {exc.strerror}") from None
            if "\n" in rel or "\r" in rel:
                raise SigningError(f"{rel!r}: file names with line breaks cannot be signed")
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                raise SigningError(f"{rel!r}: file names must be UTF-8") from None
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                # Absolute link text is refused even inside: the signed form must survive a move.
                if os.path.isabs(target) or not root_in.stays_inside(rel):
                    raise SigningError(f"{rel}: a link must stay inside the toolkit "
                                       f"(it points to {target!r})")
                found.append(("link", _sha(os.fsencode(target)), rel))
            elif stat.S_ISDIR(st.st_mode):
                continue
            elif stat.S_ISREG(st.st_mode):
                try:
                    digest, size = _file_sha(path, MAX_BYTES - total)
                except OSError as exc:
                    raise SigningError(f"{rel}: cannot read ({exc.strerror})") from None
                total += size
                found.append(("file", digest, rel))
            else:
                raise SigningError(f"{rel}: only regular files and symlinks can be signed")
            if len(found) > MAX_FILES:
                raise SigningError(f"{root}: more than {MAX_FILES} files")
    found.sort(key=lambda e: e[2].encode("utf-8"))
    return found


def canonical(toolkit_dir: Path, manifest_bytes: bytes | None = None) -> bytes:
    """The canonical form of a toolkit folder (see the module docstring)."""
    mpath = toolkit_dir / MANIFEST
    if manifest_bytes is None:
        manifest_bytes = paths.read_file(toolkit_dir, MANIFEST, _manifest.MAX_MANIFEST_BYTES)
    stripped = strip_signature(manifest_bytes, mpath)
    try:
        parsed = _manifest.parse(manifest_bytes.decode("utf-8"), mpath)
    except UnicodeDecodeError:
        raise SigningError(f"{mpath}: not valid UTF-8") from None
    lines = [HEADER]
    for key in sorted(parsed.keywords):
        if key == "SIGNATURE":
            continue
        lines.append(f"field {key} {parsed.keywords[key]}")
    lines.append(f"manifest {_sha(stripped)} {MANIFEST}")
    for kind, digest, rel in _entries(toolkit_dir):
        lines.append(f"{kind} {digest} {rel}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def content_digest(toolkit_dir: Path) -> str:
    """sha256 of the canonical form: the same content gives the same digest anywhere."""
    return _sha(canonical(toolkit_dir))


def encode_signature(sig: bytes) -> str:
    return base64.urlsafe_b64encode(sig).rstrip(b"=").decode("ascii")


def decode_signature(text: str) -> bytes:
    text = text.strip()
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError("not base64url")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None
    if len(raw) != 64:
        raise ValueError(f"decodes to {len(raw)} bytes; an Ed25519 signature is 64")
    return raw


# --- writing AUTHOR_DID and SIGNATURE into a manifest ----------------------------------

_KW_RE = re.compile(r"^[ \t]*#\+([A-Za-z][A-Za-z0-9_-]*):")


def _set_keyword(lines: list[str], node_idx: int, key: str, value: str, after: str | None = None) -> int:
    """Replace ``#+KEY:`` above the node, or insert it after ``#+AFTER:`` / the last keyword."""
    last_kw = -1
    anchor = -1
    for i in range(node_idx):
        m = _KW_RE.match(lines[i])
        if not m:
            continue
        last_kw = i
        name = m.group(1).upper()
        if name == key:
            lines[i] = f"#+{key}: {value}\n"
            return 0
        if after and name == after:
            anchor = i
    at = (anchor if anchor >= 0 else last_kw) + 1
    lines.insert(at, f"#+{key}: {value}\n")
    return 1


def _set_drawer(lines: list[str], node_idx: int, key: str, value: str, after: str | None = None) -> None:
    start = end = -1
    for i in range(node_idx + 1, min(len(lines), node_idx + 200)):
        s = lines[i].strip().upper()
        if s == ":PROPERTIES:" and start < 0:
            start = i
        elif s == ":END:" and start >= 0:
            end = i
            break
        elif start < 0 and s and not s.startswith("#"):
            break
    if start < 0:
        lines[node_idx + 1 : node_idx + 1] = ["  :PROPERTIES:\n", f"  :{key}: {value}\n", "  :END:\n"]
        return
    anchor = -1
    for i in range(start + 1, end):
        m = _manifest.PROPERTY_RE.match(lines[i])
        if not m:
            continue
        name = m.group(1).upper()
        if name == key:
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines[i] = f"{indent}:{key}: {value}\n"
            return
        if after and name == after:
            anchor = i
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    lines.insert(anchor + 1 if anchor >= 0 else end, f"{indent}:{key}: {value}\n")


def _with_fields(text: str, node_line: int, fields: list[tuple[str, str, str | None]]) -> str:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    node_idx = node_line - 1
    for key, value, after in fields:
        node_idx += _set_keyword(lines, node_idx, key, value, after)
        _set_drawer(lines, node_idx, key, value, after)
    return "".join(lines)


@dataclass(frozen=True, slots=True)
class Signed:
    author_did: str
    signature: str
    digest: str


def sign(toolkit_dir: Path, ident: _identity.Identity, *, author_did: str | None = None) -> Signed:
    """Write ``#+AUTHOR_DID`` and ``#+SIGNATURE`` (keyword and drawer) over the whole folder.

    ``author_did`` defaults to the identity's did:key; a did:web must publish this key.
    """
    mpath = toolkit_dir / MANIFEST
    # Signed manifests end their lines in LF: verify accepts only what this function writes.
    text = _manifest.normalized(_manifest.read_text(mpath), mpath)
    parsed = _manifest.parse(text, mpath)
    if parsed.format != "manifest":
        raise InvalidArgs(f"{mpath}: only seed-000 manifests (#+TOOLKIT …) can be signed; "
                          f"this one is {parsed.format}")
    if parsed.trust != "third-party":
        raise InvalidArgs(
            f"{parsed.id} is first-party: signing is for third-party toolkits "
            "(set #+TRUST: third-party first)"
        )
    did = author_did or ident.did
    if did.startswith(_identity.DID_KEY_PREFIX) and _identity.public_key_from_did(did) != ident.public_key:
        raise InvalidArgs(f"{did} is not the did:key of the signing key ({ident.did})")
    if not did.startswith((_identity.DID_KEY_PREFIX, _did.DID_WEB_PREFIX)):
        raise InvalidArgs(f"AUTHOR_DID {did[:60]!r} must be a did:key or a did:web")
    unsigned = strip_signature(text.encode("utf-8")).decode("utf-8")
    unsigned = _with_fields(unsigned, _manifest.parse(unsigned, mpath).node_line,
                            [("AUTHOR_DID", did, "TRUST")])
    form = canonical(toolkit_dir, unsigned.encode("utf-8"))
    sig = encode_signature(ident.sign(form))
    final = _with_fields(unsigned, _manifest.parse(unsigned, mpath).node_line,
                         [("SIGNATURE", sig, "AUTHOR_DID")])
    # Stripping the signature gives back the unsigned bytes: the invariant that verification relies on.
    if strip_signature(final.encode("utf-8")) != unsigned.encode("utf-8"):
        raise SigningError(f"{mpath}: could not place #+SIGNATURE without changing the signed bytes")

    atomic_write(toolkit_dir / SIDECAR, form, mode=None)
    atomic_write(mpath, final.encode("utf-8"), mode=None)
    return Signed(did, sig, _sha(form))


# --- verification ---------------------------------------------------------------------

#: Result codes, each its own ✗ reason.
OK, MISSING, MALFORMED, KEY_TYPE, UNRESOLVED, WRONG_KEY, TAMPERED, INVALID = (
    "ok", "missing", "malformed", "key-type", "unresolved", "wrong-key", "tampered", "invalid",
)
#: Each ✗ code in words, for a verify line ("signature wrong key: ...").
LABELS = {MISSING: "missing", MALFORMED: "malformed", KEY_TYPE: "wrong key type", UNRESOLVED: "unresolved",
          WRONG_KEY: "wrong key", TAMPERED: "tampered", INVALID: "invalid"}


@dataclass(frozen=True)
class Verdict:
    code: str
    message: str
    signer: str | None = None
    digest: str | None = None
    changes: tuple[str, ...] = field(default=())
    #: The canonical form the signature was checked over (an ``ok`` verdict): what each file hashed to.
    form: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        return self.code == OK


def _describe(rel: str) -> str:
    if rel == MANIFEST:
        return "manifest"
    if rel.startswith("skills/"):
        return "skill"
    if rel.endswith(ARTIFACT_SUFFIXES):
        return "artifact"
    return "file"


def _index(form: bytes) -> tuple[dict[str, str], dict[str, str]]:
    fields: dict[str, str] = {}
    files: dict[str, str] = {}
    for line in form.decode("utf-8", "replace").splitlines()[1:]:
        kind, _, rest = line.partition(" ")
        if kind == "field":
            key, _, value = rest.partition(" ")
            fields[key] = value
        elif kind in ("manifest", "file", "link"):
            digest, _, rel = rest.partition(" ")
            files[rel] = f"{kind}:{digest}"
    return fields, files


def file_digest(form: bytes, rel: str) -> str | None:
    """The sha256 a canonical form records for the regular file ``rel``, or ``None``."""
    kind, _, digest = _index(form)[1].get(rel, "").partition(":")
    return digest if kind == "file" else None


def diff(signed_form: bytes, current_form: bytes) -> list[str]:
    """What changed between two canonical forms, one phrase per change."""
    f0, p0 = _index(signed_form)
    f1, p1 = _index(current_form)
    out: list[str] = []
    for key in sorted(f0.keys() | f1.keys()):
        if f0.get(key) != f1.get(key):
            out.append(f"manifest field #+{key} changed ({f0.get(key)!r} → {f1.get(key)!r})")
    for rel in sorted(p0.keys() | p1.keys()):
        what = _describe(rel)
        if rel not in p1:
            out.append(f"{what} {rel} removed")
        elif rel not in p0:
            out.append(f"{what} {rel} added")
        elif p0[rel] != p1[rel]:
            out.append(f"{what} {rel} changed")
    return out


def _placed_as_signed(raw: bytes, m: _manifest.Manifest, sig_text: str) -> str | None:
    """Why the signature lines are not exactly what :func:`sign` writes (None when they are).

    The signature lines are the only bytes of the manifest the signature does not cover;
    holding them to the one shape ``sign`` gives them (place, case, spacing, line ends, the
    drawer mirror present) leaves no byte of a signed manifest that can change unnoticed.
    """
    try:
        unsigned = strip_signature(raw, m.path).decode("utf-8")
    except (SigningError, ManifestError) as exc:
        return str(exc)
    text = raw.decode("utf-8")
    above = sum(1 for ln in _manifest.lines(text, m.path)[: m.node_line - 1]
                if SIG_LINE_RE.match(ln.encode("utf-8")))
    expected = _with_fields(unsigned, m.node_line - above, [("SIGNATURE", sig_text, "AUTHOR_DID")])
    if expected != text:
        return ("the #+SIGNATURE and :SIGNATURE: lines are not exactly as `wbx toolkit sign` writes them "
                "(LF line ends, right after #+AUTHOR_DID and :AUTHOR_DID:); "
                f"re-sign with: wbx toolkit sign {m.id}")
    return None


def verify(
    toolkit_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    allow_http_loopback: bool = False,
    resolve_web: bool = True,
) -> Verdict:
    """Check ``#+AUTHOR_DID`` / ``#+SIGNATURE`` against the folder as it is now."""
    mpath = toolkit_dir / MANIFEST
    try:
        raw = paths.read_file(toolkit_dir, MANIFEST, _manifest.MAX_MANIFEST_BYTES)
        m = _manifest.parse(raw.decode("utf-8"), mpath)
    except paths.Refused as exc:
        return Verdict(MALFORMED, exc.message)
    except (OSError, UnicodeDecodeError, WbError) as exc:
        return Verdict(MALFORMED, f"cannot read the manifest: {exc}")
    missing = [k for k, v in (("AUTHOR_DID", m.author_did), ("SIGNATURE", m.signature)) if not v]
    if missing:
        return Verdict(MISSING, f"lacks #+{' and #+'.join(missing)} (sign it: wbx toolkit sign {m.id})")
    did = m.author_did or ""
    sig_text = m.signature or ""
    for key, value in (("AUTHOR_DID", did), ("SIGNATURE", sig_text)):
        mirrored = m.drawer.get(key)
        if mirrored is not None and mirrored != value:
            return Verdict(MALFORMED, f"drawer :{key}: differs from #+{key}; they must match", did)
    try:
        sig = decode_signature(sig_text)
    except ValueError as exc:
        return Verdict(MALFORMED, f"#+SIGNATURE is malformed: {exc}", did)
    placed = _placed_as_signed(raw, m, sig_text)
    if placed is not None:
        return Verdict(MALFORMED, placed, did)
    try:
        if did.startswith(_did.DID_WEB_PREFIX) and not resolve_web:
            return Verdict(UNRESOLVED, f"{did} not resolved (offline check)", did)
        keys = _did.public_keys(did, env=env, allow_http_loopback=allow_http_loopback)
    except _identity.KeyTypeError as exc:
        return Verdict(KEY_TYPE, f"#+AUTHOR_DID: {exc.message}", did)
    except InvalidArgs as exc:
        return Verdict(MALFORMED, f"#+AUTHOR_DID: {exc.message}", did)
    except WbError as exc:
        return Verdict(UNRESOLVED, f"#+AUTHOR_DID {did} cannot be resolved: {exc.message}", did)
    try:
        form = canonical(toolkit_dir, raw)
    except SigningError as exc:
        return Verdict(MALFORMED, f"cannot put the toolkit in canonical form: {exc.message}", did)
    digest = _sha(form)
    if any(_identity.verify(k, form, sig) for k in keys):
        return Verdict(OK, f"signature valid, signed by {did}", did, digest, form=form)
    try:
        signed_form = paths.read_file(toolkit_dir, SIDECAR, MAX_BYTES // 64)
    except (OSError, WbError):  # the sidecar only explains a failure; without it, say less
        signed_form = b""
    if signed_form and any(_identity.verify(k, signed_form, sig) for k in keys):
        changes = tuple(diff(signed_form, form)) or ("the canonical form changed",)
        shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more" if len(changes) > 6 else "")
        return Verdict(TAMPERED, f"content changed since it was signed: {shown}", did, digest, changes)
    if signed_form == form:
        return Verdict(WRONG_KEY, f"signature was not made by the key of {did} (the content is as signed)",
                       did, digest)
    if signed_form:
        found = diff(signed_form, form)
        if found and all(c.startswith("manifest") for c in found) and any("#+AUTHOR_DID" in c for c in found):
            return Verdict(WRONG_KEY,
                           f"signature was not made by {did} (#+AUTHOR_DID was changed after signing)",
                           did, digest)
    return Verdict(
        INVALID,
        f"signature does not verify under {did}: the content changed since signing, or another key made it",
        did, digest,
    )
