"""Typed, frozen records that plugins yield from the registry hooks.

Each record has a user-facing ``name`` (the manifest value it serves) and a small
``summary``. Anything heavy (wasmtime, httpx, a compiler) is reached only through a
record's *factory*, called the first time the capability is actually used, so that
importing a plugin stays cheap and ``wbx --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# The driver contracts sit below the records (they import no record back): the records name
# what their factories return, and a lane's availability asks the build-sandbox contract.
from wbcore_runtime.contract.drivers import (
    AgentLoopDriver,
    Availability,
    BrokerDriver,
    LaneDriver,
    ShapeRunner,
    SourceDriver,
    TierDriver,
)
from wbcore_runtime.contract.llm import LlmDriver, LlmSettings, sdk_availability
from wbcore_runtime.contract.sandbox import BuildSandboxDriver, availability
from wbcore_runtime.contract.targets import load_target

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.toolkit.loaded import Toolkit


@dataclass(frozen=True, slots=True)
class Check:
    """One ✓/✗ line of a verify report. ``warning`` lines never fail the report."""

    ok: bool
    area: str
    message: str
    warning: bool = False

    def render(self) -> str:
        mark = "⚠" if self.warning else ("✓" if self.ok else "✗")
        return f"{mark} {self.area}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "area": self.area, "message": self.message, "warning": self.warning}


def _always() -> Availability:
    return Availability.yes()


@dataclass(frozen=True, slots=True)
class VerifyContext:
    """What a shape's verify contract may look at: the toolkit and the runtime."""

    toolkit: Toolkit
    runtime: RuntimeServices


# --- the registry records ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecShape:
    """An ``#+EXEC`` invocation contract (command, posix, task, federation, ...).

    ``verify`` yields the shape's contract checks for a toolkit; ``runner`` builds the
    object that runs it (``None`` for discovery-only shapes such as ``task``).
    """

    name: str
    summary: str
    verify: Callable[[VerifyContext], Iterable[Check]]
    runner: Callable[[RuntimeServices], ShapeRunner] | None = None
    default_tier: str = "instance"
    registers_commands: bool = False


@dataclass(frozen=True, slots=True)
class BuildLane:
    """A ``#+BUILD_LANG`` compiler path from source to a ``.wasm`` artifact.

    ``where`` is the honest label shown by ``wbx lanes``: what runs, and where
    (e.g. "native zig cc inside the build sandbox", "tcc compiled to wasm").
    """

    name: str
    summary: str
    where: str
    factory: Callable[[RuntimeServices], LaneDriver]
    available: Callable[[], Availability] = _always
    kind: str = "compile-to-wasm"  # or compile-and-run / compile-to-c (seed 004)
    #: compile-and-run lanes: builds the runner that executes this lane's artifacts under
    #: the command contract (``call(CommandRequest) -> CallResult``); the run engine hands
    #: it artifacts registered with ``lane`` = this name (or whose ``wbcore.runner`` wasm
    #: custom section names it). ``None``: the artifact is a plain WASI command.
    runner: Callable[[RuntimeServices], ShapeRunner] | None = None
    #: The lane runs a native compiler in the runtime's build sandbox
    #: (``Runtime.build_sandbox()``): it can build only where one is served and works.
    needs_build_sandbox: bool = False
    #: Raises ``InvalidArgs`` naming a ``#+BUILD_FLAGS`` word the lane refuses; the same
    #: function the driver's ``build`` calls, so ``verify`` and ``build`` agree
    #: (``wbcore_runtime.build.buildable``). ``None``: the lane checks nothing before it runs.
    check_flags: Callable[[tuple[str, ...]], None] | None = None
    #: Manifest keywords that change this lane's output (python: ``PY_MODULE``, ``WIT_WORLD``,
    #: ``WASI``; c/zig: ``BUILD_FLAGS``): the build-cache key covers their values
    #: (``wbcore_runtime.build.cache.key``), so two toolkits differing only there never share a build.
    output_fields: tuple[str, ...] = ()

    def availability(self, runtime: RuntimeServices) -> Availability:
        """Whether this lane can build here: its own ``available()`` and, when it
        ``needs_build_sandbox``, the runtime's build sandbox; every missing piece is named."""
        own = self.available()
        if not self.needs_build_sandbox:
            return own
        box = availability(runtime)
        if own.ok and box.ok:
            return Availability.yes("; ".join(r for r in (own.reason, box.reason) if r))
        return Availability.no("; ".join(a.reason for a in (own, box) if not a.ok))


