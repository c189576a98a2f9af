"""TRUST postures (seed 000), signatures, ``#+SHA256`` integrity and consent, as verify lines.

``first-party`` runs under its profile's defaults. ``third-party`` must carry a valid
``#+AUTHOR_DID`` / ``#+SIGNATURE`` over the whole folder (``wbcore_runtime.trust.signing``), and the
deployer grants its caps explicitly (``wbcore_runtime.trust.consent``).

Integrity: when ``#+SHA256`` is set, the pinned bytes (a shipped ``wasm:``/``archive:``
file, or the registered artifact) must hash to it before anything runs or registers.
A mismatch, or a third-party signature that does not verify, makes the toolkit
*unavailable*: :func:`unavailable_reason` says why (``list``, ``verify``), and
:func:`check_available` / :func:`check_artifact` raise before a run or a registration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from wbcore_runtime.store.artifacts import IntegrityError as _StoreIntegrityError
from wbcore_runtime.store.digest import sha256
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.errors import ErrorKind, NotFound
from wbcore_runtime.guard import paths
from wbcore_runtime.store.artifacts import atomic_write

if TYPE_CHECKING:
    from wbcore_runtime.toolkit import skills as _skills
    from wbcore_runtime.trust import signing
    from wbcore_runtime.toolkit.manifest import Manifest
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.toolkit.loaded import Toolkit
else:  # imported on first use: signing brings cryptography (~50 ms), which wbx start-up never needs
    signing = lazy.module("wbcore_runtime.trust.signing")
    _skills = lazy.module("wbcore_runtime.toolkit.skills")  # its records' dataclasses: not on `wbx run`


class IntegrityError(_StoreIntegrityError):
    """Bytes do not match their pin, or a signature fails: the toolkit cannot execute (exit 126).

    A subclass of the artifact store's ``IntegrityError``, so one ``except`` catches both.
    """

    kind = ErrorKind.CAPABILITY_DENIED


def sha256_file(path: Path, *, limit: int = 1 << 30) -> str:
    with path.open("rb") as fh:
        return _sha256_stream(fh, path, limit)


def _sha256_stream(fh: BinaryIO, shown: Path, limit: int = 1 << 30) -> str:
    h, total = None, 0
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        h = h or sha256(size=len(chunk))  # sized by the first chunk: a big file gets OpenSSL's
        total += len(chunk)
        if total > limit:
            raise IntegrityError(f"{shown}: over the {limit}-byte cap for hashing")
        h.update(chunk)
    return (h or sha256()).hexdigest()


def check_artifact(manifest: Manifest, path: Path | str) -> None:
    """Raise :class:`IntegrityError` unless ``path`` hashes to ``#+SHA256`` (no pin: no check).

    Call it with the exact bytes about to be registered or run, before either.
    """
    if not manifest.sha256:
        return
    path = Path(path)
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise IntegrityError(f"{manifest.id}: cannot hash {path}: {exc.strerror}") from None
    _compare(manifest, path, actual)


def _compare(manifest: Manifest, path: Path, actual: str) -> None:
    if actual != manifest.sha256:
        raise IntegrityError(
            f"{manifest.id}: {path.name} has sha256 {actual[:16]}… "
            f"but #+SHA256 pins {(manifest.sha256 or '')[:16]}…"
        )


def check_digest(manifest: Manifest, digest: str, what: str = "artifact") -> None:
    """Like :func:`check_artifact` for bytes already hashed (a content-addressed store)."""
    if manifest.sha256 and digest != manifest.sha256:
        raise IntegrityError(f"{manifest.id}: {what} {digest[:16]}… "
                             f"does not match #+SHA256 {manifest.sha256[:16]}…")


def shipped_relative(manifest: Manifest) -> str | None:
    src = manifest.build_src or ""
    for prefix in ("wasm:", "archive:"):
        if src.startswith(prefix):
            rest = src[len(prefix):]
            return None if "://" in rest or not rest else rest
    return None


def shipped_artifact(manifest: Manifest) -> Path | None:
    """The local file ``#+SHA256`` pins, when ``#+BUILD_SRC`` is ``wasm:``/``archive:`` + a path:
    its checked, symlink-free path (:mod:`wbcore_runtime.guard.paths`), ``None`` when there is none,
    and :class:`~wbcore_runtime.guard.paths.Refused` when it is not a single-linked regular file inside
    the toolkit."""
    rel = shipped_relative(manifest)
    if rel is None:
        return None
    try:
        return paths.inside(manifest.dir, rel)
    except NotFound:
        return None


def _check_shipped(manifest: Manifest) -> bool:
    """Hash the shipped file through containment; True when there is one (and it matched)."""
    rel = shipped_relative(manifest)
    if rel is None or not manifest.sha256:
        return False
    try:
        with paths.open_file(manifest.dir, rel) as fh:
            actual = _sha256_stream(fh, manifest.dir / rel)
    except NotFound:
        return False
    except OSError as exc:
        raise IntegrityError(f"{manifest.id}: cannot hash {manifest.dir / rel}: {exc.strerror}") from None
    _compare(manifest, manifest.dir / rel, actual)
    return True


def integrity_reason(toolkit: Toolkit, runtime: RuntimeServices) -> str | None:
    """Why ``#+SHA256`` fails for this toolkit, or ``None`` (also when nothing is pinned)."""
    m = toolkit.manifest
    if not m.sha256:
        return None
    try:
        _check_shipped(m)
    except (IntegrityError, paths.Refused) as exc:
        return f"integrity: {exc.message}"
    if (m.build_src or "").startswith("archive:"):
        return None  # the pin is the archive's; what it unpacks to is registered under its own digest
    names = {n for n in (m.cli_bin, m.id) if n}
    try:
        entries = [e for e in runtime.registry.entries()
                   if e.toolkit == m.id or (e.toolkit is None and e.name in names)]
    except Exception:  # an unreadable registry is reported by whoever owns it, not as an integrity failure
        entries = []
    for e in entries:
        if e.sha256 != m.sha256:
            return (f"integrity: registered {e.kind} {e.name!r} is {e.sha256[:16]}… "
                    f"but #+SHA256 pins {m.sha256[:16]}…")
    return None


