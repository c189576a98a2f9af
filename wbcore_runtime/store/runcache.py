"""``wbx run``'s resolution kept in the home, with the identity of everything it was decided from.

A call is resolved by :func:`wbcore_runtime.dispatch.dispatcher.resolve` (provenance, trust, effective caps,
tier, runner: each decided by its one function). A new process has to resolve again, and
that costs more than running a small command: the registry, discovery, the manifest
parser, the consent store and the plugins all load to reach the same answer. So after
``wbx run`` resolves a command, :func:`remember` keeps the resolution in
``$WB_HOME/cache/resolved/<kind>.<name>.json`` beside a *stamp* of its inputs, and the next
``wbx run`` of that name (:func:`recall`) uses it only when a freshly taken stamp is equal:

- ``generation``: the home's change counter (``wbcore_runtime.store.generation``), as read *before* the
  resolution was made. Every registry write (build, rebuild, removal, rename), every
  consent grant or revoke and every install bumps it: the registry's own lookup cache is
  keyed by it in the same way;
- ``roots``: the search path as :func:`wbcore_runtime.toolkit.discovery.roots` computes it now, and for
  every root the identity (inode, mode, mtime, ctime) of each entry and of its
  ``manifest.org``: a toolkit added, removed, renamed or re-declared anywhere on the path
  (another root claiming the id included) changes it;
- ``toolkit``: :func:`wbcore_runtime.trust.verdict.folder_state` of the toolkit folder (every file's inode,
  size, mtime and ctime: ctime cannot be set back), the fingerprint the content-digest
  cache already trusts: the manifest (trust, caps, profile, pin) and every file the digest
  covers are as they were;
- ``consent``: the identity of the grants file (besides the counter);
- ``plugins``: the plugin index the shapes, tiers and runner came from
  (``wbcore_runtime.plugins.index``: installed distributions and plugin sources);
- ``code``: the identity of the core modules that make the decisions, so an edited
  policy in an editable install re-resolves.

A stamp that differs in anything means the full resolution runs again (and refuses, with
its own message, what may not run); nothing here decides whether a call may run. What is
never kept: third-party toolkits (their signature is verified by every process; it may
rest on a did:web document), built-ins (installed and version-checked by the resolution),
an explicit ``--tier``, any tier but ``instance``, a runtime whose plugins were selected,
and any stamp with a file changed in the last :data:`RACY_SECONDS` (it could change again
within the same timestamp tick, unseen). The artifact itself is checked by the runner on
every call, on both paths (``ArtifactStore``: digest and file identity).

The kept file is trusted as the rest of the home is (the registry, the grants, the digest
cache beside it): whoever can write the home can already grant caps and register commands.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

FORMAT = 1
FOLDER = "cache/resolved"
#: A stamp with a file changed this recently is not kept (as ``wbcore_runtime.trust.verdict`` does for digests).
RACY_SECONDS = 2.0
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
#: The core modules whose code decides a resolution (their identity is part of the stamp).
_DECIDERS = ("dispatch/dispatcher", "trust/policy", "trust/consent", "trust/verdict", "toolkit/discovery",
             "store/home", "store/registry", "guard/paths", "toolkit/manifest", "toolkit/manifest_cache",
             "toolkit/loaded", "plugins/index", "store/runcache", "guard/preopen", "contract/calls",
             "store/generation", "plugins/installed", "runtime")
MANIFEST = "manifest.org"


def _file(home: Path, kind: str, name: str) -> Path | None:
    if kind not in ("command",) or not _NAME.match(name):
        return None
    return Path(home) / FOLDER / f"{kind}.{name}.json"


def _ident(path: str, follow: bool = False) -> list[int] | None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _roots_state(roots: list[Path]) -> list[Any]:
    out: list[Any] = []
    for root in roots:
        shown = str(root)
        try:
            with os.scandir(shown) as it:
                names = sorted(e.name for e in it)
        except OSError:
            out.append([shown, None])
            continue
        entries = []
        for name in names:
            p = os.path.join(shown, name)
            m = os.path.join(p, MANIFEST)
            entries.append([name, _ident(p), _ident(m), _ident(m, follow=True)])
        out.append([shown, os.path.realpath(shown), _ident(shown, follow=True), entries])
    return out


def _code_state() -> list[Any]:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # wbcore_runtime/
    return [[name, _ident(os.path.join(here, f"{name}.py"), follow=True)] for name in _DECIDERS]


def _newest(value: Any) -> int:
    """The newest mtime/ctime in a stamp. Both kinds of file record in it keep mtime and
    ctime at positions 3 and 4: an identity ``[ino, mode, size, mtime, ctime]`` and a
    :func:`wbcore_runtime.trust.verdict.folder_state` entry ``[path, ino, size, mtime, ctime]``."""
    if isinstance(value, list):
        if len(value) == 5 and isinstance(value[3], int) and isinstance(value[4], int):
            return max(value[3], value[4])
        return max((_newest(v) for v in value), default=0)
    if isinstance(value, dict):
        return max((_newest(v) for v in value.values()), default=0)
    return 0


def stamp(runtime: Any, toolkit_dir: str) -> dict[str, Any] | None:
    """The identity of a resolution's inputs now (``None``: the plugins are not indexed)."""
    from wbcore_runtime.trust import verdict as trust

    index = runtime.plugin_index
    if index is None:
        return None
    return {
        "roots": _roots_state(runtime.roots),
        "toolkit": [list(e) for e in trust.folder_state(Path(toolkit_dir))],
        "consent": _ident(str(Path(runtime.home) / "consent.json")),
        "plugins": index.ident,
        "code": _code_state(),
    }


