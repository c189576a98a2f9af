"""The ``Runtime``: one plugin set, one ``$WB_HOME``, one view of the toolkits.

Embed the core with ``Runtime.open()`` (every installed plugin) or
``Runtime.open(plugins=["wasmtime", my_module])`` (a chosen set). Nothing is global:
two runtimes in one process have separate plugin managers and state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import pluggy

from wbcore import discovery as _discovery
from wbcore import plugins as _plugins
from wbcore.errors import ManifestError
from wbcore.records import Broker, BuildLane, ExecShape, FederationSource, IsolationTier, SourcePrefix
from wbcore.toolkit import Toolkit


class Runtime:
    def __init__(
        self,
        pm: pluggy.PluginManager,
        plugin_infos: list[_plugins.PluginInfo],
        *,
        home: Path,
        env: Mapping[str, str],
        cwd: Path,
        roots: Sequence[Path] | None = None,
    ) -> None:
        self.pm = pm
        self.plugin_infos = plugin_infos
        self.home = home
        self.env = dict(env)
        self.cwd = cwd
        self._roots = list(roots) if roots is not None else None
        self._discovery: _discovery.Discovery | None = None

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
        pm, infos = _plugins.load(plugins)
        home_path = Path(home).expanduser() if home is not None else _discovery.default_home(env)
        return cls(
            pm,
            infos,
            home=home_path,
            env=env,
            cwd=Path(cwd) if cwd is not None else Path.cwd(),
            roots=[Path(r) for r in roots] if roots is not None else None,
        )

    @property
    def hook(self) -> Any:
        return self.pm.hook

    # --- registries (collected lazily, once) ---------------------------------------

    def _collect(self, hook: str, kind: type, what: str) -> _plugins.Registry[Any]:
        return _plugins.collect(self.pm, hook, kind, what, self.plugin_infos)

    @cached_property
    def shapes(self) -> _plugins.Registry[ExecShape]:
        return self._collect("wbcore_exec_shapes", ExecShape, "EXEC shape")

    @cached_property
    def lanes(self) -> _plugins.Registry[BuildLane]:
        return self._collect("wbcore_build_lanes", BuildLane, "BUILD_LANG lane")

    @cached_property
    def prefixes(self) -> _plugins.Registry[SourcePrefix]:
        return self._collect("wbcore_source_prefixes", SourcePrefix, "BUILD_SRC prefix")

    @cached_property
    def brokers(self) -> _plugins.Registry[Broker]:
        return self._collect("wbcore_brokers", Broker, "cap broker")

    @cached_property
    def tiers(self) -> _plugins.Registry[IsolationTier]:
        return self._collect("wbcore_isolation_tiers", IsolationTier, "isolation tier")

    @cached_property
    def federation_sources(self) -> _plugins.Registry[FederationSource]:
        return self._collect("wbcore_federation_sources", FederationSource, "federation source")

    @cached_property
    def build_sandboxes(self) -> _plugins.Registry[Any]:
        """Build sandboxes served by plugins (``wbcore_build_sandboxes``): a lane's service."""
        from wbcore.records import BuildSandbox

        return self._collect("wbcore_build_sandboxes", BuildSandbox, "build sandbox")

    def build_sandbox(self, name: str | None = None) -> Any:
        """The build-sandbox driver a lane runs its compiler in (``wbcore.sandbox``):
        ``name``, ``$WB_BUILD_SANDBOX`` or the only one served; ``NotFound`` naming what
        to install when none is."""
        from wbcore import sandbox

        return sandbox.select(self, name).factory(self)

    def collect_all(self) -> None:
        """Collect every registry (``wbx plugins`` shows what each plugin serves)."""
        for name in ("shapes", "lanes", "prefixes", "brokers", "tiers", "federation_sources", "build_sandboxes"):
            getattr(self, name)

    # --- state under $WB_HOME -----------------------------------------------------

    @cached_property
    def registry(self) -> Any:
        """The persistent command/kernel registry (``$WB_HOME/registry.db``)."""
        from wbcore.registry import Registry

        return Registry(self.home / "registry.db")

    @cached_property
    def artifacts(self) -> Any:
        """The content-addressed artifact store (``$WB_HOME/artifacts``, ``wbcore.artifacts``)."""
        from wbcore.artifacts import ArtifactStore

        return ArtifactStore(self.home / "artifacts")

    @cached_property
    def builtins(self) -> _plugins.Registry[Any]:
        """Reserved built-in commands served by plugins (``wbcore_builtin_commands``)."""
        from wbcore.records import BuiltinCommand

        return self._collect("wbcore_builtin_commands", BuiltinCommand, "built-in command")

    def install_builtins(self, names: Sequence[str] | None = None, *, force: bool = False) -> list[Any]:
        """Store and register the built-in commands (also done lazily on first call)."""
        from wbcore import calls

        return calls.install_builtins(self, list(names) if names is not None else None, force=force)

    # --- calls -------------------------------------------------------------------

    def call(self, name: str, argv: Sequence[str] = (), stdin: bytes = b"", *,
             principal: Any = None, timeout: float | None = None, cancel: Any = None) -> Any:
        """Run the registered command ``name``: a fresh sandboxed instance per call.

        Returns a ``CallResult`` (stdout, stderr, exit_code, usage); a limit or a fault
        raises its ``WbError`` (``Timeout``, ``LimitExceeded``, ``GuestTrap``...).
        ``timeout`` may shorten the profile's deadline, never extend it; setting the
        ``cancel`` event (a ``threading.Event``) stops the guest at its next epoch tick.
        """
        from wbcore import calls

        return calls.call_command(self, name, tuple(argv), stdin, principal=principal, timeout=timeout, cancel=cancel)

    def kernel(self, name: str, *, principal: Any = None, timeout: float | None = None) -> Any:
        """Open the registered kernel ``name`` once; ``inst.call(data) -> bytes`` many times."""
        from wbcore import calls

        return calls.open_kernel(self, name, principal=principal, timeout=timeout)

    def kernel_call(self, name: str, data: bytes, *, principal: Any = None, timeout: float | None = None) -> bytes:
        """One kernel call through a per-thread cached instance, with the call hooks."""
        import threading

        from wbcore.calls import CallRecord, Principal
        from wbcore.errors import WbError

        local = self.__dict__.setdefault("_wb_kernels", threading.local())
        cache = getattr(local, "instances", None)
        if cache is None:
            cache = local.instances = {}
        key = (name, principal, timeout)
        inst = cache.get(key)
        current = self.registry.get("kernel", name).sha256
        if inst is not None and inst.req.sha256 != current:  # re-registered: run the new artifact
            inst.close()
            inst = None
        if inst is None:
            inst = cache[key] = self.kernel(name, principal=principal, timeout=timeout)
        who = principal or Principal(toolkit=inst.req.toolkit or "")
        record = CallRecord(name=name, shape="kernel", principal=who, toolkit=inst.req.toolkit)
        self.hook.wbcore_call_started(call=record)
        try:
            out = inst.call(data)
        except WbError as exc:
            self.hook.wbcore_call_finished(call=record, result=exc)
            raise
        self.hook.wbcore_call_finished(call=record, result=out)
        return out

    @cached_property
    def dock(self) -> Any:
        """The Dock: every granted cap as a brokered host import (``wbcore.dock``)."""
        from wbcore.dock import Dock

        return Dock(self)

    # --- toolkits ----------------------------------------------------------------

    @property
    def roots(self) -> list[Path]:
        if self._roots is not None:
            return [r for r in self._roots if r.is_dir()]
        return _discovery.roots(self.env, self.cwd, self.home)

    def discover(self, *, refresh: bool = False) -> _discovery.Discovery:
        if self._discovery is None or refresh:
            self._discovery = _discovery.discover(self.roots)
        return self._discovery

    def toolkit(self, ident: str) -> Toolkit:
        return self.discover().get(ident)

    def verify(self, ident: str) -> Any:
        from wbcore import verify as _verify

        try:
            tk = self.toolkit(ident)
        except ManifestError as exc:
            return _verify.broken(ident, exc)
        return _verify.verify(tk, self)

    def effective_caps(self, toolkit: Toolkit) -> frozenset[str]:
        """profile ∩ ``#+CAPS`` ∩ deployer grants (first-party: profile ∩ ``#+CAPS``).

        A third-party toolkit whose signature does not verify now gets nothing (fail closed).
        """
        from wbcore import consent, policy, trust

        m = toolkit.manifest
        prof = policy.profile_for(m.extra("PROFILE"), m.caps)
        granted = consent.granted(self.home, toolkit)
        if granted and not trust.signature_ok(toolkit, self):
            return frozenset()
        # Consent-only caps (build, serve) need an explicit grant even for first-party.
        consented = granted if granted is not None else consent.explicit(self.home, toolkit)
        return policy.effective_caps(prof, m.caps, granted, consented)
