"""``wbx run``'s resolution kept in the home, with the identity of everything it was decided from.

A call is resolved by :func:`wbcore_runtime.dispatch.resolve.resolve` (provenance, trust, effective caps,
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
- ``roots``: the search path as :func:`wbcore_runtime.toolkit.roots.roots` computes it now, and for
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
rest on a did:web document), an explicit ``--tier``, any tier but ``instance``, a runtime
whose plugins were selected, and any stamp with a file changed in the last
:data:`RACY_SECONDS` (it could change again within the same timestamp tick, unseen).

A built-in (``upper``, ``jq``) is kept too: the full resolution installs it and checks its
version against the plugin that serves it, so its stamp is that plugin's instead of a
toolkit's: ``plugins`` (an install or upgrade, an edited ``.py`` file) and ``builtin``, the
:func:`wbcore_runtime.trust.verdict.folder_state` of the package that serves it (an edited ``.wat`` or
C source of an editable plugin), with no ``roots`` or ``toolkit`` (a reserved name is never
a toolkit's). A compiler outside the Python distributions (a system clang) changing under a
built-in is seen at the next full resolution only; the artifact it runs is still the one the
registry names, checked by digest. The artifact itself is checked by the runner on
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

import wbcore_runtime
from wbcore_runtime.trust import verdict as trust
from wbcore_runtime.dispatch import resolve as resolution, tiers
from wbcore_runtime.trust import policy
from wbcore_runtime.store.registry import Entry
from wbcore_runtime.store.artifacts import atomic_write

FORMAT = 1
FOLDER = "cache/resolved"
#: A stamp with a file changed this recently is not kept (as ``wbcore_runtime.trust.verdict`` does
#: for digests).
RACY_SECONDS = 2.0
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
#: The core modules whose code decides a resolution (their identity is part of the stamp).
_DECIDERS = ("dispatch/resolve", "dispatch/tiers", "trust/policy", "trust/consent", "trust/verdict",
             "toolkit/discovery", "toolkit/roots", "store/home", "store/registry", "guard/paths",
             "toolkit/manifest", "toolkit/manifest_cache", "toolkit/loaded", "plugins/index",
             "guard/preopen", "contract/calls", "store/generation", "plugins/installed", "runtime")
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
    here = os.path.dirname(os.path.abspath(wbcore_runtime.__file__))  # wbcore_runtime/
    # This module's own code decides what is kept too (it lives in wbcore-cli, beside the CLI).
    return ([[name, _ident(os.path.join(here, f"{name}.py"), follow=True)] for name in _DECIDERS]
            + [["wbcore_cli/runcache", _ident(os.path.abspath(__file__), follow=True)]])


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


def _package_state(folder: str) -> list[Any]:
    """:func:`wbcore_runtime.trust.verdict.folder_state` of a plugin's package, without ``__pycache__``
    (byte-code written by an import is not a change of what serves a built-in)."""
    return [list(e) for e in trust.folder_state(Path(folder)) if "__pycache__" not in e[0]]


def stamp(runtime: Any, toolkit_dir: str | None, builtin_dir: str | None = None) -> dict[str, Any] | None:
    """The identity of a resolution's inputs now (``None``: the plugins are not indexed):
    of a toolkit's command (``toolkit_dir``) or of a built-in (``builtin_dir``: the package
    of the plugin that serves it)."""
    index = runtime.plugin_index
    if index is None:
        return None
    out: dict[str, Any] = {
        "consent": _ident(str(Path(runtime.home) / "consent.json")),
        "plugins": index.ident,
        "code": _code_state(),
    }
    if toolkit_dir is not None:
        out["roots"] = _roots_state(runtime.roots)
        out["toolkit"] = [list(e) for e in trust.folder_state(Path(toolkit_dir))]
    if builtin_dir is not None:
        out["builtin"] = _package_state(builtin_dir)
    return out


def _stamp_of(runtime: Any, kept: dict[str, Any]) -> dict[str, Any] | None:
    """The stamp now of the inputs a kept resolution names (a toolkit's folder or a built-in's package)."""
    if kept["entry"]["builtin"]:
        return stamp(runtime, None, str(kept["builtin_dir"]))
    return stamp(runtime, kept["entry"]["options"]["provenance"]["dir"])


def recall(runtime: Any, kind: str, name: str) -> Any:
    """The kept resolution of ``name`` if every input is as it was
    (``wbcore_runtime.dispatch.resolve.Resolved``, adopted by the resolution cache, so later calls in
    this process re-check it as any other), else ``None``: resolve as usual."""
    if not getattr(runtime, "indexed_plugins", False):
        return None
    path = _file(runtime.home, kind, name)
    if path is None:
        return None
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    gen = runtime.registry.generation.value()  # before the stamp: a change after it shows next time
    try:
        if data.get("format") != FORMAT or data.get("generation") != gen or data.get("kind") != kind \
                or data.get("name") != name:
            return None
        res = data["resolved"]
        now = _stamp_of(runtime, res)
        if now is None or now != data["stamp"]:
            return None
        resolved = _rebuild(runtime, kind, name, res)
    except (KeyError, TypeError, ValueError):
        return None

    resolution.adopt(runtime, resolved, gen)
    return resolved


def resolved(runtime: Any, kind: str, name: str, tier: str | None = None) -> Any:
    """What ``wbx run`` calls, resolved once: the kept resolution if nothing it was made from
    changed (:func:`recall`), else the full one, kept for the next run (:func:`remember`)."""
    got = recall(runtime, kind, name) if tier is None else None
    if got is None:
        got = resolution.resolve(runtime, kind, name, tier=tier)  # unknown/unavailable: before stdin is read
        gen = resolution.resolved_generation(runtime, kind, name) if tier is None else None
        if gen is not None:
            remember(runtime, got, gen)
    return got


def _rebuild(runtime: Any, kind: str, name: str, res: dict[str, Any]) -> Any:
    e = res["entry"]
    entry = Entry(kind=e["kind"], name=e["name"], sha256=e["sha256"], shape=e["shape"], toolkit=e["toolkit"],
                  arg_mode=e["arg_mode"], profile=e["profile"], builtin=bool(e["builtin"]),
                  options=e["options"])
    tier = tiers.TierChoice(res["tier"][0], res["tier"][1], tuple(tuple(c) for c in res["tier"][2]))
    return resolution.Resolved(
        kind=kind, name=name, entry=entry, sha256=entry.sha256, artifact=runtime.artifacts.path(entry.sha256),
        toolkit=entry.toolkit, trust=res["trust"], signer=res["signer"],
        profile=policy.profile(res["profile"]),
        caps=frozenset(res["caps"]), allowed_hosts=tuple(res["hosts"]), tier=tier,
        target=tiers.target_for(runtime, entry, tier.name), home=runtime.home,
    )


def remember(runtime: Any, resolved: Any, generation: int) -> bool:
    """Keep ``resolved`` (made by :func:`wbcore_runtime.dispatch.resolve.resolve` after reading the change
    counter as ``generation``) for the next ``wbx run``; ``False`` when it may not be kept."""
    entry = resolved.entry
    path = _file(runtime.home, resolved.kind, resolved.name)
    if path is None or not getattr(runtime, "indexed_plugins", False) or resolved.tier.name != "instance":
        return False
    extra: dict[str, Any] = {}
    if entry.builtin:
        builtin_dir = _builtin_package(runtime, entry.name) if resolved.trust == "built-in" else None
        if builtin_dir is None:
            return False
        now = stamp(runtime, None, builtin_dir)
        extra["builtin_dir"] = builtin_dir
    else:
        prov = entry.options.get("provenance") if entry.options else None
        if (entry.toolkit is None or resolved.trust not in ("first-party",) or not isinstance(prov, dict)
                or not isinstance(prov.get("dir"), str)):
            return False
        now = stamp(runtime, prov["dir"])
    if now is None or time.time_ns() - _newest(now) < RACY_SECONDS * 1e9:
        return False
    body = {
        "format": FORMAT, "kind": resolved.kind, "name": resolved.name, "generation": generation,
        "stamp": now,
        "resolved": {
            "entry": entry.as_dict(), "trust": resolved.trust, "signer": resolved.signer,
            "profile": resolved.profile.name, "caps": sorted(resolved.caps),
            "hosts": list(resolved.allowed_hosts),
            "tier": [resolved.tier.name, resolved.tier.reason, [list(c) for c in resolved.tier.considered]],
            **extra,
        },
    }

    try:
        atomic_write(path, json.dumps(body).encode(), tmp_dir=path.parent.parent)
    except OSError:  # a read-only home: every run resolves in full
        return False
    return True


def _builtin_package(runtime: Any, name: str) -> str | None:
    """The folder of the package whose plugin serves built-in ``name`` (``None``: unknown).
    Asked only after a full resolution, which loaded the plugins to install the built-in."""
    import sys

    record = runtime.builtins.get(name) if name in runtime.builtins else None
    module = getattr(getattr(record, "wasm", None), "__module__", None)
    top = sys.modules.get(module.partition(".")[0]) if isinstance(module, str) else None
    origin = getattr(top, "__file__", None)
    if not origin or os.path.basename(origin) != "__init__.py":
        return None  # a single-module plugin: no package folder to fingerprint, never kept
    return os.path.dirname(os.path.abspath(origin))


def forget(home: Path, kind: str, name: str) -> None:
    """Drop the kept resolution of ``name`` (tests; never needed for correctness)."""
    path = _file(home, kind, name)
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
