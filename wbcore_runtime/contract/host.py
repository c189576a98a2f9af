"""What a module or a plugin may ask of the runtime: :class:`RuntimeServices`.

The core's modules and the hook specs take the runtime as this Protocol, not as the
``wbcore_runtime.runtime.Runtime`` class: the facade imports nearly every module (inside its
methods, to keep ``wbx run`` light), so a module naming the class, even only under
``TYPE_CHECKING``, closes an import cycle. ``Runtime`` satisfies the Protocol structurally;
nothing in the core but the CLI, which opens one, imports ``runtime.py``.

The registries name the records they hold in words (``Registry[Any]``): the records' factories
take this Protocol, so naming the records here would import them back, an import cycle.
Services whose classes live above the contract in the flow (the Dock, the command registry,
the artifact store, a resolved call) are typed ``Any`` for the same reason. Their comments
name the class; a caller that wants the record's type annotates the variable it assigns
(``lane: BuildLane = runtime.lanes.get(name)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from wbcore_runtime.contract.errors import InvalidArgs, NotFound

if TYPE_CHECKING:
    import pluggy

    from wbcore_runtime.toolkit.discovery import Discovery
    from wbcore_runtime.toolkit.loaded import Toolkit

R_co = TypeVar("R_co", covariant=True)
S = TypeVar("S")


class Registry(Protocol[R_co]):
    """The records one registry hook collected, by name (``plugins.manager.RecordRegistry``)."""

    @property
    def what(self) -> str: ...  # what the records are, for messages ("shape", "lane", ...)
    def get(self, name: str) -> R_co: ...
    def names(self) -> list[str]: ...
    def provider(self, name: str) -> Any: ...  # a ``plugins.manager.PluginInfo``
    @property
    def conflicts(self) -> dict[str, list[Any]]: ...  # names served twice → their providers
    def __contains__(self, name: object) -> bool: ...
    def __iter__(self) -> Iterator[R_co]: ...
    def __len__(self) -> int: ...


class RuntimeServices(Protocol):
    """One plugin set, one ``$WB_HOME``, one view of the toolkits (``Runtime`` serves it)."""

    home: Path
    env: dict[str, str]
    cwd: Path
    #: ``dispatch.resolve``'s cache: (kind, name, tier) → (generation, checked at, world, Resolved).
    resolved_calls: dict[tuple[str, str, str | None], Any]
    #: Moves whenever a resolution is made anew or the cache is forgotten (``dispatch.resolve``).
    resolve_epoch: int
    #: Whether the plugins are every installed one, loaded on first use (``plugins.index``).
    indexed_plugins: bool

    # --- plugins -------------------------------------------------------------------
    @property
    def pm(self) -> pluggy.PluginManager: ...
    @property
    def plugin_infos(self) -> list[Any]: ...  # ``plugins.manager.PluginInfo``
    @property
    def hook(self) -> Any: ...
    @property
    def plugin_index(self) -> Any: ...  # ``plugins.index.Index`` or ``None``
    def index_until_loaded(self) -> Any: ...
    @property
    def call_hooks(self) -> Any: ...
    def register_plugin(self, plugin: object, name: str | None = None) -> None: ...

    # --- registries ----------------------------------------------------------------
    @property
    def shapes(self) -> Registry[Any]: ...  # of ``records.ExecShape``
    @property
    def lanes(self) -> Registry[Any]: ...  # of ``records.BuildLane``
    @property
    def prefixes(self) -> Registry[Any]: ...  # of ``records.SourcePrefix``
    @property
    def brokers(self) -> Registry[Any]: ...  # of ``records.Broker``
    @property
    def tiers(self) -> Registry[Any]: ...  # of ``records.IsolationTier``
    @property
    def federation_sources(self) -> Registry[Any]: ...  # of ``records.FederationSource``
    @property
    def build_sandboxes(self) -> Registry[Any]: ...  # of ``records.BuildSandbox``
    @property
    def guest_runners(self) -> Registry[Any]: ...  # of ``records.GuestRunnerService``
    @property
    def tool_providers(self) -> Registry[Any]: ...  # of ``records.ToolProviderService``
    @property
    def distributions(self) -> Registry[Any]: ...  # of ``records.DistributionService``
    @property
    def terminals(self) -> Registry[Any]: ...  # of ``records.TerminalService``
    @property
    def installers(self) -> Registry[Any]: ...  # of ``records.InstallerService``
    @property
    def audit_trails(self) -> Registry[Any]: ...  # of ``records.AuditTrailService``
    @property
    def http_servers(self) -> Registry[Any]: ...  # of ``records.HttpServerService``
    @property
    def fabric_engines(self) -> Registry[Any]: ...  # of ``records.FabricEngine``
    @property
    def llm_providers(self) -> Registry[Any]: ...  # of ``records.LlmProvider``
    @property
    def agent_loops(self) -> Registry[Any]: ...  # of ``records.AgentLoop``
    @property
    def builtins(self) -> Registry[Any]: ...  # of ``records.BuiltinCommand``
    def collect_all(self) -> Sequence[Registry[Any]]: ...  # every registry, collected
    @property
    def cap_universe(self) -> Any: ...  # ``trust.policy.Universe``
    def caps_universe_for(self, caps: Iterable[str]) -> Any: ...

    # --- services ------------------------------------------------------------------
    @property
    def tracer(self) -> Any: ...  # ``contract.telemetry.Tracer`` or ``None``
    @property
    def revocations(self) -> Any: ...  # ``dispatch.revocations.Revocations``
    @property
    def running(self) -> Any: ...  # ``dispatch.running.RunningCalls``
    @property
    def dock(self) -> Any: ...  # ``dispatch.dock.Dock``
    @property
    def registry(self) -> Any: ...  # ``store.registry.CommandRegistry``
    @property
    def artifacts(self) -> Any: ...  # ``store.artifacts.ArtifactStore``
    @property
    def agents(self) -> Any: ...  # ``contract.drivers.AgentLoopDriver``
    def llm(self, model: str | None = None, *, agent_model: str | None = None) -> Any: ...
    def agent(self, agent: Any, task: str, **kw: Any) -> Any: ...
    def fabric(self, name: str, inputs: Any, **kw: Any) -> Any: ...
    def build_sandbox(self, name: str | None = None) -> Any: ...  # ``contract.sandbox.BuildSandboxDriver``
    def install_builtins(self, names: Sequence[str] | None = None, *, force: bool = False) -> list[Any]: ...

    # --- calls ---------------------------------------------------------------------
    def resolve(self, kind: str, name: str, *, tier: str | None = None) -> Any: ...
    def call(self, name: str, argv: Sequence[str] = (), stdin: bytes = b"", *, principal: Any = None,
             timeout: float | None = None, cancel: Any = None, tier: str | None = None) -> Any: ...
    def kernel(self, name: str, *, principal: Any = None, timeout: float | None = None,
               tier: str | None = None) -> Any: ...
    def kernel_call(self, name: str, data: bytes, *, principal: Any = None,
                    timeout: float | None = None) -> bytes: ...
    def component_call(self, name: str, function: str, args: Mapping[str, Any], *, principal: Any = None,
                       timeout: float | None = None, cancel: Any = None) -> Any: ...

    # --- toolkits ------------------------------------------------------------------
    @property
    def roots(self) -> list[Path]: ...
    @property
    def pinned_roots(self) -> list[Path] | None: ...  # an embedder's explicit roots, else None
    def discover(self, *, refresh: bool = False) -> Discovery: ...
    def toolkit(self, ident: str) -> Toolkit: ...
    def verify(self, ident: str) -> Any: ...
    def effective_caps(self, toolkit: Toolkit, *, assume: Any = None) -> frozenset[str]: ...


def chosen(runtime: RuntimeServices, registry: Registry[R_co], name: str | None, *, env: str,
           noun: tuple[str, str], none_installed: str) -> R_co:
    """The record of one of several interchangeable services (the build sandbox, the WASI guest
    runner, the tool provider), chosen the one way every surface chooses: ``name``, else the
    ``env`` variable, else the only one served.

    ``noun`` is the service's name, singular and plural, for messages. Several served and no
    choice is ``InvalidArgs`` listing them; none is ``NotFound`` saying ``none_installed``, or
    naming a service provided twice, and any plugin that failed to load and might serve it.
    """
    want = name or runtime.env.get(env)
    if want:  # unknown: the registry lists the known; provided twice: it names both
        return registry.get(want)
    names = registry.names()
    if len(names) == 1:
        return registry.get(names[0])
    if names:
        raise InvalidArgs(f"several {noun[1]} are installed ({', '.join(names)}); "
                          f"choose one with {env}=<name>")
    message = none_installed
    if registry.conflicts:
        message = "; ".join(f"{noun[0]} {n!r} is provided twice: by {' and '.join(p.origin for p in ps)}; "
                            "uninstall one" for n, ps in registry.conflicts.items())
    broken = [i for i in runtime.plugin_infos if not i.loaded]
    if broken:
        message += "; plugins that failed to load and might serve it: " + "; ".join(
            f"{i.name} ({i.origin}): {i.error}" for i in broken)
    raise NotFound(message)


class Choice(Generic[S]):
    """How every surface takes one service of a kind: ``choice(runtime, name)`` is what the record
    :func:`chosen` picks serves (its factory called with the runtime); :meth:`record` is the record.

    Each contract module declares its kind's choice once (``service = Choice(lambda r: r.installers,
    "WB_INSTALLER", ("toolkit installer", "toolkit installers"), NONE_INSTALLED)``), so the rule,
    ``name``, else the variable, else the only one served, and its messages have this one home.
    A plain class, not a dataclass: the contract modules load on ``wbx run``'s path."""

    __slots__ = ("registry", "env", "noun", "none_installed")

    def __init__(self, registry: Callable[[RuntimeServices], Registry[Any]], env: str,
                 noun: tuple[str, str], none_installed: str) -> None:
        self.registry = registry  # the runtime's registry of this kind's records
        self.env = env
        self.noun = noun
        self.none_installed = none_installed

    def record(self, runtime: RuntimeServices, name: str | None = None) -> Any:
        return chosen(runtime, self.registry(runtime), name, env=self.env, noun=self.noun,
                      none_installed=self.none_installed)

    def __call__(self, runtime: RuntimeServices, name: str | None = None) -> S:
        served: S = self.record(runtime, name).factory(runtime)
        return served
