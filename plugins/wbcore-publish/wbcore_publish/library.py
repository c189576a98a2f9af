"""The Library: an index over an identity's workspaces and bundles, with their provenance.

Nothing is stored: every listing walks the folders it is given (``--path``, then
``$WB_LIBRARY_PATH``, then the toolkit search roots) for ``workspace.org`` and ``*.wbundle``,
bounded in depth and entries, and checks each find. A bundle's provenance is its signed
manifest (signer, signed-at, verified = signature and every member hash hold); a workspace's
is its HTML's ``workbooks-c2pa`` manifest when the page is signed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_publish import bundle as _bundle
from wbcore_publish import page as _page
from wbcore_publish import workspace as _ws
from wbcore_runtime.contract.errors import WbError

ENV_LIBRARY_PATH = "WB_LIBRARY_PATH"
MAX_DEPTH = 4
MAX_ENTRIES = 20_000
SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str  # "workspace" | "bundle"
    name: str
    path: Path
    signer: str | None
    signed_at: str | None
    verified: bool
    mine: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "path": str(self.path), "signer": self.signer,
                "signed_at": self.signed_at, "verified": self.verified, "mine": self.mine,
                "detail": self.detail}


def folders(explicit: Iterable[Path], env: Mapping[str, str], roots: Iterable[Path]) -> list[Path]:
    out: dict[str, Path] = {}
    configured = [Path(p) for p in env.get(ENV_LIBRARY_PATH, "").split(os.pathsep) if p]
    for p in [*explicit, *configured, *roots]:
        if p.is_dir():
            out.setdefault(os.path.realpath(p), p)
    return list(out.values())


def _walk(root: Path) -> Iterable[Path]:
    """``workspace.org`` folders and ``*.wbundle`` files under ``root`` (bounded, no link followed)."""
    seen = 0
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            items = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        for e in items:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            if e.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH and not e.name.startswith(".") and e.name not in SKIP_DIRS:
                    stack.append((Path(e.path), depth + 1))
            elif e.is_file(follow_symlinks=False) and (e.name == _ws.MANIFEST or e.name.endswith(".wbundle")):
                yield Path(e.path)


def _workspace(path: Path, env: Mapping[str, str], mine: str, loopback: bool) -> Entry:
    try:
        ws = _ws.load(path.parent)
    except WbError as exc:
        return Entry("workspace", path.parent.name, path.parent, None, None, False, False,
                     f"error: {exc.message}")
    if not ws.html:
        return Entry("workspace", ws.name, ws.dir, None, None, False, False, "no HTML; unsigned")
    r = _page.verify(ws.dir / ws.html, env=env, allow_http_loopback=loopback)
    if r.signer is None:
        return Entry("workspace", ws.name, ws.dir, None, None, False, False, f"{ws.html} unsigned")
    detail = f"{ws.html}: " + ("signature and assets hold" if r.valid
                               else "; ".join([*r.changes, r.signature_reason]))
    # "mine" needs a signature that verifies: a manifest merely naming my DID is not mine.
    return Entry("workspace", ws.name, ws.dir, r.signer, r.signed_at, r.valid,
                 r.signature and r.signer == mine, detail)


def _bundle_entry(path: Path, env: Mapping[str, str], mine: str, loopback: bool) -> Entry:
    try:
        ins = _bundle.inspect(path, env=env, allow_http_loopback=loopback)
    except WbError as exc:
        return Entry("bundle", path.stem, path, None, None, False, False, f"error: {exc.message}")
    m = ins.manifest
    name = m["workspace"].get("name") if isinstance(m["workspace"].get("name"), str) else path.stem
    detail = "signature and every member hold" if ins.verified else "; ".join(
        [*ins.changes] + ([] if ins.signature.ok else [ins.signature.reason]))
    signer = m.get("signer") if isinstance(m.get("signer"), str) else None
    return Entry("bundle", name, path, signer,
                 m.get("signed_at") if isinstance(m.get("signed_at"), str) else None,
                 ins.verified, ins.signature.ok and signer == mine, detail)


def scan(dirs: Iterable[Path], *, identity_did: str, env: Mapping[str, str],
         allow_http_loopback: bool = False) -> list[Entry]:
    out: list[Entry] = []
    seen: set[str] = set()
    for root in dirs:
        for p in _walk(root):
            real = os.path.realpath(p)
            if real in seen:
                continue
            seen.add(real)
            fn = _workspace if p.name == _ws.MANIFEST else _bundle_entry
            out.append(fn(p, env, identity_did, allow_http_loopback))
    return sorted(out, key=lambda e: (e.kind, e.name, str(e.path)))
