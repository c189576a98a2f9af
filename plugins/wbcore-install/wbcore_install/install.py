"""``wbx toolkit install``: bring toolkits into the user root, verified, recorded in ``wbx.lock``.

Sources: a folder; ``git+file://…[@commit]``; ``git+https://…@<commit>`` (or ``git+http://``, a
mirror; the pinned commit is what makes either trustworthy) or a plain ``https://….git@<commit>``
(a pin is required); an archive (``.tar.gz``, ``.tgz``, ``.tar``, ``.zip``) as a local file or an
``http(s)://`` URL with ``--sha256`` (required for URLs); an OCI artifact
``oci://host/repo:tag`` or ``…@sha256:<manifest digest>`` (pulled by the runtime's OCI client,
``contract.distribution``, served by wbcore-oci: every blob checked against its digest and size
while it streams; the lock records the digest).

Everything is staged under ``$WB_HOME/.staging`` (the same filesystem as the user root),
checked there — safe unpack, manifest parse, the signature of every third-party
toolkit — and only then renamed into ``$WB_HOME/toolkits/<id>``. Any failure removes
the stage: the user root and the lockfile are exactly as before. The folders and the
lockfile (``wbcore_install.lockfile``) land as one change through a journal
(``wbcore_install.journal``): after a kill, all old or all new. ``install --locked`` refetches every
entry and fails, landing nothing, on drift. The records (``Source``, ``LockEntry``, ``Installed``,
``Change``) are the core's, ``contract.installs``; :mod:`wbcore_install.service` serves this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.store import leftovers
from wbcore_runtime.trust import signing
from wbcore_runtime.guard import unpack
from wbcore_runtime.guard import fetch as _fetch
from wbcore_runtime.guard import gitfetch as _gitfetch
from wbcore_runtime.trust import consent as _consent
from wbcore_runtime.trust import verdict as _trust
from wbcore_runtime.toolkit import manifest as _manifest
from wbcore_runtime.contract import distribution as _dist
from wbcore_runtime.contract.errors import InvalidArgs, ManifestError, NotFound
from wbcore_runtime.contract.installs import Change, Installed, LockEntry, Source
from wbcore_runtime.guard.netguard import NetGuard
from wbcore_install import journal
from wbcore_install.lockfile import LOCKFILE, read_lock

STAGING = leftovers.STAGING
STAGING_PREFIX = leftovers.STAGING_PREFIX
MAX_DOWNLOAD = 64 << 20
HTTP_TIMEOUT_S = 60.0
GIT_LIMITS = _gitfetch.GitLimits(max_bytes=256 << 20, max_files=5000, timeout=300.0)
COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
#: What one install may bring in: entries and bytes, counted as written.
TREE_CAPS = unpack.Caps(max_files=5000, max_bytes=256 << 20)

__all__ = ["Change", "Installed", "InstallError", "LockEntry", "Source", "fetch", "find_toolkits",
           "install", "install_locked", "parse_source", "preview", "uninstall"]


class InstallError(InvalidArgs):
    """An install refused or failed; nothing was changed."""


# --- sources ----------------------------------------------------------------------------


def parse_source(text: str, sha256: str | None = None) -> Source:
    text = text.strip()
    pin = sha256.lower() if sha256 else None
    if pin is not None and not SHA256_RE.match(pin):
        raise InvalidArgs("--sha256 must be 64 hex digits")
    if text.startswith(("https://", "file://")) and re.search(r"\.git(@[0-9A-Fa-f]+)?/?$", text):
        text = "git+" + text  # seed 001: `wb toolkit install <git url>`
    if text.startswith("git+"):
        rest = text[4:]
        url, commit = rest, None
        at = rest.rfind("@")
        if at > rest.find("://") + 3 and "/" not in rest[at:]:
            url, commit = rest[:at], rest[at + 1 :].lower()
            if not COMMIT_RE.match(commit):
                raise InvalidArgs(f"{text}: {commit!r} is not a commit id (hex)")
        if url.startswith(("https://", "http://")):
            if commit is None:
                raise InvalidArgs(f"{text}: pin a commit (git+https://…@<commit>) "
                                  "so the install is reproducible")
        elif not url.startswith("file://"):
            raise InvalidArgs(f"{text}: git sources are git+file://… or git+https://…@<commit> "
                              "(git+http:// too)")
        return Source("git", url, commit)
    if text.startswith("oci://"):
        if pin is not None:
            raise InvalidArgs(f"{text}: --sha256 is for archives; "
                              "pin an OCI artifact with …@sha256:<manifest digest>")
        return Source("oci", _dist.Reference.parse(text).text())
    if text.startswith(("https://", "http://")):
        name = text.split("?", 1)[0]
        if not unpack.is_archive(name):
            raise InvalidArgs(f"{text}: an archive URL must end in .tar.gz, .tgz, .tar or .zip")
        if pin is None:
            raise InvalidArgs(f"{text}: an archive URL needs --sha256 <hex> (the archive's digest)")
        return Source("archive", text, sha256=pin)
    path = Path(text.removeprefix("file://")).expanduser()
    if path.is_dir():
        return Source("dir", str(path.resolve()))
    if path.is_file() and unpack.is_archive(path.name):
        return Source("archive", str(path.resolve()), sha256=pin)
    if not path.exists():
        raise NotFound(f"install source {text!r} does not exist")
    raise InvalidArgs(f"{text}: not a folder, git+ URL or archive (.tar.gz, .tgz, .tar, .zip)")


def _download(url: str, dest: Path, env: Mapping[str, str] | None) -> str:
    """Through the one fetcher: SSRF guard on every hop, capped and bounded while streaming; the
    sha256 of the bytes written, hashed as they streamed (no second read of ``dest``)."""
    seen = os.environ if env is None else env
    return _fetch.download(url, dest, guard=NetGuard.from_env(seen),
                           limits=_fetch.FetchLimits(max_bytes=MAX_DOWNLOAD, timeout=HTTP_TIMEOUT_S),
                           env=seen).sha256


def fetch(source: Source, work: Path, env: Mapping[str, str] | None = None,
          distribution: _dist.Client | None = None) -> tuple[Path, str | None, str | None]:
    """Bring the source into ``work/tree``; returns (tree, resolved commit, archive sha256)."""
    tree = work / "tree"
    if source.kind == "dir":
        unpack.copy_tree(Path(source.location), tree, TREE_CAPS)
        return tree, None, None
    if source.kind == "git":
        # The one git fetcher: the SSRF guard with the deployer's allowances, the connection
        # pinned, only the URL's transport (file:// here: a person named a local repository).
        seen = os.environ if env is None else env
        repo = work / "repo"
        try:
            commit = _gitfetch.checkout(source.location, repo, commit=source.commit,
                                        guard=NetGuard.from_env(seen), limits=GIT_LIMITS, env=seen,
                                        allow_file=True)
        except NotFound as exc:
            raise InstallError(exc.message) from None
        unpack.copy_tree(repo, tree, TREE_CAPS)
        return tree, commit, None
    if source.kind == "oci":
        # Every blob is checked against its digest and size while it streams; the layer is
        # then unpacked with the same caps as any archive, and signatures are checked by _stage.
        seen = os.environ if env is None else env
        if distribution is None:
            raise NotFound(f"{source.location}: an oci:// source is pulled by the runtime's OCI client "
                           f"and none was given ({_dist.NONE_INSTALLED}, then install with wbx)")
        pulled = distribution().pull(source.location, work / "oci", artifact_types=(_dist.TOOLKIT_TYPE,),
                                     env=seen)
        desc, layer = pulled.layers[0]
        if len(pulled.layers) != 1 or desc.media_type != _dist.TOOLKIT_LAYER:
            raise InstallError(f"{source.location}: a toolkit artifact has one {_dist.TOOLKIT_LAYER} layer")
        archive = layer.rename(layer.with_name("toolkit.tar.gz"))
        unpack.unpack(archive, tree, TREE_CAPS)
        return tree, pulled.reference.digest, None
    base = re.sub(r"[^A-Za-z0-9._-]", "_", source.location.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])
    archive = work / (base if unpack.is_archive(base) else "archive")  # messages name the archive
    if source.location.startswith(("https://", "http://")):
        digest = _download(source.location, archive, env)
    else:
        size = Path(source.location).stat().st_size
        if size > MAX_DOWNLOAD:
            raise InstallError(f"{source.location}: over the {MAX_DOWNLOAD}-byte archive cap")
        # the core's one local copy: capped while it reads (the size above proves nothing about a
        # file that grows before it is copied), a regular file only, a link swapped in refused
        digest = _fetch.copy_local(Path(source.location), archive, max_bytes=MAX_DOWNLOAD,
                                   shown=source.location)
    if source.sha256 and digest != source.sha256:
        raise InstallError(f"{source.location}: sha256 is {digest} but --sha256 pins {source.sha256}")
    unpack.unpack(archive, tree, TREE_CAPS)
    return tree, None, digest


def find_toolkits(tree: Path) -> list[Path]:
    """The toolkit folders in a fetched tree: its root, or ``<dir>/`` / ``toolkits/<dir>/`` below it."""
    if (tree / signing.MANIFEST).is_file():
        return [tree]
    found: list[Path] = []
    for base in (tree, tree / "toolkits"):
        if base.is_dir() and not base.is_symlink():
            found += sorted(p for p in base.iterdir()
                            if p.is_dir() and not p.is_symlink() and (p / signing.MANIFEST).is_file())
    if not found:
        entries = [p for p in tree.iterdir() if not p.name.startswith(".")] if tree.is_dir() else []
        if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
            return find_toolkits(entries[0])  # an archive wrapping everything in one folder
    return found


# --- install --------------------------------------------------------------------------


@dataclass
class _Staged:
    entry: LockEntry
    dir: Path
    caps: tuple[str, ...]


def _check_id(ident: str, where: object) -> str:
    if not _manifest.NAME_RE.match(ident) or ident.startswith("."):
        raise InstallError(f"toolkit id {ident!r} (from {where}) cannot name a folder in the user root")
    return ident


def _stage(source: Source, work: Path, env: Mapping[str, str] | None, only: set[str] | None = None,
           *, allow_first_party: bool = False, distribution: _dist.Client | None = None) -> list[_Staged]:
    tree, commit, archive_sha = fetch(source, work, env, distribution)
    dirs = find_toolkits(tree)
    if not dirs:
        raise InstallError(f"{source.text()}: no manifest.org found (looked at the root, */ and toolkits/*/)")
    staged: list[_Staged] = []
    for d in dirs:
        try:
            m = _manifest.load(d / signing.MANIFEST)
        except ManifestError as exc:
            raise InstallError(f"{source.text()}: {exc.message}") from None
        if only is not None and m.id not in only:
            continue
        _check_id(m.id, source)
        if m.trust != "third-party" and source.kind != "dir" and not allow_first_party:
            raise InstallError(
                f"{m.id} from {source.text()} declares itself first-party: it would run under its "
                f"profile's default caps ({' '.join(m.caps) or 'none requested'}) with no consent step. "
                "Pass --first-party if it is yours; third-party toolkits must be signed and granted caps "
                "explicitly"
            )
        if m.trust == "third-party":
            verdict = _trust.folder_verdict(d, env)
            if _trust.refusal(verdict):
                raise InstallError(f"refusing to install {m.id}: signature {verdict.code}: {verdict.message}")
            signer = verdict.signer
            digest = verdict.digest or signing.content_digest(d)
        else:
            signer = m.author_did
            digest = signing.content_digest(d)
        rel = d.relative_to(tree).as_posix() if d != tree else ""
        entry = LockEntry(m.id, m.version, source.text(commit), digest, m.trust, signer, archive_sha, rel)
        staged.append(_Staged(entry, d, m.caps))
    ids = [s.entry.id for s in staged]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise InstallError(f"{source.text()}: toolkit id(s) {', '.join(dupes)} appear more than once")
    return staged


def _staging(home: Path) -> Path:
    base = home / STAGING
    base.mkdir(parents=True, exist_ok=True)
    return leftovers.mkdtemp(STAGING_PREFIX, dir=base)


@contextmanager
def _staged_source(home: Path, source_text: str, *, sha256: str | None, env: Mapping[str, str] | None,
                   first_party: bool, distribution: _dist.Client | None,
                   ) -> Iterator[tuple[list[_Staged], Path, dict[str, LockEntry]]]:
    """Under the home's lock: the source staged and verified in a fresh staging folder (removed
    when the block ends), that folder, and the lock as it stands."""
    source = parse_source(source_text, sha256)
    with journal.home_lock(home):
        work = _staging(home)
        try:
            staged = _stage(source, work, env, allow_first_party=first_party, distribution=distribution)
            yield staged, work, read_lock(home / LOCKFILE)
        finally:
            unpack.remove_tree(work)


def install(home: Path, source_text: str, *, sha256: str | None = None, force: bool = False,
            env: Mapping[str, str] | None = None, first_party: bool = False,
            distribution: _dist.Client | None = None) -> list[Installed]:
    """Install every toolkit of one source; all of them land, or none.

    A first-party toolkit from a git or archive source needs ``first_party=True``: the
    deployer says it is theirs, since it will get its profile's caps without consent.
    """
    with _staged_source(home, source_text, sha256=sha256, env=env, first_party=first_party,
                        distribution=distribution) as (staged, work, lock):
        root = home / "toolkits"
        results: list[Installed] = []
        to_land: list[_Staged] = []
        for s in staged:
            target = root / s.entry.id
            if target.is_dir() and not target.is_symlink() and lock.get(s.entry.id) == s.entry:
                if _installed_digest(target) == s.entry.digest:
                    results.append(Installed(s.entry, target, s.caps, unchanged=True))
                    continue
            if (target.exists() or target.is_symlink()) and not force:
                raise InstallError(f"{s.entry.id} is already installed at {target} "
                                   "(use --force to replace it)")
            to_land.append(s)
            results.append(Installed(s.entry, target, s.caps))
        if to_land:
            new_lock = {**lock, **{s.entry.id: s.entry for s in to_land}}
            journal.land(home, {s.entry.id: s.dir for s in to_land}, new_lock, work,
                         replace={s.entry.id for s in to_land} if force else set())
        return results


def preview(home: Path, source_text: str, *, sha256: str | None = None, force: bool = False,
            env: Mapping[str, str] | None = None, first_party: bool = False,
            distribution: _dist.Client | None = None) -> list[Change]:
    """What :func:`install` would do with the same arguments, landing nothing: the source is
    staged and verified exactly as an install would (a refusal raises the same error)."""
    with _staged_source(home, source_text, sha256=sha256, env=env, first_party=first_party,
                        distribution=distribution) as (staged, _, lock):
        out = []
        for s in staged:
            target = home / "toolkits" / s.entry.id
            old = lock.get(s.entry.id)
            old_caps: tuple[str, ...] | None = None
            old_version = old.version if old else None
            if (target / signing.MANIFEST).is_file():
                try:
                    m = _manifest.load(target / signing.MANIFEST)
                    old_caps, old_version = tuple(m.caps), m.version
                except ManifestError:
                    old_caps = ()
            present = target.exists() or target.is_symlink()
            if present and old == s.entry and _installed_digest(target) == s.entry.digest:
                action, why = "unchanged", ""
            elif present and not force:
                action, why = "refused", (f"already installed at {target} "
                                          "(push or install with --force to replace it)")
            else:
                action, why = ("replace" if present else "new"), ""
            try:
                reads_env = tuple(_consent.requested_env(_manifest.load(s.dir / signing.MANIFEST)))
            except ManifestError:
                reads_env = ()
            out.append(Change(s.entry.id, action, (old_version, s.entry.version),
                              (old_caps, tuple(s.caps)), (old.trust if old else None, s.entry.trust),
                              (old.signer if old else None, s.entry.signer), why, reads_env))
        return out


def _installed_digest(path: Path) -> str | None:
    try:
        return signing.content_digest(path)
    except (InvalidArgs, OSError):
        return None


def install_locked(home: Path, lockfile: Path | None = None, *, env: Mapping[str, str] | None = None,
                   distribution: _dist.Client | None = None) -> list[Installed]:
    """Reproduce exactly the set in the lockfile; any drift fails and nothing lands."""
    lock_path = lockfile or home / LOCKFILE
    wanted = read_lock(lock_path)
    if not wanted and not lock_path.exists():
        raise NotFound(f"no lockfile at {lock_path}")
    for tid in wanted:
        _check_id(tid, lock_path)
    with journal.home_lock(home):
        work = _staging(home)
        try:
            current = read_lock(home / LOCKFILE)
            root = home / "toolkits"
            drift: list[str] = []
            results: list[Installed] = []
            to_land: list[_Staged] = []
            by_source: dict[str, list[LockEntry]] = {}
            for e in wanted.values():
                by_source.setdefault(e.source, []).append(e)
            for n, (text, entries) in enumerate(sorted(by_source.items())):
                pin = entries[0].sha256 if entries[0].sha256 else None
                source = parse_source(text, pin)
                sub = work / f"src-{n}"
                sub.mkdir()
                # The lock records the deployer's decisions, first-party ones included.
                got = {s.entry.id: s for s in _stage(source, sub, env, only={e.id for e in entries},
                                                     allow_first_party=True, distribution=distribution)}
                for e in entries:
                    s = got.get(e.id)
                    if s is None:
                        drift.append(f"{e.id}: no longer in {text}")
                        continue
                    for name in ("version", "digest", "signer", "trust"):
                        if getattr(s.entry, name) != getattr(e, name):
                            drift.append(f"{e.id}: {name} is {getattr(s.entry, name)} "
                                         f"but the lock says {getattr(e, name)}")
                    target = root / e.id
                    if target.exists() or target.is_symlink():
                        have = _installed_digest(target)
                        if have != e.digest:
                            drift.append(f"{e.id}: installed copy {target} has digest {have} "
                                         f"but the lock says {e.digest}")
                        else:
                            results.append(Installed(e, target, s.caps, unchanged=True))
                        continue
                    to_land.append(_Staged(e, s.dir, s.caps))
                    results.append(Installed(e, target, s.caps))
            extra = sorted(set(current) - set(wanted))
            drift += [f"{tid}: installed and locked here but not in {lock_path}" for tid in extra]
            if drift:
                raise InstallError("install --locked found drift; nothing was installed:\n  "
                                   + "\n  ".join(drift))
            journal.land(home, {s.entry.id: s.dir for s in to_land}, wanted, work, replace=set())
            return results
        finally:
            unpack.remove_tree(work)


def uninstall(home: Path, ident: str) -> LockEntry | None:
    """Remove an installed toolkit and its lock entry together; returns the entry it had."""
    _check_id(ident, "uninstall")
    with journal.home_lock(home):
        lock = read_lock(home / LOCKFILE)
        target = home / "toolkits" / ident
        if not (target.exists() or target.is_symlink()) and ident not in lock:
            raise NotFound(f"{ident} is not installed in {home / 'toolkits'}")
        entry = lock.pop(ident, None)
        work = _staging(home)
        try:
            journal.land(home, {}, lock, work, replace=set(), remove=(ident,))
            return entry
        finally:
            unpack.remove_tree(work)
