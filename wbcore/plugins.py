"""Plugin loading: stevedore finds entry points, pluggy carries the hooks.

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pluggy

from wbcore import hookspecs
from wbcore.errors import NotFound, PluginError, unknown_name

log = logging.getLogger(__name__)

T = TypeVar("T")


@functools.lru_cache(maxsize=1)
def _distributions_by_entry_point() -> dict[tuple[str, str], tuple[str, str]]:
    """(entry-point name, target) → (distribution, version) for our group.

    stevedore's entry-point cache (what keeps start-up fast) drops the distribution,
    so it is looked up here, only when someone asks where a plugin came from.
    """
    from importlib.metadata import distributions

    index: dict[tuple[str, str], tuple[str, str]] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == hookspecs.ENTRY_POINT_GROUP:
                index.setdefault((ep.name, ep.value), (dist.metadata["Name"], dist.version))
    return index


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


def _cause(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def new_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def load(
    selected: Sequence[str | object] | None = None,
) -> tuple[pluggy.PluginManager, list[PluginInfo]]:
    """Build a plugin manager. ``selected``: entry-point names and/or plugin objects.

    ``None`` loads every installed plugin (tolerant). Names are strict: an unknown name
    or a selected plugin that fails to import raises :class:`PluginError` with the cause.
    Objects (modules, class instances) are registered as they are: in-process plugins
    for embedders and tests.
    """
    # stevedore is imported here, not at module import, to keep `import wbcore` cheap.
    from stevedore import ExtensionManager, NamedExtensionManager

    pm = new_manager()
    infos: list[PluginInfo] = []
    failures: dict[str, PluginInfo] = {}

    def on_failure(_mgr: Any, entry_point: Any, exc: BaseException) -> None:
        info = _info_for(entry_point)
        info.error = _cause(exc)
        failures[info.name] = info
        log.warning("plugin %s failed to load: %s", info.name, info.error)

    names = [s for s in (selected or []) if isinstance(s, str)]
    objects = [s for s in (selected or []) if not isinstance(s, str)]

    if selected is None:
        mgr: Any = ExtensionManager(
            hookspecs.ENTRY_POINT_GROUP, on_load_failure_callback=on_failure
        )
    elif names:
        missing: list[str] = []
        mgr = NamedExtensionManager(
            hookspecs.ENTRY_POINT_GROUP,
            names=names,
            name_order=True,
            on_load_failure_callback=on_failure,
            on_missing_entrypoints_callback=lambda miss: missing.extend(miss),
        )
        missing = [m for m in missing if m not in failures]
        for name in names:
            if name in failures:
                raise PluginError(f"selected plugin {name!r} failed to load: {failures[name].error}")
        if missing:
            installed = _installed_names()
            raise PluginError(
                "; ".join(unknown_name("plugin", m, installed) for m in sorted(missing))
            )
    else:
        mgr = None

    if mgr is not None:
        for ext in mgr.extensions:
            info = _info_for(ext.entry_point)
            pm.register(ext.plugin, name=info.name)
            infos.append(info)
    infos.extend(failures.values())

    for obj in objects:
        if isinstance(obj, types.ModuleType):
            name = target = obj.__name__
        else:
            name = type(obj).__name__
            target = f"{type(obj).__module__}.{type(obj).__qualname__}"
        pm.register(obj, name=name)
        infos.append(PluginInfo(name=name, target=target, in_process=True))
    return pm, sorted(infos, key=lambda i: i.name)


def rescan() -> None:
    """Forget the entry points seen so far in this process.

    stevedore keeps one entry-point list per group for the life of the process (it is
    what makes repeated loading cheap). A process that installs a plugin and wants to
    load it without restarting, such as a test suite, calls this first.
    """
    from stevedore import ExtensionManager

    ExtensionManager.ENTRY_POINT_CACHE.pop(hookspecs.ENTRY_POINT_GROUP, None)
    _distributions_by_entry_point.cache_clear()


def _info_for(entry_point: Any) -> PluginInfo:
    dist = getattr(entry_point, "dist", None)
    return PluginInfo(
        name=entry_point.name,
        target=entry_point.value,
        distribution=getattr(dist, "name", None) if dist else None,
        version=getattr(dist, "version", None) if dist else None,
    )


def _installed_names() -> list[str]:
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=hookspecs.ENTRY_POINT_GROUP)})


class Registry(Generic[T]):
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


def collect(
    pm: pluggy.PluginManager,
    hook_name: str,
    record_type: type[T],
    what: str,
    infos: Sequence[PluginInfo],
) -> Registry[T]:
    """Call one registry hook plugin by plugin, so every record keeps its provider."""
    by_name = {i.name: i for i in infos}
    registry: Registry[T] = Registry(what, [i for i in infos if not i.loaded])
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
