"""The wbcore plugin contract: the only place hooks are declared.

Project name, entry-point group and hook prefix agree: ``wbcore``, ``wbcore.plugins``,
``wbcore_*``. A plugin is any object (usually a module) with ``@hookimpl`` functions,
exposed through an entry point::

    [project.entry-points."wbcore.plugins"]
    my-plugin = "my_package.plugin"

Registry hooks yield typed frozen records (:mod:`wbcore_runtime.contract.records`) with a user-facing
``name``; the core collects them, refuses two providers of one name (naming both
distributions), and never lets plugins see each other. Heavy imports belong in a
record's factory, never at plugin import time.

All hooks are called with keyword arguments only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from wbcore_runtime.contract.records import (
        AgentLoop,
        AuditTrailService,
        Broker,
        BuildLane,
        BuildSandbox,
        BuiltinCommand,
        Check,
        DistributionService,
        ExecShape,
        FabricEngine,
        FederationSource,
        GuestRunnerService,
        HttpServerService,
        InstallerService,
        IsolationTier,
        LlmProvider,
        SourcePrefix,
        TerminalService,
        ToolProviderService,
    )
    from wbcore_runtime.contract.calls import CallRecord
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.contract.telemetry import Tracer
    from wbcore_runtime.toolkit.loaded import Toolkit

PROJECT = "wbcore"
ENTRY_POINT_GROUP = "wbcore.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: ``add(name, command, help=...)``: the registrar handed to ``wbcore_cli_commands``.
#: ``command`` is a ``typer.Typer`` (a command group) or a plain function. The CLI that calls it is
#: the wbcore-cli distribution; a command prints with ``contract.cli_output``.
CliRegistrar = Callable[..., None]


# --- registry hooks: one per capability kind ---------------------------------------


@hookspec
def wbcore_exec_shapes() -> Iterable[ExecShape]:
    """Called once per runtime, when a shape is first needed (verify, build, run).

    Returns the ``#+EXEC`` shapes this plugin serves. Each shape's ``verify`` yields
    its contract checks; its ``runner`` factory imports the engine lazily::

        @hookimpl
        def wbcore_exec_shapes():
            yield ExecShape(name="wasi-http", summary="...", verify=_verify)
    """


@hookspec
def wbcore_build_lanes() -> Iterable[BuildLane]:
    """Called once per runtime, when a lane is first needed (build, ``wbx lanes``).

    Returns the ``#+BUILD_LANG`` lanes this plugin serves, each with an honest
    ``where`` label and an ``available()`` probe that says why not. A lane that runs a
    native compiler sets ``needs_build_sandbox`` and takes its sandbox from
    ``runtime.build_sandbox()`` (see ``wbcore_build_sandboxes``)::

        @hookimpl
        def wbcore_build_lanes():
            yield BuildLane(name="c", summary="C via zig cc", where="...", factory=_driver)
    """


@hookspec
def wbcore_source_prefixes() -> Iterable[SourcePrefix]:
    """Called once per runtime, when a ``#+BUILD_SRC`` is parsed or resolved.

    Returns the source prefixes this plugin serves (``name`` includes the separator:
    ``"path:"``, ``"git+"``)::

        @hookimpl
        def wbcore_source_prefixes():
            yield SourcePrefix(name="hg+", summary="Mercurial, pinned", factory=_driver)
    """


@hookspec
def wbcore_brokers() -> Iterable[Broker]:
    """Called once per runtime, when a guest is linked with its granted caps.

    Returns the brokers this plugin serves; ``name`` is the ``#+CAPS`` word. A broker for a
    new cap declares what it means and which profiles grant it (none: deployer grant only)::

        @hookimpl
        def wbcore_brokers():
            yield Broker(name="kv", summary="durable per-tenant K/V", factory=_driver)
            yield Broker(name="dice", summary="dice rolls", factory=_dice, meaning="roll dice",
                         profiles=("network",))
    """


@hookspec
def wbcore_isolation_tiers() -> Iterable[IsolationTier]:
    """Called once per runtime, when a tier is resolved for a call.

    Returns isolation tiers; ``rung`` orders the ladder (instance=0 ... node)::

        @hookimpl
        def wbcore_isolation_tiers():
            yield IsolationTier(name="container", summary="bwrap", rung=2, factory=_driver)
    """


@hookspec
def wbcore_federation_sources() -> Iterable[FederationSource]:
    """Called once per runtime, when a federation toolkit's source is resolved.

    Returns data-source connectors for ``#+EXEC: federation``::

        @hookimpl
        def wbcore_federation_sources():
            yield FederationSource(name="http-json", summary="REST/JSON", factory=_src)
    """


@hookspec
def wbcore_builtin_commands() -> Iterable[BuiltinCommand]:
    """Called once per runtime, when a reserved built-in command is first needed.

    Returns built-ins (``upper``, ``grep``, ``jq``, ``wbox``) as real WASM modules built
    from source the plugin ships; the core stores and registers them::

        @hookimpl
        def wbcore_builtin_commands():
            yield BuiltinCommand(name="upper", summary="ASCII upper-case", wasm=_build_upper)
    """


@hookspec
def wbcore_build_sandboxes() -> Iterable[BuildSandbox]:
    """Called once per runtime, when a lane first asks for ``runtime.build_sandbox()``.

    Returns build sandboxes: a service, not a manifest value. A lane that compiles
    natively takes its sandbox from the runtime, never from the plugin serving it; with
    none served it says so ("no build sandbox is installed; pip install wbcore-process")::

        @hookimpl
        def wbcore_build_sandboxes():
            yield BuildSandbox(name="bwrap", summary="bubblewrap", factory=_driver, available=_probe)
    """


@hookspec
def wbcore_guest_runners() -> Iterable[GuestRunnerService]:
    """Called once per runtime, when a lane first asks for ``contract.guest.runner(runtime)``.

    Returns WASI guest runners: a service for lanes whose compiler is a wasm guest (TinyCC,
    QuickJS). The lane never imports the engine plugin; with none served it says so ("no
    WASI guest runner is installed; pip install wbcore-wasmtime")::

        @hookimpl
        def wbcore_guest_runners():
            yield GuestRunnerService(name="wasmtime", summary="in-process wasmtime", factory=_runner)
    """


@hookspec
def wbcore_tool_providers() -> Iterable[ToolProviderService]:
    """Called once per runtime, when a tool surface first asks for ``contract.tools.service(runtime)``.

    Returns tool providers: every registered toolkit as ACT tools (seed 002), their schemas
    and one call path. MCP, ``wbx call`` and the agent loop speak only the records of
    ``wbcore_runtime.contract.tools``; with none served they say so ("no tool provider is
    installed; pip install wbcore-act")::

        @hookimpl
        def wbcore_tool_providers():
            yield ToolProviderService(name="act", summary="toolkits as ACT tools", factory=_service)
    """


@hookspec
def wbcore_distributions() -> Iterable[DistributionService]:
    """Called once per runtime, when install, skill images or publish first ask for
    ``contract.distribution.service(runtime)``.

    Returns OCI distribution clients: pull (verified) and push of wbcore's artifacts and skill
    images, through the core's one fetcher and SSRF guard. With none served an ``oci://``
    source says so ("no OCI distribution client is installed; pip install wbcore-oci")::

        @hookimpl
        def wbcore_distributions():
            yield DistributionService(name="oci", summary="OCI distribution API", factory=_client)
    """


@hookspec
def wbcore_terminals() -> Iterable[TerminalService]:
    """Called once per runtime, when ``wbx shell`` or a shell tier first asks for
    ``contract.terminal.service(runtime)``.

    Returns terminal engines: the PTY agent a tier ships into its sandbox (``Terminal.agent_file``)
    and the host's end (``handshake``, ``attach``). With none served ``wbx shell`` says so ("no
    terminal service is installed; pip install wbcore-terminal")::

        @hookimpl
        def wbcore_terminals():
            yield TerminalService(name="pty", summary="PTY sessions over frames", factory=_terminal)
    """


@hookspec
def wbcore_installers() -> Iterable[InstallerService]:
    """Called once per runtime, when ``wbx toolkit install`` (or uninstall, the engine's push,
    an agent's promotion, a Skills import of a remote source, or a journal left by a killed
    install) first asks for ``contract.installs.service(runtime)``.

    Returns toolkit installers: sources staged, verified and landed with ``wbx.lock`` all or
    nothing. Callers speak only the records of ``wbcore_runtime.contract.installs``; with none
    served they say so ("no toolkit installer is installed; pip install wbcore-install")::

        @hookimpl
        def wbcore_installers():
            yield InstallerService(name="install", summary="verify, then land", factory=_installer)
    """


@hookspec
def wbcore_audit_trails() -> Iterable[AuditTrailService]:
    """Called once per runtime, when ``wbx audit`` or the engine first asks for
    ``contract.audit_trail.service(runtime)``.

    Returns readers of the audit trail the core writes: entries, tail, page, a cursor, and
    ``verify`` (the chain, with the writer's own ``dispatch.audit.chain_hash``). With none served
    a reader says so ("no audit-trail reader is installed; pip install wbcore-audit-trail")::

        @hookimpl
        def wbcore_audit_trails():
            yield AuditTrailService(name="audit-trail", summary="read and verify", factory=_reader)
    """


@hookspec
def wbcore_http_servers() -> Iterable[HttpServerService]:
    """Called once per runtime, when ``wbx engine serve`` or ``wbx mcp serve --http`` first asks for
    ``contract.http_server.service(runtime)``.

    Returns HTTP server engines: an ASGI app served with every bound of ``ServerLimits`` (a
    request's deadline, connection, header and stream caps), the listening socket, the open-file
    limit. With none served those surfaces say so ("no HTTP server is installed; pip install
    wbcore-http-server")::

        @hookimpl
        def wbcore_http_servers():
            yield HttpServerService(name="uvicorn", summary="bounded uvicorn", factory=_server)
    """


@hookspec
def wbcore_fabric_engines() -> Iterable[FabricEngine]:
    """Called once per runtime, when ``wbcore_runtime.dispatch.fabric.map`` (``wbx fan``, pipelines) first
    needs an engine. Returns engines that run one resolved call over many inputs; the
    core resolves the call (trust, caps, tier) before an engine sees it::

        @hookimpl
        def wbcore_fabric_engines():
            yield FabricEngine(name="local", summary="worker processes", factory=_driver)
    """


@hookspec
def wbcore_llm_providers() -> Iterable[LlmProvider]:
    """Called once per runtime, when a model is first chosen (the agent loop, ``wbx agent``).

    Returns LLM providers; ``name`` is what a model spec's ``provider:`` prefix and
    ``WB_LLM_PROVIDER`` name. The factory gets the run's ``wbcore_runtime.contract.llm.LlmSettings``::

        @hookimpl
        def wbcore_llm_providers():
            yield LlmProvider(name="openai", summary="chat completions", factory=_driver)
    """


@hookspec
def wbcore_agent_loops() -> Iterable[AgentLoop]:
    """Called once per runtime, when ``Runtime.agent`` / ``Runtime.agents`` is first used.

    Returns agent loop engines (runs, sessions); surfaces such as an engine service reach
    sessions through ``runtime.agents.sessions``, never by importing the loop's plugin::

        @hookimpl
        def wbcore_agent_loops():
            yield AgentLoop(name="wb", summary="LLM ↔ tools ↔ VFS", factory=_driver)
    """


# --- surface and lifecycle hooks ---------------------------------------------------


@hookspec
def wbcore_cli_commands(add: CliRegistrar) -> None:
    """Called when the ``wbx`` app is built. Register sub-commands with ``add``.

    ``add`` refuses built-in command names (``toolkit``, ``plugins``, ``run``...) and
    names another plugin took: the command is not added, and ``wbx plugins`` and one
    stderr warning line say why (never an error that stops ``wbx``)::

        @hookimpl
        def wbcore_cli_commands(add):
            add("lanes", lanes_app, help="List build lanes")
    """


@hookspec
def wbcore_verify_checks(toolkit: Toolkit, runtime: RuntimeServices) -> Iterable[Check] | None:
    """Called by ``verify`` after the core checks. Returns extra ✓/✗ lines::

        @hookimpl
        def wbcore_verify_checks(toolkit, runtime):
            yield Check(ok=True, area="license", message="SPDX MIT")
    """


@hookspec
def wbcore_call_started(call: CallRecord) -> None:
    """Called before a command, kernel or component call runs (audit, telemetry)::

        @hookimpl
        def wbcore_call_started(call):
            log.info("start %s for %s", call.name, call.principal)
    """


@hookspec
def wbcore_call_finished(call: CallRecord, result: Any) -> None:
    """Called after a call ends, with its result or the ``WbError`` it raised::

        @hookimpl
        def wbcore_call_finished(call, result):
            metrics.observe(call.name, call.usage.wall_s)
    """


@hookspec(firstresult=True)
def wbcore_tracer(runtime: RuntimeServices) -> Tracer | None:
    """Called once when a runtime opens. Returns the tracer its seams open spans with
    (:mod:`wbcore_runtime.contract.telemetry`: pipeline, stage, agent step, broker decision), or ``None``
    when telemetry is off — then the seams cost one ``None`` test. The tracer is
    registered as a plugin of that runtime, so it may implement the call hooks::

        @hookimpl
        def wbcore_tracer(runtime):
            return MyTracer() if runtime.env.get("MY_TRACING") else None
    """
