"""What a call needs of the plugins, without importing them: the plugin index in the home.

Running one registered command asks the plugins three things: which exec shapes, isolation
tiers and build lanes exist (``wbcore_runtime.dispatch.resolve`` reads their static fields: a shape's
default tier, a tier's rung, kinds and ``bridges_caps``) and what builds the object that
runs the call (a shape's or lane's ``runner``, a tier's ``factory``), plus whether any
plugin traces or watches calls (``wbcore_tracer``, ``wbcore_call_started/finished``).
Importing and registering every plugin to learn that is most of a ``wbx run``'s start-up
(docs/benchmarks.md), so the answers are kept in ``$WB_HOME/cache/plugin-index.json``:

- written after a full plugin load in which every plugin loaded and no two providers
  claimed one name (a partial or conflicting set is never indexed: it loads fully again);
- keyed by the installed distributions (:func:`wbcore_runtime.plugins.installed.installed_key`) and by the
  identity (inode, size, mtime, ctime) of every ``.py`` file of every plugin's package, so
  an install, an upgrade or an edit of an editable plugin re-indexes;
- static fields kept as they are; callables kept as import references (``module:qualname``),
  imported on first call. A callable that cannot be named that way (a closure, a bound
  method) is kept as "ask the real record": calling it loads the plugins and calls the
  record's own field. A static field the index cannot keep makes it refuse to be written.

Nothing here decides anything. Dispatch still makes every decision with the same functions
(provenance, trust, consent, :func:`wbcore_runtime.dispatch.tiers.choose_tier`); this only hands them the
same records without importing the plugins that made them. A name the index does not hold
is looked up in the real registry (the plugins load), so a miss behaves exactly as before.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wbcore_runtime.contract.targets import load_target
from wbcore_runtime.store.digest import sha256
from wbcore_runtime.plugins.installed import installed_key
from wbcore_runtime.store.artifacts import atomic_write

FORMAT = 2
INDEX_FILE = "cache/plugin-index.json"
#: The registries dispatch reads, with the record fields it may call.
REGISTRIES = {
    "shapes": ("runner", "verify"),
    "tiers": ("factory", "available"),
    "lanes": ("runner", "factory", "available", "check_flags"),
    "guest_runners": ("factory", "available"),  # a js command's call asks for its guest runner
}
#: Hooks a call may run: the index keeps the references of their implementations, in call order.
HOOKS = ("wbcore_tracer", "wbcore_call_started", "wbcore_call_finished")


class Unindexable(Exception):
    """The loaded plugin set cannot be described by references (a closure, a failure)."""


class Ref:
    """A callable named by ``module:qualname``, imported on its first call: the one lazy
    factory (a plugin's entry module names its factories with
    :func:`wbcore_runtime.plugins.manager.lazy`, which is this, so the index keeps the name)."""

    __slots__ = ("_fn", "ref")

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self._fn: Any = None

    def resolve(self) -> Any:
        if self._fn is None:
            self._fn = load_target(self.ref)
        return self._fn

    def __call__(self, *args: Any, **kw: Any) -> Any:
        return self.resolve()(*args, **kw)

    @property
    def __name__(self) -> str:  # noqa: PLW3201 - read as a function's name (logs, ``wbx plugins``)
        return self.ref.rpartition(":")[2].rpartition(".")[2] or self.ref

    def __repr__(self) -> str:
        return f"Ref({self.ref!r})"


class Deferred:
    """A record's callable the index could not name: calling it loads the plugins and
    calls the real record's field."""

    __slots__ = ("field", "name", "runtime", "which")

    def __init__(self, runtime: Any, which: str, name: str, field: str) -> None:
        self.runtime, self.which, self.name, self.field = runtime, which, name, field

    def __call__(self, *args: Any, **kw: Any) -> Any:
        record = getattr(self.runtime, self.which).get(self.name)
        return getattr(record, self.field)(*args, **kw)


class Record:
    """A registry record as the index holds it: the same attribute names and values,
    its callables as :class:`Ref` s."""

    name: str  # every registry record has one (its key); the rest are read as attributes

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"Record({self.__dict__.get('name')!r})"