@dataclass(frozen=True, slots=True)
class SourcePrefix:
    """A ``#+BUILD_SRC`` scheme such as ``path:`` or ``git+``.

    ``refused`` is set for prefixes that exist only to be refused with a reason
    (``script:`` was removed: native build scripts are banned).
    """

    name: str
    summary: str
    factory: Callable[[RuntimeServices], SourceDriver] | None = None
    refused: str | None = None
    #: ``check(manifest, rest)`` raises what ``resolve`` would refuse without fetching
    #: anything (a fetched source without ``#+SHA256``, an unpinned ``git+``); the driver
    #: calls the same function, so ``verify`` and ``build`` agree (``wbcore_runtime.build.buildable``).
    check: Callable[[Any, str], None] | None = None


@dataclass(frozen=True, slots=True)
class Broker:
    """Delivers the capability ``name`` (a ``#+CAPS`` word) as host imports.

    A broker for a cap the core does not know declares it: ``meaning`` (one line: what a
    guest granted it can do) and ``profiles``, the profiles that grant it (empty: only an
    explicit deployer grant, ``wbx toolkit grant``, does). The runtime adds it to its cap
    universe (``wbcore_runtime.trust.policy.Universe``); a core cap's profiles stay the core's.
    """

    name: str
    summary: str
    factory: Callable[[RuntimeServices], BrokerDriver]
    operations: tuple[str, ...] = ()
    meaning: str = ""
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IsolationTier:
    """An isolation depth. ``rung`` orders the ladder (0 = instance, higher = stronger).

    ``kinds`` are the registry kinds its driver runs (``command``, ``kernel``, ``posix``)
    and the sandbox services it offers: ``shell`` (the driver has
    ``open_shell(wbcore_runtime.contract.terminal.ShellRequest)``, for ``wbx shell``), ``task`` (it has
    ``run_task(wbcore_runtime.toolkit.tasks.TaskRequest)``, for ``:role task`` blocks), ``mount`` (it
    binds the host folders of ``CommandRequest.mounts``/``TaskRequest.mounts``, ``wbx run
    --mount``) and ``preopen`` (it maps ``CommandRequest.preopens`` and ``scratch``; tiers
    without it are passed over for commands with ``#+PREOPEN``/``#+SCRATCH``);
    ``bridges_caps`` says whether a guest's broker calls reach the host's Dock from it.
    Dispatch (``wbcore_runtime.dispatch.tiers.choose_tier``) reads both to pick a tier that can run
    the call, and ``wbx tiers --explain`` reports why stronger ones were passed over.
    """

    name: str
    summary: str
    rung: int
    factory: Callable[[RuntimeServices], TierDriver]
    available: Callable[[], Availability] = _always
    kinds: frozenset[str] = frozenset({"command", "kernel"})
    bridges_caps: bool = True
    #: The driver runs an entry built by a compile-and-run lane with that lane's runner
    #: (``BuildLane.runner``, e.g. js: interpreter + the artifact's own sources) where it runs
    #: the call. ``False``: dispatch never sends such an entry to this tier.
    hosts_lane_runners: bool = False


@dataclass(frozen=True, slots=True)
class FederationSource:
    """A data-source connector for ``#+EXEC: federation`` toolkits."""

    name: str
    summary: str
    factory: Callable[[RuntimeServices], Any]
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Service:
    """A service one plugin serves and others ask the runtime for, through its contract's
    ``service(runtime)`` (``contract.host.chosen`` picks among several). ``factory`` returns the
    contract's Protocol (typed ``Any`` here: each contract takes the runtime, an import cycle);
    ``available`` says whether it works on this machine and, if not, why. Each kind below is its
    own class, so a record yielded to the wrong hook is refused by its type."""

    name: str
    summary: str
    factory: Callable[[RuntimeServices], Any]
    available: Callable[[], Availability] = _always


@dataclass(frozen=True, slots=True)
class BuildSandbox:
    """A service lanes ask the runtime for: runs a native compiler with nothing of the
    host (``wbcore_runtime.contract.sandbox``). ``factory`` returns a ``BuildSandboxDriver``; ``available``
    says whether it works on this machine and, if not, the missing feature."""

    name: str
    summary: str
    factory: Callable[[RuntimeServices], BuildSandboxDriver]
    available: Callable[[], Availability] = _always


@dataclass(frozen=True, slots=True)
class GuestRunnerService(Service):
    """Runs a WASI guest (a compiler built to wasm) for lanes, bounded in time, memory and output:
    ``contract.guest``'s ``GuestRunner``. ``sandbox_caps`` is the path of the file a sandbox tier
    binds next to ``frames.py`` to link a wasm guest's ``wb.*`` imports on this engine (the caps
    bridge's guest side: standard library only, the engine handed in)."""

    sandbox_caps: str | None = None  # a path (a str: the plugin index keeps it)


@dataclass(frozen=True, slots=True)
class ToolProviderService(Service):
    """Every registered toolkit as ACT tools, for the tool surfaces (MCP, ``wbx call``, the agent
    loop): ``contract.tools``' ``ToolService``."""


@dataclass(frozen=True, slots=True)
class DistributionService(Service):
    """An OCI registry client, for install, skill images and publish: ``contract.distribution``'s
    ``Distribution``."""


