"""Plugin loading: entry points scanned once per set of installed distributions and
cached in the home; pluggy carries the hooks.

The scan (``importlib.metadata``, every distribution's metadata: the largest part of
``wbx`` start-up) runs again only when a distribution is installed, upgraded or removed
(:func:`installed_key`); otherwise loading imports each plugin's module and nothing else.

Tolerant discovery, strict selection: with no selection every installed plugin is
loaded and one that fails to import is recorded (with its cause) and skipped; when an
embedder selects plugins by name, a selected plugin that fails is a hard error.
Nothing here is global: :func:`load` builds a fresh manager for each ``Runtime``.
"""

from __future__ import annotations

import functools
import logging
import traceback
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pluggy

from wbcore_runtime.contract import hookspecs
from wbcore_runtime.contract.records import RECORD_KINDS
from wbcore_runtime.contract.targets import load_target
from wbcore_runtime.contract.errors import NotFound, PluginError, unknown_name
from wbcore_runtime.plugins.index import Ref
from wbcore_runtime.store.artifacts import atomic_write
from wbcore_runtime.plugins.installed import RACY_SECONDS, installed_key  # noqa: F401 - re-exported: plugins.installed_key
from wbcore_runtime import __version__

log = logging.getLogger(__name__)

T = TypeVar("T")


#: (entry-point name, target) → (distribution, version), as the last scan recorded them.
_scanned_dists: dict[tuple[str, str], tuple[str, str]] = {}

#: The file under ``$WB_HOME`` that keeps the last entry-point scan (:func:`entry_points`).
ENTRY_POINT_CACHE = "cache/entry-points.json"


@functools.lru_cache(maxsize=1)
def _distributions_by_entry_point() -> dict[tuple[str, str], tuple[str, str]]:
    """(entry-point name, target) → (distribution, version) for our group.

    The scan :func:`entry_points` made (or read from its cache) already knows them; a
    full scan is paid only when someone asks where a plugin came from without one.
    """
    if _scanned_dists:
        return dict(_scanned_dists)
    return {(n, v): (d, ver) for n, v, d, ver in _scan()}