class View:
    """One registry (shapes, tiers or lanes) read from the index; a name it does not hold
    is asked of the runtime's real registry (which loads the plugins), so an unknown name
    fails with the usual message."""

    def __init__(self, runtime: Any, which: str, records: list[Record]) -> None:
        self._runtime = runtime
        self._which = which
        self._records = {r.name: r for r in records}

    def get(self, name: str) -> Any:
        rec = self._records.get(name)
        if rec is None:
            return getattr(self._runtime, self._which).get(name)
        return rec

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def __iter__(self) -> Iterator[Any]:
        return iter(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    def names(self) -> list[str]:
        return sorted(self._records)


class Index:
    """The plugin index of one runtime: registry views and the call hooks' implementations."""

    def __init__(self, runtime: Any, data: dict[str, Any], ident: str = "") -> None:
        self.runtime = runtime
        self._data = data
        #: The index file's content digest: what a kept resolution was made with
        #: (wbcore_cli.runcache).
        self.ident = ident
        self._views: dict[str, View] = {}
        self.hooks: dict[str, list[Ref]] = {h: [Ref(r) for r in data["hooks"].get(h, [])] for h in HOOKS}

    def registry(self, which: str) -> View:
        view = self._views.get(which)
        if view is None:
            records = []
            for fields in self._data["registries"][which]:
                name = fields["name"]
                records.append(Record({k: Deferred(self.runtime, which, name, k) if v == {"deferred": True}
                                       else _decode(v)
                                       for k, v in fields.items()}))
            view = self._views[which] = View(self.runtime, which, records)
        return view

    def call_first(self, hook: str, **kw: Any) -> Any:
        """A ``firstresult`` hook, as pluggy calls it: implementations in call order, the
        first result that is not ``None``."""
        for impl in self.hooks[hook]:
            result = impl(**kw)
            if result is not None:
                return result
        return None

    @property
    def watches_calls(self) -> bool:
        return bool(self.hooks["wbcore_call_started"] or self.hooks["wbcore_call_finished"])


def _reference(fn: Any) -> str:
    if isinstance(fn, Ref):  # a lazy factory: named already, and kept unimported
        return fn.ref
    module, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qual or "<" in qual:
        raise Unindexable(f"{fn!r} has no importable name")
    ref = f"{module}:{qual}"
    try:
        same = load_target(ref) is fn
    except Exception:  # noqa: BLE001 - any failure to name it: kept as "ask the real record"
        same = False
    if not same:
        raise Unindexable(f"{ref} does not name {fn!r}")
    return ref


def _encode(value: Any, callable_field: bool) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if callable_field:
        try:
            return {"ref": _reference(value)}
        except Unindexable:
            return {"deferred": True}
    if isinstance(value, frozenset):
        return {"frozenset": sorted(value)}
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return {"tuple": list(value)}
    raise Unindexable(f"cannot keep {type(value).__name__} {value!r}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "ref" in value:
            return Ref(value["ref"])
        if "frozenset" in value:
            return frozenset(value["frozenset"])
        if "tuple" in value:
            return tuple(value["tuple"])
    return value


def _package_files(module_names: set[str]) -> list[str]:
    """Every ``.py`` file of the top-level packages ``module_names`` belong to."""
    out: set[str] = set()
    for top in sorted({m.partition(".")[0] for m in module_names}):
        mod = sys.modules.get(top)
        origin = getattr(mod, "__file__", None)
        if not origin:
            continue
        if os.path.basename(origin) != "__init__.py":
            out.add(origin)
            continue
        for dirpath, dirnames, filenames in os.walk(os.path.dirname(origin)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            out.update(os.path.join(dirpath, f) for f in filenames if f.endswith(".py"))
    return sorted(out)


def _files_state(files: list[str]) -> list[list[Any]]:
    state = []
    for f in files:
        try:
            st = os.stat(f)
            state.append([f, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
        except OSError:
            state.append([f, -1, -1, -1, -1])
    return state


def load(runtime: Any) -> Index | None:
    """The runtime's index if the file matches the installed plugin set now, else ``None``."""
    try:
        raw = (Path(runtime.home) / INDEX_FILE).read_bytes()
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            return None
        key, racy = installed_key()
        if racy or data.get("key") != key:
            return None
        files = data["files"]
        if _files_state([f[0] for f in files]) != files:
            return None
        return Index(runtime, data, sha256(raw).hexdigest())
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def write(runtime: Any) -> bool:
    """Index the runtime's loaded plugins (every plugin loaded, no conflicts); ``False``
    when they cannot be indexed or the home cannot be written."""
    key, racy = installed_key()
    if racy or any(not info.loaded for info in runtime.plugin_infos):
        return False
    modules: set[str] = set()
    try:
        registries: dict[str, list[dict[str, Any]]] = {}
        for which, callables in REGISTRIES.items():
            reg = getattr(runtime, which)
            if reg.conflicts or any(not i.loaded for i in runtime.plugin_infos):
                return False
            rows = []
            for record in reg:
                fields = {}
                # a base's slots too (records.Service); not dataclasses.fields: a run must not import it
                for slot in (s for c in reversed(type(record).__mro__) for s in getattr(c, "__slots__", ())):
                    fields[slot] = _encode(getattr(record, slot), slot in callables)
                    if isinstance(fields[slot], dict) and "ref" in fields[slot]:
                        modules.add(fields[slot]["ref"].partition(":")[0])
                rows.append(fields)
            registries[which] = rows
        hooks: dict[str, list[str]] = {}
        for hook in HOOKS:
            # pluggy calls implementations in the reverse of get_hookimpls()
            impls = list(reversed(getattr(runtime.pm.hook, hook).get_hookimpls()))
            hooks[hook] = [_reference(impl.function) for impl in impls]  # a bound method: not indexed
            modules.update(r.partition(":")[0] for r in hooks[hook])
    except Unindexable:
        return False
    modules.update(getattr(p, "__name__", None) or type(p).__module__ for p in runtime.pm.get_plugins())
    body = {"format": FORMAT, "key": key, "files": _files_state(_package_files(modules)),
            "registries": registries, "hooks": hooks}
    path = Path(runtime.home) / INDEX_FILE
    try:
        atomic_write(path, json.dumps(body).encode(), tmp_dir=path.parent)
    except OSError:
        return False
    return True
