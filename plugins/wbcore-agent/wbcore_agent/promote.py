"""Promotion of a session toolkit (issue 15 item 8, the PROMOTE lifecycle): explicit, and
audited at each step.

1. **session → workspace** (:func:`to_workspace`): the toolkit's files are read from the
   run's VFS into a folder, its manifest set to ``#+TRUST: third-party`` (an agent's tool is
   never the deployer's own code) and signed with the tenant's identity
   (``wbcore_runtime.trust.signing.sign``). The signed files land in a workspace,
   ``$WB_HOME/workspace/<toolkit>/``: its ``workspace.org`` (the wbcore-publish format) owns the
   VFS instance ``ws-<toolkit>`` holding them under ``toolkits/<toolkit>/``, so
   ``wbx bundle ship`` packs it as a signed ``.wbundle``; beside it, a deterministic
   ``<toolkit>.tar.gz`` (``wbcore_runtime.store.archive.deterministic_targz``) and ``promotion.json`` (run,
   signer, sha256). Other sessions still do not see it.
2. **workspace → installed** (:func:`to_installed`): the archive goes through the install
   path (the installer, ``wbcore_runtime.contract.installs.service(runtime).install``, served by
   wbcore-install: staged, signature verified, landed with the lockfile as one change, or nothing
   lands), then it is built like any installed toolkit. Its caps are what the deployer grants a
   third-party signer (``wbx toolkit grant``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import InvalidArgs, NotFound

_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Promoted:
    toolkit: str
    stage: str  # "workspace" | "installed"
    path: Path
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"toolkit": self.toolkit, "stage": self.stage, "path": str(self.path), "sha256": self.sha256}


def _audit(runtime: Any, who: str, op: str, target: str, digest: str) -> None:
    runtime.dock.audit.record(
        principal=who, cap="agent", op=op, args_digest=digest, outcome="allowed", target=target
    )
    runtime.dock.audit.flush()


def _third_party(text: str) -> str:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.upper().startswith("#+TRUST:"):
            lines[i] = "#+TRUST: third-party"
            break
    else:
        at = next((i for i, ln in enumerate(lines) if ln.upper().startswith("#+TOOLKIT:")), 0)
        lines.insert(at + 1, "#+TRUST: third-party")
    return "\n".join(lines) + "\n"


def workspace_dir(runtime: Any, toolkit: str) -> Path:
    return Path(runtime.home) / "workspace" / toolkit


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _packed(folder: Path) -> dict[str, bytes]:
    """Every regular file of the signed folder, read through the containment walk (``openat``
    with ``O_NOFOLLOW``): the folder is ours, but its names came from the agent's VFS."""
    from wbcore_runtime.guard import paths

    out: dict[str, bytes] = {}
    for node in paths.walk(folder, label="the promoted toolkit"):
        if node.kind == "link":
            raise InvalidArgs(f"promote: {node.rel} is a link; a promoted toolkit holds only files")
        if node.kind == "file":
            with open(os.dup(node.fd), "rb") as fh:  # the walk closes node.fd itself
                out[node.rel] = fh.read()
    return out


