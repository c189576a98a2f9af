"""The ``Runtime``: one plugin set, one ``$WB_HOME``, one view of the toolkits.

Embed the core with ``Runtime.open()`` (every installed plugin) or
``Runtime.open(plugins=["wasmtime", my_module])`` (a chosen set). Nothing is global:
two runtimes in one process have separate plugin managers and state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import ManifestError
from wbcore_runtime.contract import host as _host
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract import telemetry
from wbcore_runtime.dispatch.revocations import Revocations
from wbcore_runtime.plugins import index as _index
from wbcore_runtime.store.artifacts import ArtifactStore
from wbcore_runtime.toolkit import roots as _roots
from wbcore_runtime.trust import policy
from wbcore_runtime.trust import verdict as trust

# Imported on first use (contract.lazy): modules one of `wbx run`, `wbx toolkit list`, `wbx --help`
# never loads (docs/architecture.md): the plugin manager (pluggy, every record), the dispatch
# chain (resolve, registry: not a listing's), the Dock (cbor2), discovery and verify (the manifest
# parser, ssl), the grants' store (~1 ms, not on wbx run's path).
if TYPE_CHECKING:  # mypy reads the real modules
    import pluggy
    from wbcore_runtime.contract import llm, sandbox
    from wbcore_runtime.contract.records import (Broker, BuildLane, ExecShape, FederationSource,
                                                 IsolationTier, SourcePrefix)
    from wbcore_runtime.dispatch import dispatcher, fabric, kernels
    from wbcore_runtime.dispatch import dock as _dock
    from wbcore_runtime.dispatch import running as _running
    from wbcore_runtime.dispatch import resolve as resolution
    from wbcore_runtime.plugins import manager as _plugins
    from wbcore_runtime.store import registry as _registry
    from wbcore_runtime.toolkit import discovery as _discovery
    from wbcore_runtime.toolkit import verify as _verify
    from wbcore_runtime.toolkit.loaded import Toolkit
    from wbcore_runtime.trust import consent
else:
    llm = lazy.module("wbcore_runtime.contract.llm")
    sandbox = lazy.module("wbcore_runtime.contract.sandbox")
    dispatcher = lazy.module("wbcore_runtime.dispatch.dispatcher")
    _dock = lazy.module("wbcore_runtime.dispatch.dock")
    fabric = lazy.module("wbcore_runtime.dispatch.fabric")
    kernels = lazy.module("wbcore_runtime.dispatch.kernels")
    _running = lazy.module("wbcore_runtime.dispatch.running")
    resolution = lazy.module("wbcore_runtime.dispatch.resolve")
    _plugins = lazy.module("wbcore_runtime.plugins.manager")
    _registry = lazy.module("wbcore_runtime.store.registry")
    _discovery = lazy.module("wbcore_runtime.toolkit.discovery")
    _verify = lazy.module("wbcore_runtime.toolkit.verify")
    consent = lazy.module("wbcore_runtime.trust.consent")


class Runtime:
    def __init__(
        self,
        pm: pluggy.PluginManager | None,
        plugin_infos: list[_plugins.PluginInfo] | None,
        *,
        home: Path,
        env: Mapping[str, str],
        cwd: Path,
        roots: Sequence[Path] | None = None,
        load_plugins: Callable[[], tuple[pluggy.PluginManager, list[_plugins.PluginInfo]]] | None = None,
    ) -> None:
        """``pm``/``plugin_infos`` as loaded, or ``None`` and ``load_plugins``: then the
        plugins are imported on first use of :attr:`pm` (a command that only reads
        toolkits, such as ``wbx toolkit list``, never imports one)."""
        if pm is None and load_plugins is None:
            raise TypeError("Runtime needs a plugin manager or load_plugins")
        self._pm = pm
        self._plugin_infos = plugin_infos
        self._load_plugins = load_plugins
        self.home = home
        self.env = dict(env)
        self.cwd = cwd
        self._roots = list(roots) if roots is not None else None
        self._discovery: _discovery.Discovery | None = None
        #: ``wbcore_runtime.dispatch.resolve``'s cache: (kind, name, tier) → (generation, checked at, world,
        #: Resolved).
        self.resolved_calls: dict[tuple[str, str, str | None], Any] = {}
        #: Moves whenever a resolution is made anew or the cache is forgotten
        #: (wbcore_runtime.dispatch.resolve).
        self.resolve_epoch = 0
        #: Whether this runtime's plugins are every installed one, loaded on first use: only
        #: then may dispatch read them from the plugin index in the home (wbcore_runtime.plugins.index).
        self.indexed_plugins = False

    def _loaded(self) -> None:
        if self._pm is None:
            assert self._load_plugins is not None
            self._pm, self._plugin_infos = self._load_plugins()
            if self.indexed_plugins and self.__dict__.get("plugin_index") is None:
                if _index.load(self) is None:  # missing or stale: describe the plugins just loaded
                    try:
                        _index.write(self)
                    except Exception as exc:  # noqa: BLE001 - an optimisation: never a command's failure
                        import logging

                        logging.getLogger(__name__).debug("plugin index not written: %s", exc)
                    self.__dict__.pop("plugin_index", None)  # read again: the one just written

    @cached_property
    def plugin_index(self) -> _index.Index | None:
        """The plugin index (``wbcore_runtime.plugins.index.Index``) when this runtime loads every
        installed plugin and the home's index matches them; else ``None``. Dispatch reads
        shapes, tiers and lanes from it without importing the plugins."""
        if not self.indexed_plugins:
            return None
        return _index.load(self)

    def index_until_loaded(self) -> _index.Index | None:
        """The plugin index while the plugins are not loaded yet (``None`` once they are, or
        when there is none): what a hook caller may read instead of importing them."""
        return self.plugin_index if self._pm is None else None

    @property
    def pm(self) -> pluggy.PluginManager:
        """The plugin manager (plugins are imported on first use)."""
        self._loaded()
        return self._pm  # type: ignore[return-value]

    @property
    def plugin_infos(self) -> list[_plugins.PluginInfo]:
        self._loaded()
        return self._plugin_infos  # type: ignore[return-value]

    @cached_property
    def call_hooks(self) -> Any:
        """The hook relay when a plugin implements the call hooks, else ``None``: calls
        check this attribute, so hooks nobody implements cost nothing per call."""
        _ = self.tracer  # a tracer registers itself as a plugin implementing the call hooks: open it first
        index = self.index_until_loaded()
        if index is not None and not index.watches_calls:
            return None  # no installed plugin implements them (and no tracer registered one)
        return self._call_hooks()

    @cached_property
    def revocations(self) -> Revocations:
        """Revoked principals (``wbcore_runtime.dispatch.revocations.Revocations``): one per runtime,
        shared by the Dock and the running-calls table, without importing the Dock."""
        return Revocations(self.home / "dock" / "revoked", self.registry.generation)

    @cached_property
    def running(self) -> _running.RunningCalls:
        """The calls running now and the watcher that cuts them off when their grant is
        revoked (``wbcore_runtime.dispatch.running.RunningCalls``)."""
        return _running.RunningCalls(self)

    @cached_property
    def tracer(self) -> telemetry.Tracer | None:
        """The tracer of ``wbcore_tracer`` (``None``: telemetry off, the seams cost nothing).
        Opened on first use, with the plugins."""
        return telemetry.open_tracer(self)

    @classmethod
    def open(
        cls,
        *,
        plugins: Sequence[str | object] | None = None,
        home: Path | str | None = None,
        roots: Sequence[Path | str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> Runtime:
        """Open a runtime. ``plugins=None`` loads every installed plugin (tolerant);
        a list selects entry-point names and/or in-process plugin objects (strict)."""
        env = dict(os.environ if env is None else env)
        home_path = (Path(home).expanduser() if home is not None
                     else _roots.default_home(env, Path(cwd) if cwd is not None else None))
        def load(selection: Sequence[str | object] | None = None
                 ) -> tuple[pluggy.PluginManager, list[_plugins.PluginInfo]]:
            return _plugins.load(selection, cache_dir=home_path)

        if plugins is not None:  # a selection is strict: a bad name fails here, not at first use
            pm, infos = load(plugins)
            return cls(pm, infos, home=home_path, env=env, cwd=Path(cwd) if cwd is not None else Path.cwd(),
                       roots=[Path(r) for r in roots] if roots is not None else None)
        rt = cls(
            None,
            None,
            load_plugins=load,
            home=home_path,
            env=env,
            cwd=Path(cwd) if cwd is not None else Path.cwd(),
            roots=[Path(r) for r in roots] if roots is not None else None,
        )
        rt.indexed_plugins = True
        return rt

    @property
    def hook(self) -> Any:
        return self.pm.hook

    def register_plugin(self, plugin: object, name: str | None = None) -> None:
        """Add an in-process plugin to this runtime after it was opened (tests, embedders).
        Caches that depend on the plugin set (which hooks have implementations) are reset.
        A hook implementation no spec declares (a misspelled ``@hookimpl``) is refused."""
        problem = _plugins.register_checked(self.pm, plugin, name)
        if problem:
            raise _plugins.PluginError(f"plugin {name or plugin!r} cannot be used: {problem}")
        self.indexed_plugins = False  # the index describes the installed plugins, not this one
        self.__dict__["plugin_index"] = None
        # Registries collected before (writing the plugin index collects shapes, tiers and
        # lanes when the plugins load) are collected again with this plugin in them.
        for which in ("shapes", "tiers", "lanes"):
            self.__dict__.pop(which, None)
        self.call_hooks = self._call_hooks()

    def _call_hooks(self) -> Any:
        relay = self.pm.hook
        used = relay.wbcore_call_started.get_hookimpls() or relay.wbcore_call_finished.get_hookimpls()
        return relay if used else None

    # --- registries (collected lazily, once) ---------------------------------------

    def _collect(self, hook: str, what: str) -> _plugins.RecordRegistry[Any]:
        return _plugins.collect_hook(self.pm, hook, what, self.plugin_infos)

    @cached_property
    def shapes(self) -> _plugins.RecordRegistry[ExecShape]:
        return self._collect("wbcore_exec_shapes", "EXEC shape")

    @cached_property
    def lanes(self) -> _plugins.RecordRegistry[BuildLane]:
        return self._collect("wbcore_build_lanes", "BUILD_LANG lane")

    @cached_property
    def prefixes(self) -> _plugins.RecordRegistry[SourcePrefix]:
        return self._collect("wbcore_source_prefixes", "BUILD_SRC prefix")

    @cached_property
    def brokers(self) -> _plugins.RecordRegistry[Broker]:
        return self._collect("wbcore_brokers", "cap broker")

    @cached_property
    def cap_universe(self) -> Any:
        """The caps this runtime knows (``wbcore_runtime.trust.policy.Universe``): the core's plus
        those its brokers declare, collected once."""
        brokers = self.brokers  # collecting fills each plugin's ``serves``
        origin = {name: info.origin for info in self.plugin_infos
                  for name in info.serves.get("cap broker", ())}
        return policy.Universe.from_brokers(brokers, origin, reserved=_dock.ALWAYS_LINKED)

    def caps_universe_for(self, caps: Iterable[str]) -> Any:
        """The universe to decide ``caps`` with: the core's when they are all core caps (no
        plugin is imported for that), else :attr:`cap_universe` (the plugins load)."""
        return policy.CORE if policy.CAP_UNIVERSE.issuperset(caps) else self.cap_universe

    @cached_property
    def tiers(self) -> _plugins.RecordRegistry[IsolationTier]:
        return self._collect("wbcore_isolation_tiers", "isolation tier")

    @cached_property
    def federation_sources(self) -> _plugins.RecordRegistry[FederationSource]:
        return self._collect("wbcore_federation_sources", "federation source")

    @cached_property
    def build_sandboxes(self) -> _plugins.RecordRegistry[Any]:
        """Build sandboxes served by plugins (``wbcore_build_sandboxes``): a lane's service."""
        return self._collect("wbcore_build_sandboxes", "build sandbox")

    @cached_property
    def guest_runners(self) -> _plugins.RecordRegistry[Any]:
        """WASI guest runners served by plugins (``wbcore_guest_runners``): a lane's service."""
        return self._collect("wbcore_guest_runners", "guest runner")

    @cached_property
    def tool_providers(self) -> _plugins.RecordRegistry[Any]:
        """Tool providers served by plugins (``wbcore_tool_providers``): the tool surfaces' service."""
        return self._collect("wbcore_tool_providers", "tool provider")

    @cached_property
    def distributions(self) -> _plugins.RecordRegistry[Any]:
        """OCI distribution clients (``wbcore_distributions``): install's, skill images' and publish's."""
        return self._collect("wbcore_distributions", "OCI distribution client")

    @cached_property
    def terminals(self) -> _plugins.RecordRegistry[Any]:
        """Terminal engines (``wbcore_terminals``): ``wbx shell``'s relay and the agent shell tiers ship."""
        return self._collect("wbcore_terminals", "terminal service")

    @cached_property
    def installers(self) -> _plugins.RecordRegistry[Any]:
        """Toolkit installers (``wbcore_installers``): install, uninstall, push, promotion."""
        return self._collect("wbcore_installers", "toolkit installer")

    @cached_property
    def audit_trails(self) -> _plugins.RecordRegistry[Any]:
        """Readers of the audit trail (``wbcore_audit_trails``): ``wbx audit``'s and the engine's."""
        return self._collect("wbcore_audit_trails", "audit-trail reader")

    @cached_property
    def http_servers(self) -> _plugins.RecordRegistry[Any]:
        """HTTP server engines (``wbcore_http_servers``): the engine's and ``wbx mcp serve --http``'s."""
        return self._collect("wbcore_http_servers", "HTTP server")

    @cached_property
    def fabric_engines(self) -> _plugins.RecordRegistry[Any]:
        """Engines that map one call over many inputs (``wbcore_fabric_engines``)."""
        return self._collect("wbcore_fabric_engines", "fabric engine")

    @cached_property
    def llm_providers(self) -> _plugins.RecordRegistry[Any]:
        """LLM providers (``wbcore_llm_providers``): the agent loop's model APIs."""
        return self._collect("wbcore_llm_providers", "LLM provider")

    def llm(self, model: str | None = None, *, agent_model: str | None = None) -> Any:
        """A ``wbcore_runtime.contract.llm.LlmDriver`` for ``model`` (``provider:model`` or a bare model
        name), the agent's ``:MODEL:`` or ``WB_LLM_*`` (``wbcore_runtime.contract.llm.settings``)."""
        return llm.driver(self, llm.settings(self, model=model, agent_model=agent_model))

    @cached_property
    def agent_loops(self) -> _plugins.RecordRegistry[Any]:
        """Agent loop engines (``wbcore_agent_loops``): runs and sessions."""
        return self._collect("wbcore_agent_loops", "agent loop")

    @cached_property
    def agents(self) -> Any:
        """The agent loop driver (``wbcore_runtime.contract.drivers.AgentLoopDriver``): ``run``, ``sessions``.
        ``$WB_AGENT_LOOP`` or the only one installed (``contract.host.chosen``)."""
        return _host.Choice(lambda r: r.agent_loops, "WB_AGENT_LOOP", ("agent loop", "agent loops"),
                            "no agent loop is installed; pip install wbcore-agent")(self)

    def agent(self, agent: Any, task: str, **kw: Any) -> Any:
        """Run an agent (an ``agent.org`` path, an agent id, or a definition ``runtime.agents.parse`` read)
        on ``task`` to its end and return the run record (``AgentLoopDriver.run``)."""
        return self.agents.run(agent, task, **kw)

    def fabric(self, name: str, inputs: Any, **kw: Any) -> Any:
        """``wbcore_runtime.dispatch.fabric.map(self, name, inputs, **kw)``: results in input order,
        streamed."""
        return fabric.map(self, name, inputs, **kw)

    def build_sandbox(self, name: str | None = None) -> Any:
        """The build-sandbox driver a lane runs its compiler in (``wbcore_runtime.contract.sandbox``):
        ``name``, ``$WB_BUILD_SANDBOX`` or the only one served; ``NotFound`` naming what
        to install when none is."""
        return sandbox.select(self, name).factory(self)

    def collect_all(self) -> list[_plugins.RecordRegistry[Any]]:
        """Every registry, one per registry hook (``contract.records.RECORD_KINDS``), collected:
        ``wbx plugins`` shows what each plugin serves and every name two plugins serve."""
        return [getattr(self, name) for name in (
            "shapes", "lanes", "prefixes", "brokers", "tiers", "federation_sources", "builtins",
            "build_sandboxes", "guest_runners", "tool_providers", "distributions", "installers",
            "audit_trails", "http_servers", "terminals", "fabric_engines", "llm_providers",
            "agent_loops")]

    # --- state under $WB_HOME -----------------------------------------------------

    @cached_property
    def registry(self) -> _registry.CommandRegistry:
        """The persistent command/kernel registry (``$WB_HOME/registry.db``)."""
        return _registry.CommandRegistry(self.home / "registry.db")

    @cached_property
    def artifacts(self) -> ArtifactStore:
        """The content-addressed artifact store (``$WB_HOME/artifacts``,
        ``wbcore_runtime.store.artifacts``)."""
        return ArtifactStore(self.home / "artifacts")

    @cached_property
    def builtins(self) -> _plugins.RecordRegistry[Any]:
        """Reserved built-in commands served by plugins (``wbcore_builtin_commands``)."""
        return self._collect("wbcore_builtin_commands", "built-in command")

    def install_builtins(self, names: Sequence[str] | None = None, *, force: bool = False) -> list[Any]:
        """Store and register the built-in commands (also done lazily on first call)."""
        return dispatcher.install_builtins(self, list(names) if names is not None else None, force=force)

    # --- calls (every one through wbcore_runtime.dispatch.dispatcher: resolved once, run at its tier) ----

    def resolve(self, kind: str, name: str, *, tier: str | None = None) -> Any:
        """The resolved call for a registered command / kernel / component
        (``wbcore_runtime.dispatch.resolve.Resolved``): trust, caps, limits and tier, decided once."""
        return resolution.resolve(self, kind, name, tier=tier)

    def call(self, name: str, argv: Sequence[str] = (), stdin: bytes = b"", *,
             principal: Any = None, timeout: float | None = None, cancel: Any = None, tier: str | None = None,
             mounts: Sequence[Any] = (), remote: str | None = None) -> Any:
        """Run the registered command ``name``: a fresh sandboxed instance per call.

        Returns a ``CallResult`` (stdout, stderr, exit_code, usage); a limit or a fault
        raises its ``WbError`` (``Timeout``, ``LimitExceeded``, ``GuestTrap``...).
        ``timeout`` may shorten the profile's deadline, never extend it; setting the
        ``cancel`` event (a ``threading.Event``) stops the guest at its next epoch tick.
        ``tier`` asks for an isolation tier (never weaker than the toolkit's trust needs).
        ``mounts``: host folders to bind in (``"HOST[:GUEST][:ro|rw]"`` or
        ``wbcore_runtime.dispatch.mounts.Mount``; read-only by default), for tiers that bind them
        (container, microvm); checked by ``wbcore_runtime.dispatch.mounts.grant``. ``remote``: the
        remote principal that asked for them (a server passing on its client's request), whose
        folders must lie inside the deployer's ``WB_MOUNT_ROOTS``.
        """
        return dispatcher.call_command(self, name, argv, stdin, principal=principal, timeout=timeout,
                                       cancel=cancel, tier=tier, mounts=mounts, remote=remote)

    def kernel(self, name: str, *, principal: Any = None, timeout: float | None = None,
               tier: str | None = None) -> Any:
        """Open the registered kernel ``name`` once; ``inst.call(data) -> bytes`` many times."""
        return kernels.open_kernel(self, name, principal=principal, timeout=timeout, tier=tier)

    def kernel_call(self, name: str, data: bytes, *, principal: Any = None,
                    timeout: float | None = None) -> bytes:
        """One kernel call through a per-thread instance, reopened when the resolution changes.

        (The first call binds ``self.kernel_call`` to ``wbcore_runtime.dispatch.kernels.KernelCalls.call``,
        a function with this signature: later calls of a ~2 µs kernel skip this frame.)
        """
        calls = self._kernel_calls.call
        self.kernel_call = calls  # type: ignore[method-assign]
        return calls(name, data, principal=principal, timeout=timeout)

    @cached_property
    def _kernel_calls(self) -> Any:
        return kernels.KernelCalls(self)

    def component_call(self, name: str, function: str, args: Mapping[str, Any], *, principal: Any = None,
                       timeout: float | None = None, cancel: Any = None) -> Any:
        """Call ``function`` of the registered component ``name`` with JSON-shaped ``args``."""
        return dispatcher.call_component(self, name, function, dict(args), principal=principal,
                                         timeout=timeout, cancel=cancel)

    @cached_property
    def dock(self) -> _dock.Dock:
        """The Dock: every granted cap as a brokered host import (``wbcore_runtime.dispatch.dock``)."""
        return _dock.Dock(self)

    # --- toolkits ----------------------------------------------------------------

    @property
    def pinned_roots(self) -> list[Path] | None:
        return None if self._roots is None else list(self._roots)

    @property
    def roots(self) -> list[Path]:
        if self._roots is not None:
            return [r for r in self._roots if r.is_dir()]
        return _roots.roots(self.env, self.cwd, self.home)

    def discover(self, *, refresh: bool = False) -> _discovery.Discovery:
        if self._discovery is None or refresh:
            self._discovery = _discovery.discover(self.roots, self.home)
        return self._discovery

    def toolkit(self, ident: str) -> Toolkit:
        return self.discover().get(ident)

    def verify(self, ident: str) -> Any:
        try:
            tk = self.toolkit(ident)
        except ManifestError as exc:
            return _verify.broken(ident, exc)
        return _verify.verify(tk, self)

    def effective_caps(self, toolkit: Toolkit, *, assume: Any = None) -> frozenset[str]:
        """What ``toolkit`` as it is now would be granted (``show``, ``verify``, ``grant``):
        profile ∩ ``#+CAPS`` ∩ deployer grants, by :func:`wbcore_runtime.trust.consent.effective_caps`.
        A third-party toolkit whose signature does not verify now gets nothing (fail closed).
        Calls never use this: they use the caps recorded at build time (``wbcore_runtime.dispatch.resolve``).
        ``assume``: a ``consent.Grant`` to apply instead of the stored one (what a change would leave).
        """
        m = toolkit.manifest
        if m.trust == "third-party" and not trust.signature_ok(toolkit, self):
            return frozenset()
        universe = self.caps_universe_for(m.caps)
        return consent.effective_caps(self.home, toolkit_id=m.id, trust=m.trust, signer=m.author_did,
                                      declared=m.caps,
                                      profile=policy.profile_for(m.extra("PROFILE"), m.caps, universe),
                                      universe=universe, assume=assume)
