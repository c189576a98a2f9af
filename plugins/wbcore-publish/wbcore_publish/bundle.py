"""``.wbundle``: a workspace's HTML, its VFS database (every volume it owns) and a signed manifest.

A bundle is a zip (``docs/bundles.md`` gives the format): members sorted by name, every
timestamp 1980-01-01 00:00:00, deflate at level 6, Unix mode 0644, no directories, no
links. ``wbundle.json`` lists every other member with its sha256 and size and is signed
by the tenant identity (:mod:`wbcore_publish.canonical`). Restore checks the signature, the
signer's trust and every hash into a staging area before anything lands, then lands each
target with one rename.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import math
import os
import posixpath
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_publish import canonical, vfsfile
from wbcore_publish import page as _page
from wbcore_publish import workspace as _ws
from wbcore_runtime.trust import identity as _identity
from wbcore_runtime.guard import paths
from wbcore_runtime.store.artifacts import atomic_write, fsync_dir
from wbcore_runtime.contract.errors import InvalidArgs
from wbcore_runtime.guard import unpack
from wbcore_runtime.guard.unpack import Caps, UnsafeArchive, safe_name

FORMAT = "wbundle/1"
MANIFEST = "wbundle.json"
VFS_MEMBER = "vfs.db"
WS_PREFIX = "workspace/"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
ZIP_LEVEL = 6
MAX_MANIFEST = 1 << 20
MAX_HTML = 64 << 20
MAX_MEMBERS = 1024
MAX_ASSETS = 1000
MAX_MTIME = 1 << 36  # seconds: far past any real clock, well inside what utime(2) takes
CAPS = Caps(max_files=MAX_MEMBERS, max_bytes=320 << 20)
MAX_BUNDLE = CAPS.max_bytes + (64 << 20)  # members stored, not deflated, plus the zip's own headers


class TamperedBundle(InvalidArgs):
    """A bundle whose manifest or members differ from what was signed."""


@dataclass(frozen=True, slots=True)
class Shipped:
    path: Path
    sha256: str
    signer: str
    signed_at: str
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Restored:
    workspace: Path
    vfs_db: Path
    signer: str
    signed_at: str
    rows: int


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _iso(ts: int) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _zip(members: Mapping[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(members, key=lambda n: n.encode("utf-8")):
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            info.external_attr = 0o100644 << 16
            zf.writestr(info, members[name], compresslevel=ZIP_LEVEL)
    return buf.getvalue()


def _read_inside(ws: _ws.Workspace, rel: str) -> tuple[bytes, int]:
    path = paths.inside(ws.dir, rel, label=f"the workspace folder ({ws.name})")  # the one containment rule
    data = _ws.read_regular(path, MAX_HTML, f"workspace {ws.name}")
    return data, min(max(int(path.lstat().st_mtime), 0), MAX_MTIME - 1)


def _assets(ws: _ws.Workspace, html: bytes) -> list[str]:
    """The workspace files the HTML references (publishing's rule: local src/href), sorted.

    A reference to nothing (or to a link, or out of the folder) is not carried: the page
    is shipped as it is, and ``wbx publish verify`` says what it lacks.
    """
    base = posixpath.dirname(ws.html or "")
    root = paths.Root.at(ws.dir, f"the workspace folder ({ws.name})")
    out: set[str] = set()
    for ref in _page.discover(html):
        rel = posixpath.normpath(posixpath.join(base, ref))
        if rel == ".." or rel.startswith("../") or rel in (_ws.MANIFEST, ws.html):
            continue
        path = ws.dir / rel
        try:
            regular = stat.S_ISREG(path.lstat().st_mode)
        except OSError:
            continue
        if regular and root.stays_inside(rel):
            out.add(rel)
    if len(out) > MAX_ASSETS:
        raise InvalidArgs(f"workspace {ws.name}: its HTML references more than {MAX_ASSETS} files")
    return sorted(out, key=lambda r: r.encode("utf-8"))


def ship(ws_dir: Path, out: Path, *, home: Path, ident: _identity.Identity,
         did_web_host: str | None = None, env: Mapping[str, str] | None = None) -> Shipped:
    """Pack the workspace at ``ws_dir`` into ``out`` (written atomically)."""
    env = os.environ if env is None else env
    ws = _ws.load(ws_dir)
    files: dict[str, tuple[bytes, int]] = {}
    for rel in [_ws.MANIFEST] + ([ws.html] if ws.html else []):
        files[WS_PREFIX + rel] = _read_inside(ws, rel)
    assets = _assets(ws, files[WS_PREFIX + ws.html][0]) if ws.html else []
    for rel in assets:
        files[WS_PREFIX + rel] = _read_inside(ws, rel)
    db = vfsfile.db_path(home, ws.instance)
    rows = vfsfile.read_rows(db, ws.volumes) if db.exists() else []
    db_bytes = vfsfile.canonical_db(rows)
    # signed_at is content time, not wall time, so the same content ships to the same bytes.
    epoch = env.get("SOURCE_DATE_EPOCH")
    newest = int(epoch) if epoch and epoch.isdigit() else max(
        [m for _, m in files.values()] + [int(r[4])
                                          for r in rows if math.isfinite(r[4]) and 0 <= r[4] < MAX_MTIME])
    members: list[dict[str, Any]] = [{"path": VFS_MEMBER, "sha256": _sha(db_bytes), "size": len(db_bytes)}]
    for name, (data, mtime) in files.items():
        members.append({"path": name, "sha256": _sha(data), "size": len(data), "mtime": mtime})
    members.sort(key=lambda m: m["path"].encode("utf-8"))
    manifest = canonical.sign({
        "format": FORMAT,
        "workspace": {"name": ws.name, "title": ws.title, "html": ws.html, "instance": ws.instance,
                      "volumes": list(ws.volumes), "assets": assets},
        "vfs": {"rows": len(rows)},
        "members": members,
        "signer": canonical.signer_did(ident, did_web_host),
        "signed_at": _iso(newest),
    }, ident)
    blob = _zip({MANIFEST: canonical.serialize(manifest), VFS_MEMBER: db_bytes,
                 **{n: d for n, (d, _) in files.items()}})
    atomic_write(out, blob)
    return Shipped(out, _sha(blob), manifest["signer"], manifest["signed_at"],
                   tuple(m["path"] for m in members))


# --- reading and verifying -----------------------------------------------------------------


def _bundle_bytes(path: Path, what: str) -> bytes:
    """The bundle file, read once, bounded."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_BUNDLE:
                raise UnsafeArchive(f"{what}: {size} bytes is over the {MAX_BUNDLE}-byte cap for a bundle")
            data = fh.read(MAX_BUNDLE + 1)  # it may grow after fstat: the cap holds while reading
    except OSError as exc:
        raise UnsafeArchive(f"{what}: cannot read the bundle ({exc.strerror})") from None
    if len(data) > MAX_BUNDLE:
        raise UnsafeArchive(f"{what}: over the {MAX_BUNDLE}-byte cap for a bundle")
    if data[:4] not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise UnsafeArchive(f"{what}: not a readable zip archive (a .wbundle is a zip)")
    return data


#: What a member may exceed its signed size by and still be read (and named as changed);
#: beyond it the read stops at the cap, so memory stays bounded by what the manifest signed.
SLACK = 1 << 20


def _members(data: bytes, m: Mapping[str, Any], what: str) -> dict[str, bytes]:
    """Every member but the manifest, read by the core's unpacker (strict: files only,
    canonical names, no name twice), at most the signed sizes plus :data:`SLACK` in all as
    decompressed (a bomb stops there, naming its member)."""
    total = sum(e["size"] for e in m["members"])
    cap = min(CAPS.max_bytes, total + SLACK)
    try:
        return unpack.read_files(data, Caps(max_files=CAPS.max_files, max_bytes=cap), what=what, strict=True,
                                 only=lambda name: name != MANIFEST)
    except UnsafeArchive as exc:
        if cap >= CAPS.max_bytes or "bytes unpacked" not in exc.message:
            raise
        raise UnsafeArchive(f"{exc.message}; its manifest signs {total} bytes in all: the bundle was changed "
                            "after it was signed") from None


def _shape(m: Mapping[str, Any], what: str) -> None:
    if m.get("format") != FORMAT:
        raise InvalidArgs(f"{what}: {MANIFEST} has format {m.get('format')!r}, expected {FORMAT!r}")
    ws = m.get("workspace")
    members = m.get("members")
    if not isinstance(ws, dict) or not isinstance(members, list) or not isinstance(m.get("signed_at"), str):
        raise InvalidArgs(f"{what}: {MANIFEST} lacks workspace, members or signed_at")
    for e in members:
        if not (isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("sha256"), str)
                and isinstance(e.get("size"), int) and e["size"] >= 0):
            raise InvalidArgs(f"{what}: {MANIFEST} has a malformed member entry {str(e)[:80]}")
        if "mtime" in e and not (isinstance(e["mtime"], int) and 0 <= e["mtime"] < MAX_MTIME):
            raise InvalidArgs(f"{what}: {MANIFEST}: member {e['path']!r} has an mtime outside 0..{MAX_MTIME}")
    # A bundle holds exactly these members: anything else is not a wbundle/1, whoever signed it.
    html = ws.get("html")
    assets = ws.get("assets", [])
    if not isinstance(assets, list) or not all(isinstance(a, str) for a in assets):
        raise InvalidArgs(f"{what}: {MANIFEST}: workspace.assets must be a list of paths")
    expected = ({VFS_MEMBER, WS_PREFIX + _ws.MANIFEST}
                | ({WS_PREFIX + html} if isinstance(html, str) and html else set()))
    expected |= {WS_PREFIX + a for a in assets}
    listed = [e["path"] for e in members]
    if sorted(listed) != sorted(expected):
        raise InvalidArgs(f"{what}: {MANIFEST} lists members {', '.join(sorted(listed))}; a {FORMAT} bundle "
                          f"holds exactly {', '.join(sorted(expected))}")