def recall(runtime: Any, kind: str, name: str) -> bool:
    """Hand dispatch the kept resolution of ``name`` if every input is as it was; ``True``
    when it did (the call that follows uses it), ``False``: resolve as usual."""
    if not getattr(runtime, "indexed_plugins", False):
        return False
    path = _file(runtime.home, kind, name)
    if path is None:
        return False
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    gen = runtime.registry.generation.value()  # before the stamp: a change after it shows next time
    try:
        if data.get("format") != FORMAT or data.get("generation") != gen or data.get("kind") != kind \
                or data.get("name") != name:
            return False
        res = data["resolved"]
        now = stamp(runtime, res["entry"]["options"]["provenance"]["dir"])
        if now is None or now != data["stamp"]:
            return False
        resolved = _rebuild(runtime, kind, name, res)
    except (KeyError, TypeError, ValueError):
        return False
    from wbcore_runtime.dispatch import dispatcher as dispatch

    dispatch.adopt(runtime, resolved, gen)
    return True


def _rebuild(runtime: Any, kind: str, name: str, res: dict[str, Any]) -> Any:
    from wbcore_runtime.dispatch import dispatcher as dispatch
    from wbcore_runtime.trust import policy
    from wbcore_runtime.store.registry import Entry

    e = res["entry"]
    entry = Entry(kind=e["kind"], name=e["name"], sha256=e["sha256"], shape=e["shape"], toolkit=e["toolkit"],
                  arg_mode=e["arg_mode"], profile=e["profile"], builtin=bool(e["builtin"]), options=e["options"])
    tier = dispatch.TierChoice(res["tier"][0], res["tier"][1], tuple(tuple(c) for c in res["tier"][2]))
    return dispatch.Resolved(
        kind=kind, name=name, entry=entry, sha256=entry.sha256, artifact=runtime.artifacts.path(entry.sha256),
        toolkit=entry.toolkit, trust=res["trust"], signer=res["signer"], profile=policy.profile(res["profile"]),
        caps=frozenset(res["caps"]), allowed_hosts=tuple(res["hosts"]), tier=tier,
        target=dispatch.target_for(runtime, entry, tier.name), home=runtime.home,
    )


def remember(runtime: Any, resolved: Any, generation: int) -> bool:
    """Keep ``resolved`` (made by :func:`wbcore_runtime.dispatch.dispatcher.resolve` after reading the change
    counter as ``generation``) for the next ``wbx run``; ``False`` when it may not be kept."""
    entry = resolved.entry
    path = _file(runtime.home, resolved.kind, resolved.name)
    prov = entry.options.get("provenance") if entry.options else None
    if (path is None or not getattr(runtime, "indexed_plugins", False) or entry.builtin or entry.toolkit is None
            or resolved.trust not in ("first-party",) or resolved.tier.name != "instance"
            or not isinstance(prov, dict) or not isinstance(prov.get("dir"), str)):
        return False
    now = stamp(runtime, prov["dir"])
    if now is None or time.time_ns() - _newest(now) < RACY_SECONDS * 1e9:
        return False
    body = {
        "format": FORMAT, "kind": resolved.kind, "name": resolved.name, "generation": generation, "stamp": now,
        "resolved": {
            "entry": entry.as_dict(), "trust": resolved.trust, "signer": resolved.signer,
            "profile": resolved.profile.name, "caps": sorted(resolved.caps), "hosts": list(resolved.allowed_hosts),
            "tier": [resolved.tier.name, resolved.tier.reason, [list(c) for c in resolved.tier.considered]],
        },
    }
    from wbcore_runtime.store.artifacts import atomic_write

    try:
        atomic_write(path, json.dumps(body).encode(), tmp_dir=path.parent.parent)
    except OSError:  # a read-only home: every run resolves in full
        return False
    return True


def forget(home: Path, kind: str, name: str) -> None:
    """Drop the kept resolution of ``name`` (tests; never needed for correctness)."""
    path = _file(home, kind, name)
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