@dataclass(frozen=True, slots=True)
class TerminalService(Service):
    """Terminal sessions' engine, for ``wbx shell`` and the shell tiers (the agent a tier ships into
    its sandbox, the host's relay): ``contract.terminal``'s ``Terminal``."""


@dataclass(frozen=True, slots=True)
class InstallerService(Service):
    """The toolkit installer, for ``wbx toolkit install``, the engine's push, promotion and Skills
    import: ``contract.installs``' ``Installer``."""


@dataclass(frozen=True, slots=True)
class AuditTrailService(Service):
    """The audit trail's reader, for ``wbx audit`` and the engine: ``contract.audit_trail``'s
    ``AuditTrail``."""


@dataclass(frozen=True, slots=True)
class HttpServerService(Service):
    """The HTTP server engine, for ``wbx engine serve`` and ``wbx mcp serve --http`` (an ASGI app
    served with every bound of ``ServerLimits``): ``contract.http_server``'s ``HttpServer``."""


@dataclass(frozen=True, slots=True)
class BuiltinCommand:
    """A reserved built-in command (seed 000: ``upper``, ``grep``, ``jq``, ``wbox``).

    ``wasm(runtime)`` returns the module's bytes, built from source the plugin ships
    (never a host-Python stand-in). The core stores them content-addressed and
    registers ``name`` as a built-in on first use (``Runtime.install_builtins``).
    """

    name: str
    summary: str
    wasm: Callable[[RuntimeServices], bytes]
    shape: str = "command"
    arg_mode: str = "argv"
    profile: str = "compute"
    #: changes when the module would change (e.g. a digest of its source): a registered
    #: built-in with another version is rebuilt on first use.
    version: str = ""
    #: Dock caps the built-in itself is granted (``wbox`` needs ``commands`` and ``vfs``),
    #: always bounded by ``profile``: a cap the profile cannot grant is never linked.
    caps: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FabricEngine(Service):
    """Runs one resolved call over many inputs (``wbcore_runtime.dispatch.fabric``). ``factory``
    returns a ``wbcore_runtime.dispatch.fabric.FabricDriver``; ``available`` says whether it can run
    here, and why not."""


@dataclass(frozen=True, slots=True)
class LlmProvider:
    """A model API family (``openai``, ``anthropic``) on its vendor's SDK (``wbcore_runtime.contract.llm``).
    ``factory(runtime, settings)`` returns a ``wbcore_runtime.contract.llm.LlmDriver`` bound to one endpoint
    and model; the host holds the key it is given. ``available`` says whether the SDK is
    importable here, and if not what to install."""

    name: str
    summary: str
    factory: Callable[[RuntimeServices, LlmSettings], LlmDriver]
    available: Callable[[], Availability] = _always


def sdk_provider(name: str, summary: str, driver: str) -> LlmProvider:
    """The ``LlmProvider`` record of a provider on a vendor SDK: ``name`` is also the SDK's
    module and pip name (checked by ``contract.llm.sdk_availability``, never imported by it);
    ``driver`` names its ``contract.llm.SdkChat`` subclass (``module:Class``), imported only when
    a model is first asked, so loading the plugin imports no SDK."""

    def factory(_runtime: RuntimeServices, llm_settings: LlmSettings) -> LlmDriver:
        driver_class: Callable[[LlmSettings], LlmDriver] = load_target(driver)
        return driver_class(llm_settings)

    def available() -> Availability:
        return sdk_availability(name)

    return LlmProvider(name=name, summary=summary, factory=factory, available=available)


@dataclass(frozen=True, slots=True)
class AgentLoop:
    """An agent loop engine; ``factory(runtime)`` returns an :class:`AgentLoopDriver`."""

    name: str
    summary: str
    factory: Callable[[RuntimeServices], AgentLoopDriver]


#: The registry kinds, by hook name: what ``wbx plugins`` lists per plugin.
RECORD_KINDS: dict[str, type] = {
    "wbcore_exec_shapes": ExecShape,
    "wbcore_build_lanes": BuildLane,
    "wbcore_source_prefixes": SourcePrefix,
    "wbcore_brokers": Broker,
    "wbcore_isolation_tiers": IsolationTier,
    "wbcore_federation_sources": FederationSource,
    "wbcore_builtin_commands": BuiltinCommand,
    "wbcore_build_sandboxes": BuildSandbox,
    "wbcore_guest_runners": GuestRunnerService,
    "wbcore_tool_providers": ToolProviderService,
    "wbcore_distributions": DistributionService,
    "wbcore_terminals": TerminalService,
    "wbcore_installers": InstallerService,
    "wbcore_audit_trails": AuditTrailService,
    "wbcore_http_servers": HttpServerService,
    "wbcore_fabric_engines": FabricEngine,
    "wbcore_llm_providers": LlmProvider,
    "wbcore_agent_loops": AgentLoop,
}