def _scan() -> list[tuple[str, str, str, str]]:
    """Every entry point of our group: (name, target, distribution, version), first wins."""
    from importlib.metadata import distributions

    found: list[tuple[str, str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == hookspecs.ENTRY_POINT_GROUP and (ep.name, ep.value) not in seen:
                seen.add((ep.name, ep.value))
                found.append((ep.name, ep.value, dist.metadata["Name"], dist.version))
    return found


def entry_points(cache_dir: Any = None) -> list[tuple[str, str, str, str]]:
    """The plugins' entry points, scanned once per set of installed distributions.

    With ``cache_dir`` (``$WB_HOME``), the scan is kept in :data:`ENTRY_POINT_CACHE` under
    :func:`installed_key`: a later process reads one small file instead of every
    distribution's metadata, and any install or removal changes the key and rescans. A
    cache that cannot be read or written is ignored (a read-only home still works).
    """
    import json
    from pathlib import Path

    key, racy = installed_key()
    path = Path(cache_dir) / ENTRY_POINT_CACHE if cache_dir is not None else None
    if path is not None:
        try:
            data = json.loads(path.read_bytes())
            if data.get("key") == key and data.get("group") == hookspecs.ENTRY_POINT_GROUP:
                found = [(str(a), str(b), str(c), str(d))
                         for a, b, c, d in (row for row in data["entry_points"] if len(row) == 4)]
                _remember(found)
                return found
        except (OSError, ValueError, TypeError, KeyError):
            pass
    found = _scan()
    _remember(found)
    if path is not None and not racy:
        body = {"key": key, "group": hookspecs.ENTRY_POINT_GROUP, "entry_points": found}
        try:
            atomic_write(path, json.dumps(body).encode(), tmp_dir=path.parent)
        except OSError:
            pass
    return found


def _remember(found: list[tuple[str, str, str, str]]) -> None:
    _scanned_dists.clear()
    _scanned_dists.update({(n, v): (d, ver) for n, v, d, ver in found})


@dataclass(slots=True)
class PluginInfo:
    """One plugin as ``wbx plugins`` shows it: where it came from, what it serves."""

    name: str
    target: str
    distribution: str | None = None
    version: str | None = None
    error: str | None = None
    serves: dict[str, list[str]] = field(default_factory=dict)
    in_process: bool = False
    #: What the core refused from a loaded plugin (a ``wbx`` command name it may not take).
    warnings: list[str] = field(default_factory=list)

    @property
    def loaded(self) -> bool:
        return self.error is None

    def _resolve_distribution(self) -> None:
        if self.distribution is None and not self.in_process:
            found = _distributions_by_entry_point().get((self.name, self.target))
            if found:
                self.distribution, self.version = found

    @property
    def origin(self) -> str:
        self._resolve_distribution()
        if self.distribution:
            return f"{self.distribution} {self.version or '?'}"
        if self.in_process:
            return f"{self.target} (in-process)"
        return f"{self.target} (no distribution found)"

    def as_dict(self) -> dict[str, Any]:
        self._resolve_distribution()
        return {
            "name": self.name,
            "target": self.target,
            "distribution": self.distribution,
            "version": self.version,
            "loaded": self.loaded,
            "error": self.error,
            "serves": self.serves,
            "warnings": self.warnings,
        }


#: The core's distribution: the project that serves ``wbcore_runtime`` (``wbx plugins`` names it first).
CORE_DISTRIBUTION = "wbcore-runtime"


def core_origin() -> str:
    """The installed core as ``distribution version`` (``wbx plugins``' first line), or what
    runs when the core is imported from a folder no distribution describes."""
    from importlib import metadata

    try:
        return f"{CORE_DISTRIBUTION} {metadata.version(CORE_DISTRIBUTION)}"
    except metadata.PackageNotFoundError:
        return f"wbcore_runtime {__version__} (no distribution found)"


def _cause(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def load(
    selected: Sequence[str | object] | None = None,
    *,
    cache_dir: Any = None,
) -> tuple[pluggy.PluginManager, list[PluginInfo]]:
    """Build a plugin manager. ``selected``: entry-point names and/or plugin objects.

    ``None`` loads every installed plugin (tolerant). Names are strict: an unknown name
    or a selected plugin that fails to import raises :class:`PluginError` with the cause.
    Objects (modules, class instances) are registered as they are: in-process plugins
    for embedders and tests. ``cache_dir`` (the home) keeps the entry-point scan
    between processes (:func:`entry_points`).
    """
    names = [s for s in (selected or []) if isinstance(s, str)]
    objects = [s for s in (selected or []) if not isinstance(s, str)]
    if selected is not None and not names:  # only in-process plugins: no entry point is read
        pm = new_manager()
        return pm, _register_objects(pm, objects, [])

    pm = new_manager()
    infos: list[PluginInfo] = []
    failures: dict[str, PluginInfo] = {}
    found = entry_points(cache_dir)
    if selected is None:
        chosen = found
    else:
        by_name: dict[str, tuple[str, str, str, str]] = {}
        for ep in found:
            by_name.setdefault(ep[0], ep)
        missing = [n for n in names if n not in by_name]
        if missing:
            installed = sorted(by_name)
            raise PluginError("; ".join(unknown_name("plugin", m, installed) for m in sorted(missing)))
        chosen = [by_name[n] for n in dict.fromkeys(names)]
    seen: set[str] = set()
    for name, target, dist, version in chosen:
        if name in seen:  # two distributions with one entry-point name: the first wins, as before
            continue
        seen.add(name)
        info = PluginInfo(name=name, target=target, distribution=dist, version=version)
        try:
            plugin = load_target(target)
        except Exception as exc:  # noqa: BLE001 - tolerant discovery: any import failure is recorded with its cause
            info.error = _cause(exc)
            failures[name] = info
            log.warning("plugin %s failed to load: %s", name, info.error)
            if selected is not None:  # strict selection: a chosen plugin must load
                raise PluginError(f"selected plugin {name!r} failed to load: {info.error}") from None
            continue
        problem = register_checked(pm, plugin, name)
        if problem:
            info.error = problem
            failures[name] = info
            log.warning("plugin %s refused: %s", name, problem)
            if selected is not None:
                raise PluginError(f"selected plugin {name!r} cannot be used: {problem}")
            continue
        infos.append(info)
    infos.extend(failures.values())
    return pm, _register_objects(pm, objects, infos)


def register_checked(pm: pluggy.PluginManager, plugin: object, name: str | None) -> str:
    """Register ``plugin`` and check every hook implementation against the specs
    (``check_pending``): a misspelled ``@hookimpl`` would otherwise never be called and
    the plugin would serve nothing, silently. A plugin that fails is unregistered again;
    the answer says what is wrong ("" when nothing is)."""
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        return f"a hook implementation does not match its spec: {exc}"
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        pm.unregister(plugin=plugin)
        known = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith(hookspecs.PROJECT + "_")))
        return f"{exc} (the hooks are: {known})"
    return ""


def lazy(target: str) -> Callable[..., Any]:
    """A function standing for ``target`` (``module:attr.attr``, as :func:`load_target`) that
    imports it at its first call: a plugin's entry module names its factories, checks and
    runners with it, so loading the plugin imports nothing heavy (a compiler, wasmtime).
    It is the plugin index's :class:`~wbcore_runtime.plugins.index.Ref`, so the index keeps
    the name and a ``wbx run`` imports the target alone."""
    return Ref(target)


def _register_objects(pm: pluggy.PluginManager, objects: Sequence[object],
                      infos: list[PluginInfo]) -> list[PluginInfo]:
    for obj in objects:
        if isinstance(obj, types.ModuleType):
            name = target = obj.__name__
        else:
            name = type(obj).__name__
            target = f"{type(obj).__module__}.{type(obj).__qualname__}"
        problem = register_checked(pm, obj, name)
        if problem:  # an in-process plugin is chosen by its embedder: strict
            raise PluginError(f"plugin {name!r} cannot be used: {problem}")
        infos.append(PluginInfo(name=name, target=target, in_process=True))
    return sorted(infos, key=lambda i: i.name)


def rescan() -> None:
    """Forget the distributions seen so far in this process.

    Every :func:`load` checks :func:`installed_key` anyway (a changed ``sys.path`` or a
    folder on it rescans); this also drops the distribution index ``wbx plugins`` uses.
    """
    _distributions_by_entry_point.cache_clear()
    _scanned_dists.clear()


class RecordRegistry(Generic[T]):
    """The records of one kind, by name, with the plugin that provided each.

    Two providers of one name make that name unusable (a :class:`PluginError` naming
    both distributions) instead of letting the last one win; other names still work.
    """

    def __init__(self, what: str, failures: Sequence[PluginInfo] = ()) -> None:
        self.what = what
        self._records: dict[str, T] = {}
        self._providers: dict[str, PluginInfo] = {}
        self._conflicts: dict[str, list[PluginInfo]] = {}
        self._failures = list(failures)

    def add(self, record: T, provider: PluginInfo) -> None:
        name = record.name  # type: ignore[attr-defined]
        if name in self._conflicts:
            self._conflicts[name].append(provider)
        elif name in self._records:
            self._conflicts[name] = [self._providers.pop(name), provider]
            del self._records[name]
        else:
            self._records[name] = record
            self._providers[name] = provider

    def get(self, name: str) -> T:
        if name in self._records:
            return self._records[name]
        if name in self._conflicts:
            both = " and ".join(p.origin for p in self._conflicts[name])
            raise PluginError(f"{self.what} {name!r} is provided twice: by {both}; uninstall one")
        message = unknown_name(self.what, name, self.names())
        broken = [f for f in self._failures if f.error]
        if broken:
            causes = "; ".join(f"{f.name} ({f.origin}): {f.error}" for f in broken)
            message += f"; plugins that failed to load and might serve it: {causes}"
        raise NotFound(message)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __iter__(self) -> Iterator[T]:
        return iter(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def names(self) -> list[str]:
        return sorted(self._records)

    def provider(self, name: str) -> PluginInfo:
        return self._providers[name]

    @property
    def conflicts(self) -> dict[str, list[PluginInfo]]:
        return dict(self._conflicts)


def collect_hook(pm: pluggy.PluginManager, hook_name: str, what: str,
                 infos: Sequence[PluginInfo]) -> RecordRegistry[Any]:
    """:func:`collect` of a registry hook, checked against the record type the hook yields
    (``contract.records.RECORD_KINDS``)."""
    return collect(pm, hook_name, RECORD_KINDS[hook_name], what, infos)


def collect(
    pm: pluggy.PluginManager,
    hook_name: str,
    record_type: type[T],
    what: str,
    infos: Sequence[PluginInfo],
) -> RecordRegistry[T]:
    """Call one registry hook plugin by plugin, so every record keeps its provider."""
    by_name = {i.name: i for i in infos}
    registry: RecordRegistry[T] = RecordRegistry(what, [i for i in infos if not i.loaded])
    caller = getattr(pm.hook, hook_name)
    for impl in caller.get_hookimpls():
        info = by_name.get(impl.plugin_name) or PluginInfo(impl.plugin_name, impl.plugin_name)
        try:
            records: Iterable[Any] = impl.function() or ()
            records = list(records)
        except Exception as exc:  # a broken provider is reported, never fatal to others
            info.error = f"{hook_name} raised {_cause(exc)}"
            log.warning("plugin %s: %s", info.name, info.error)
            continue
        for record in records:
            if not isinstance(record, record_type):
                raise PluginError(
                    f"plugin {info.name} ({info.origin}) yielded {type(record).__name__} "
                    f"from {hook_name}; expected {record_type.__name__}"
                )
            registry.add(record, info)
            served = info.serves.setdefault(what, [])
            if record.name not in served:  # type: ignore[attr-defined]
                served.append(record.name)  # type: ignore[attr-defined]
    return registry