@dataclass(frozen=True, slots=True)
class Inspection:
    """What a bundle says and whether it holds: the library and restore both read this."""

    manifest: dict[str, Any]
    signature: canonical.SignatureCheck
    changes: tuple[str, ...]

    @property
    def verified(self) -> bool:
        return self.signature.ok and not self.changes


def _read_manifest(data: bytes, what: str) -> dict[str, Any]:
    """The manifest, read first: this pass also checks every member's name and kind (strict)."""
    files = unpack.read_files(data, CAPS, what=what, strict=True, only=lambda name: name == MANIFEST,
                              max_file=MAX_MANIFEST)
    if MANIFEST not in files:
        raise TamperedBundle(f"{what}: no {MANIFEST}; not a .wbundle (or its manifest was removed)")
    m = canonical.parse(files[MANIFEST], f"{what}:{MANIFEST}")
    _shape(m, what)
    return m


def _check_members(files: Mapping[str, bytes], m: Mapping[str, Any], what: str,
                   sink: Path | None) -> list[str]:
    """Hash every member against the manifest (writing it under ``sink`` if given); the changes."""
    changes: list[str] = []
    signed = {e["path"]: e for e in m["members"]}
    for name in sorted(set(files) - set(signed)):
        changes.append(f"member {name} added (not in the signed manifest)")
    for name, e in sorted(signed.items()):
        if name not in files:
            changes.append(f"member {name} removed")
            continue
        data = files[name]
        if len(data) != e["size"] or _sha(data) != e["sha256"]:
            got = ("bigger than signed" if len(data) > e["size"]
                   else f"sha256 {_sha(data)[:12]}…, {len(data)} bytes")
            changes.append(f"member {name} changed ({got}; signed sha256 "
                           f"{e['sha256'][:12]}…, {e['size']} bytes)")
            continue
        if sink is not None:
            dest = sink / safe_name(name, what)
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())  # a crash after the landing rename never leaves a short file
            if isinstance(e.get("mtime"), int):
                os.utime(dest, (e["mtime"], e["mtime"]))
    return changes