def to_workspace(
    runtime: Any, run_id: str, toolkit: str, *, tenant: str = "dev", by: str = "deployer"
) -> Promoted:
    """Copy the session toolkit ``toolkit`` of run ``run_id`` out of its VFS, signed, into the workspace."""
    from wbcore_runtime.store.archive import deterministic_targz
    from wbcore_runtime.trust import identity, signing
    from wbcore_runtime.guard import unpack

    if not _ID.match(run_id) or not _ID.match(toolkit):
        raise InvalidArgs("promote: run id and toolkit id must match [A-Za-z0-9._-]{1,64}")
    state = _state(runtime, run_id, tenant)
    made = next((m for m in state.get("made") or () if m["id"] == toolkit), None)
    if made is None:
        have = ", ".join(m["id"] for m in state.get("made") or ()) or "(none)"
        raise NotFound(f"promote: run {run_id} made no toolkit {toolkit!r}; it made: {have}")
    agent_id = state["agent"]["id"]
    ctx = runtime.dock.context(
        principal=Principal(tenant, f"agent.{agent_id}"), caps={"vfs"}, instance=f"agent-{run_id}"
    )
    prefix = made["vfs_path"]
    files: dict[str, bytes] = {}
    for e in runtime.dock.call(ctx, "vfs", "list", {"prefix": prefix + "/"})["entries"]:
        rel = e["path"][len(prefix) + 1:]
        files[rel] = bytes(runtime.dock.call(ctx, "vfs", "read", {"path": e["path"]})["data"])
    files["manifest.org"] = _third_party(files["manifest.org"].decode("utf-8")).encode()
    ident = identity.load(runtime.home, runtime.env)
    with tempfile.TemporaryDirectory(prefix="wb-promote-") as tmp:
        folder = Path(tmp) / toolkit
        for rel, data in files.items():
            rel = unpack.safe_name(rel, f"agent {agent_id}'s toolkit {toolkit}")  # no '..', no absolute path
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        (folder / "skills").mkdir(exist_ok=True)
        signing.sign(folder, ident)
        packed = _packed(folder)
    data = deterministic_targz(toolkit, packed)
    sha = hashlib.sha256(data).hexdigest()
    out = workspace_dir(runtime, toolkit)
    out.mkdir(parents=True, exist_ok=True)
    # the workspace's VFS: exactly the signed files, under toolkits/<id>/
    ws_ctx = runtime.dock.context(principal=Principal(tenant, "agent-promote"), caps={"vfs"},
                                  instance=f"ws-{toolkit}")
    for e in runtime.dock.call(ws_ctx, "vfs", "list", {"prefix": ""})["entries"]:
        runtime.dock.call(ws_ctx, "vfs", "delete", {"path": e["path"]})
    for rel, blob in packed.items():
        runtime.dock.call(ws_ctx, "vfs", "write", {"path": f"toolkits/{toolkit}/{rel}", "data": blob})
    _write(
        out / "workspace.org",
        (
            f"#+WORKSPACE: {toolkit}\n#+TITLE: {toolkit}, made by agent {agent_id} in run "
            f"{run_id}\n#+VFS_INSTANCE: ws-{toolkit}\n#+VOLUMES: workspace\n"
        ).encode(),
    )
    archive = out / f"{toolkit}.tar.gz"
    _write(archive, data)
    _write(
        out / "promotion.json",
        json.dumps(
            {
                "toolkit": toolkit, "sha256": sha, "run": run_id, "signer": ident.did, "by": by,
                "archive": archive.name,
            },
            indent=1,
        ).encode(),
    )
    _audit(runtime, by, "promote-workspace", f"session:{run_id}:{toolkit} -> {archive.name}", sha)
    return Promoted(toolkit, "workspace", archive, sha)


def to_installed(runtime: Any, toolkit: str, *, by: str = "deployer", build: bool = True) -> Promoted:
    """Install the workspace copy of ``toolkit`` through verify-then-land, then build it."""
    from wbcore_runtime.contract import installs

    if not _ID.match(toolkit):
        raise InvalidArgs("promote: toolkit id must match [A-Za-z0-9._-]{1,64}")
    meta_path = workspace_dir(runtime, toolkit) / "promotion.json"
    if not meta_path.is_file():
        raise NotFound(f"promote: {toolkit} is not in the workspace; promote it from its session first")
    meta = json.loads(meta_path.read_text())
    archive = workspace_dir(runtime, toolkit) / f"{toolkit}.tar.gz"
    done = installs.service(runtime).install(
        Path(runtime.home), str(archive), sha256=meta["sha256"], force=True, env=runtime.env
    )
    runtime.discover(refresh=True)
    if build:
        from wbcore_runtime.build import builder

        builder.build(runtime, toolkit)
    _audit(runtime, by, "promote-installed", f"workspace:{toolkit} -> {done[0].path}", meta["sha256"])
    return Promoted(toolkit, "installed", done[0].path, meta["sha256"])


def _state(runtime: Any, run_id: str, tenant: str) -> dict[str, Any]:
    """A run's saved state, found by scanning the agent VFS instance ``agent-<run id>``."""
    from wbcore_agent.loop import STATE_PATH, STATE_VOLUME

    ctx = runtime.dock.context(principal=Principal(tenant, "agent"), caps={"vfs"}, instance=f"agent-{run_id}")
    try:
        got = runtime.dock.call(ctx, "vfs", "read", {"path": STATE_PATH, "volume": STATE_VOLUME})
    except NotFound:
        raise NotFound(f"promote: run {run_id!r} has no saved state") from None
    return json.loads(bytes(got["data"]))