def folder_state(folder: Path) -> tuple[tuple[str, int, int, int, int], ...]:
    """A cheap fingerprint of a folder: every entry's path, inode, size, mtime and ctime.

    ctime cannot be set back by a writer (``utime`` itself moves it), so a rewrite that
    restores size and mtime still changes the fingerprint.
    """
    out: list[tuple[str, int, int, int, int]] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for name in dirnames + sorted(filenames):
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out.append((p, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def refusal(verdict: signing.Verdict, *, offline: bool = False) -> str | None:
    """THE trust verdict: why a signature verdict refuses the toolkit, or ``None``.

    One rule for an unresolved ``did:web`` (docs/security.md): wherever the signature decides
    (run, build, grant, install, publish, caps), a signer that could not be resolved is a
    failure: fail closed. Only an ``offline`` look (a listing that resolves nothing: ``wbx
    toolkit list``, an agent's prompt) leaves it pending, never verified: the first call
    resolves it and refuses it if it still cannot be."""
    if verdict.ok:
        return None
    if offline and verdict.code == signing.UNRESOLVED:
        return None
    return f"signature: {verdict.message}"


def folder_verdict(folder: Path, env: Mapping[str, str] | None) -> signing.Verdict:
    """The signature verdict of a folder that is not (yet) a discovered toolkit (install,
    grant, publish): did:web resolved. Judge it with :func:`refusal`."""
    return signing.verify(folder, env=env)


def signature_verdict(toolkit: Toolkit, runtime: RuntimeServices, *,
                      resolve_web: bool = True) -> signing.Verdict:
    """The signature verdict, remembered per runtime until any file of the folder changes."""
    import time

    cache = runtime.__dict__.setdefault("_wb_signature_verdicts", {})
    key = (str(toolkit.dir), resolve_web)
    state = folder_state(toolkit.dir)
    hit = cache.get(key)
    # A did:web verdict rests on a document its owner may change (a rotated or withdrawn
    # key): a long-lived runtime (engine, MCP server) asks again after DID_WEB_TTL_S.
    if hit is not None and hit[0] == state and time.monotonic() < hit[2]:
        return hit[1]
    verdict = signing.verify(toolkit.dir, env=runtime.env, resolve_web=resolve_web)
    if verdict.code != signing.UNRESOLVED:  # a network failure is not remembered
        web = (verdict.signer or "").startswith("did:web:")
        cache[key] = (state, verdict, time.monotonic() + DID_WEB_TTL_S if web else float("inf"))
    return verdict


#: How long a runtime remembers a verdict that rests on a did:web document.
DID_WEB_TTL_S = 300.0


#: A folder with a file changed this recently may change again within its timestamp tick.
RACY_SECONDS = 2.0


def _digest_file(runtime: RuntimeServices, folder: Path) -> Path:
    return runtime.home / "cache" / "digests" / f"{sha256(str(folder).encode()).hexdigest()[:24]}.json"


def _state_key(state: tuple[tuple[str, int, int, int, int], ...]) -> tuple[str, bool]:
    """(sha256 of the folder fingerprint, whether a file in it is racy)."""
    import time

    newest = max((max(e[3], e[4]) for e in state), default=0)
    return sha256(repr(state).encode()).hexdigest(), time.time_ns() - newest < RACY_SECONDS * 1e9


def content_digest(toolkit: Toolkit, runtime: RuntimeServices) -> str:
    """The toolkit folder's content digest (``signing.content_digest``: manifest fields,
    manifest bytes but the signature, every file and link), remembered until any file of
    the folder changes: per runtime, and across processes in ``$WB_HOME/cache/digests``
    under the folder's fingerprint (:func:`folder_state`: every entry's inode, size, mtime
    and ctime; a folder changed in the last :data:`RACY_SECONDS` is not kept), so a
    ``wbx run`` checks its toolkit's provenance without hashing it again. The canonical
    form is kept under ``$WB_HOME/build/provenance/`` so a later mismatch can name the
    changed files."""
    import json

    cache = runtime.__dict__.setdefault("_wb_content_digests", {})
    key = str(toolkit.dir)
    state = folder_state(toolkit.dir)
    hit = cache.get(key)
    if hit is not None and hit[0] == state:
        return hit[1]
    fingerprint, racy = _state_key(state)
    stored = _digest_file(runtime, toolkit.dir)
    try:
        data = json.loads(stored.read_bytes())
        if (data.get("dir") == key and data.get("state") == fingerprint
                and isinstance(data.get("digest"), str)):
            cache[key] = (state, data["digest"], None)
            return data["digest"]
    except (OSError, ValueError, AttributeError):
        pass
    form = _canonical(toolkit)
    digest = sha256(form).hexdigest()
    cache[key] = (state, digest, form)
    if not racy:
        try:
            atomic_write(stored, json.dumps({"dir": key, "state": fingerprint, "digest": digest}).encode(),
                         tmp_dir=stored.parent.parent)
        except OSError:  # the cache is an optimisation: a read-only home still checks
            pass
    return digest


def _canonical(toolkit: Toolkit) -> bytes:
    try:
        return signing.canonical(toolkit.dir)
    except OSError as exc:
        raise IntegrityError(f"{toolkit.id}: cannot read {exc.filename or toolkit.dir}: "
                             f"{exc.strerror}") from None


def _current_form(toolkit: Toolkit, runtime: RuntimeServices) -> tuple[str, bytes]:
    """The current digest and the canonical form behind it (computed if only the digest was cached)."""
    digest = content_digest(toolkit, runtime)
    entry = runtime.__dict__["_wb_content_digests"][str(toolkit.dir)]
    form = entry[2]
    if form is None:
        form = _canonical(toolkit)
        if sha256(form).hexdigest() != digest:  # changed between the two reads: what was read now
            digest = sha256(form).hexdigest()
            entry = (folder_state(toolkit.dir), digest, form)
        runtime.__dict__["_wb_content_digests"][str(toolkit.dir)] = (entry[0], digest, form)
    return digest, form


def remember_form(toolkit: Toolkit, runtime: RuntimeServices) -> None:
    """Keep the canonical form behind the current content digest (a build records it)."""
    digest, form = _current_form(toolkit, runtime)
    path = runtime.home / "build" / "provenance" / f"{digest}.txt"
    if not path.exists():
        atomic_write(path, form)


def changed_files(toolkit: Toolkit, runtime: RuntimeServices, built_digest: str) -> list[str]:
    """What changed in the folder since the build that recorded ``built_digest``."""
    path = runtime.home / "build" / "provenance" / f"{built_digest}.txt"
    try:
        old = path.read_bytes()
        _digest, new = _current_form(toolkit, runtime)
    except (OSError, KeyError):
        return []
    return signing.diff(old, new)


def source_reason(toolkit: Toolkit, runtime: RuntimeServices) -> str | None:
    """Why the toolkit's own files may not be used (built, served, injected), or ``None``:
    a third-party signature that does not verify, or a shipped artifact off its pin."""
    m = toolkit.manifest
    local = shipped_artifact(m)
    if m.sha256 and local is not None and local.is_file():
        try:
            check_artifact(m, local)
        except IntegrityError as exc:
            return f"integrity: {exc.message}"
    if m.trust == "third-party":
        return refusal(signature_verdict(toolkit, runtime, resolve_web=True))
    return None


def signature_ok(toolkit: Toolkit, runtime: RuntimeServices) -> bool:
    """True for a third-party toolkit whose signature verifies now (did:web resolved)."""
    return refusal(signature_verdict(toolkit, runtime)) is None


def unavailable_reason(toolkit: Toolkit, runtime: RuntimeServices, *,
                       resolve_web: bool = False) -> str | None:
    """Why the toolkit may not run, or ``None``. Offline by default (did:web not resolved)."""
    reason = integrity_reason(toolkit, runtime)
    if reason:
        return reason
    if toolkit.manifest.trust == "third-party":
        return refusal(signature_verdict(toolkit, runtime, resolve_web=resolve_web), offline=not resolve_web)
    return None


def check_available(toolkit: Toolkit, runtime: RuntimeServices) -> None:
    """Raise :class:`IntegrityError` with the reason when the toolkit may not run (did:web resolved)."""
    reason = unavailable_reason(toolkit, runtime, resolve_web=True)
    if reason:
        raise IntegrityError(f"{toolkit.id} is unavailable: {reason}")


def skill_text(toolkit: Toolkit, runtime: RuntimeServices, slug: str) -> str:
    """THE read of a skill's text for a model (MCP ``resources/read``, the agent's ``wb skill``).

    The toolkit must be available (as :func:`check_available`, did:web resolved). For a
    third-party toolkit the skill is read once, after the one verdict, and those bytes are
    hashed against the digest that verdict's signature covers: a file swapped after the
    verdict is refused, never served. Call it instead of checking first and reading after.
    """
    signed = signature_verdict(toolkit, runtime) if toolkit.manifest.trust == "third-party" else None
    reason = integrity_reason(toolkit, runtime) or (refusal(signed) if signed else None)
    if reason:
        raise IntegrityError(f"toolkit {toolkit.id} is unavailable: {reason}")
    folder = toolkit.folder()
    raw, rel = _skills.read_skill_bytes(folder, slug)
    if signed is not None and signing.file_digest(signed.form, rel) != sha256(raw).hexdigest():
        raise IntegrityError(
            f"{toolkit.id}: {toolkit.dir / rel} changed since it was verified; it was not served. "
            f"Find who writes to {toolkit.dir}, then check it: wbx toolkit verify {toolkit.id}")
    return _skills.skill_text(raw, folder, slug)