def read_bundle(path: Path) -> bytes:
    """A bundle file's bytes, read once and bounded: check and use these, not the file again."""
    return _bundle_bytes(path, path.name)


def inspect(path: Path, *, env: Mapping[str, str] | None = None, allow_http_loopback: bool = False,
            resolve_web: bool = True) -> Inspection:
    """Read a bundle and check its signature and every member hash; nothing is written."""
    return inspect_bytes(read_bundle(path), path.name, env=env, allow_http_loopback=allow_http_loopback,
                         resolve_web=resolve_web)


def inspect_bytes(data: bytes, what: str, *, env: Mapping[str, str] | None = None,
                  allow_http_loopback: bool = False, resolve_web: bool = True) -> Inspection:
    """:func:`inspect` of bundle bytes already read (by :func:`read_bundle`)."""
    m = _read_manifest(data, what)
    sig = canonical.check_signature(m, env=env, allow_http_loopback=allow_http_loopback,
                                    resolve_web=resolve_web)
    changes = _check_members(_members(data, m, what), m, what, None)
    return Inspection(m, sig, tuple(changes))


def restore(path: Path, *, home: Path, into: Path, trusted: Sequence[str],
            env: Mapping[str, str] | None = None, allow_http_loopback: bool = False) -> Restored:
    """Verify ``path`` completely, then land its workspace at ``into`` and its VFS in ``home``."""
    what = path.name
    if os.path.lexists(into):
        raise InvalidArgs(f"{into} already exists; restore into a new folder (--into)")
    data = _bundle_bytes(path, what)
    m = _read_manifest(data, what)
    sig = canonical.check_signature(m, env=env, allow_http_loopback=allow_http_loopback)
    if not sig.ok:
        raise TamperedBundle(f"{what}: {MANIFEST} refused: {sig.reason}")
    if sig.signer not in trusted:
        raise InvalidArgs(f"{what}: signed by {sig.signer}, which is not a trusted signer "
                          f"(trusted: {', '.join(trusted)}); pass --signer {sig.signer} to trust it")
    ws_meta = m["workspace"]
    instance = ws_meta.get("instance")
    if not isinstance(instance, str) or not _ws.INSTANCE_RE.match(instance):
        raise InvalidArgs(f"{what}: the manifest names no valid VFS instance")
    present = vfsfile.exists(home, instance)
    if present:
        raise InvalidArgs(f"VFS instance {instance!r} already exists ({present[0]}); "
                          "restore into another $WB_HOME or remove the instance first")
    into.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".wbundle-stage-", dir=into.parent))
    try:
        changes = _check_members(_members(data, m, what), m, what, stage)
        if changes:
            raise TamperedBundle(f"{what}: refused, it differs from what {sig.signer} "
                                 "signed: " + "; ".join(changes))
        ws = _ws.load(stage / "workspace")
        if (ws.name, ws.instance, ws.html, list(ws.volumes)) != (
                ws_meta.get("name"), instance, ws_meta.get("html"), ws_meta.get("volumes")):
            raise TamperedBundle(f"{what}: workspace.org does not describe the workspace the manifest names")
        if ws.html and not (stage / "workspace" / ws.html).is_file():
            raise TamperedBundle(f"{what}: the workspace's HTML {ws.html} is not in the bundle")
        if not (stage / VFS_MEMBER).is_file():
            raise TamperedBundle(f"{what}: no {VFS_MEMBER} member")
        rows = vfsfile.check_db(stage / VFS_MEMBER)
        # Land: the database first (link(2) refuses an existing one), then the folder.
        final_db = vfsfile.db_path(home, instance)
        final_db.parent.mkdir(parents=True, exist_ok=True)
        db_tmp = final_db.parent / f".{final_db.name}.{os.getpid()}.{os.urandom(4).hex()}.wbundle-tmp"
        shutil.copyfile(stage / VFS_MEMBER, db_tmp)
        with db_tmp.open("rb+") as fh:
            os.fsync(fh.fileno())
        try:
            os.link(db_tmp, final_db)
        except FileExistsError:
            raise InvalidArgs(f"VFS instance {instance!r} appeared while restoring; nothing was "
                              "changed") from None
        finally:
            os.unlink(db_tmp)
        try:
            os.rename(stage / "workspace", into)
        except OSError as exc:
            os.unlink(final_db)
            raise InvalidArgs(f"cannot place the workspace at {into} ({exc.strerror}); nothing was "
                              "changed") from None
        fsync_dir(final_db.parent)
        fsync_dir(into.parent)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return Restored(into, final_db, sig.signer or "", m["signed_at"], rows)
