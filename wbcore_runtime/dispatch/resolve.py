"""Resolution: ``(kind, name)`` → one :class:`Resolved` call, decided once: trust, caps, limits,
the tier and what runs it (``wbcore_runtime.dispatch.dispatcher`` runs it).

Resolution binds trust to provenance. When a toolkit is built, the registry entry records where it
was built from (the toolkit folder, the content digest of every file, its trust posture, its verified
signer, its declared caps, profile and allowed hosts). A call runs only while that is still true:

- the toolkit still owns its id on the search path (a manifest planted in another root
  under the same id does not inherit the entry: the call is refused, naming both);
- its content digest is unchanged since the build (else: rebuild, or re-sign and rebuild);
- a third-party toolkit's signature still verifies, by the same signer;
- ``#+SHA256`` still pins the registered artifact.

Caps, hosts and the profile come from the recorded, verified manifest — never from whatever manifest
owns the id now — narrowed by the consent store (:func:`wbcore_runtime.trust.consent.effective_caps`,
the one function that computes effective caps).

Resolutions are cached per runtime and (kind, name, tier). A cached one is reused while the home's
change counter (``wbcore_runtime.store.generation``: registry, consent) is unchanged; the toolkit
folder and the search roots are re-checked (a ``stat`` walk) at most every :data:`RECHECK_S` seconds,
so a long-running server notices an edited toolkit within that window while a call costs a dictionary
lookup and a counter read (a stat and a pread). A new process always checks everything.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.guard import preopen
from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.frozen import Frozen, set_fields
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, WbError, unknown_name
from wbcore_runtime.trust import policy, verdict as trust
from wbcore_runtime.store.registry import RESERVED, Entry

if TYPE_CHECKING:
    from wbcore_runtime.contract import kernel_calls
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.trust import consent
    from wbcore_runtime.trust.policy import Profile
else:  # imported on first use: a kept resolution (wbx run's fast path) needs neither
    kernel_calls = lazy.module("wbcore_runtime.contract.kernel_calls")
    consent = lazy.module("wbcore_runtime.trust.consent")

_monotonic = time.monotonic
#: How often a cached resolution re-checks its toolkit folder and the search roots.
RECHECK_S = 1.0
#: The provenance record a build writes into the registry entry (``options["provenance"]``).
PROVENANCE = "provenance"
#: The rung every call may run at without a tier plugin of its own: this process.
INSTANCE = "instance"
#: The trust of an entry an embedder registered without a toolkit: no caps, instance tier.
DEPLOYER = "deployer"


class Unavailable(CapabilityDenied):
    """The registered artifact may not run now; the message says why and how to fix it."""


class TierChoice(Frozen):
    """Which tier a call uses, and why (``wbx tiers --explain``)."""

    __slots__ = __match_args__ = ("name", "reason", "considered")
    name: str
    reason: str
    considered: tuple[tuple[str, str], ...]  # (tier, why it was not chosen)

    def __init__(self, name: str, reason: str, considered: tuple[tuple[str, str], ...] = ()) -> None:
        set_fields(self, name=name, reason=reason, considered=considered)


class Resolved(Frozen):
    """One registry entry resolved for calls: everything a runner needs, decided once."""

    __slots__ = __match_args__ = ("kind", "name", "entry", "sha256", "artifact", "toolkit", "trust", "signer",
                                  "profile", "caps", "allowed_hosts", "tier", "target", "kernel", "home")
    _hidden = frozenset({"target"})
    kind: str
    name: str
    entry: Entry
    sha256: str
    artifact: Path
    toolkit: str | None
    trust: str  # "built-in", "first-party", "third-party"
    signer: str | None
    profile: Profile
    caps: frozenset[str]
    allowed_hosts: tuple[str, ...]
    tier: TierChoice
    #: The object whose ``call(request)`` (commands) / ``open(request)`` (kernels) runs it.
    target: Any
    kernel: kernel_calls.KernelSpec | None
    #: The home whose stores hold what a call reads besides its stdin (the artifact, a
    #: ``#+PREOPEN`` tree): never the toolkit folder.
    home: Path | None

    def __init__(self, kind: str, name: str, entry: Entry, sha256: str, artifact: Path, toolkit: str | None,
                 trust: str, signer: str | None, profile: Profile, caps: frozenset[str],
                 allowed_hosts: tuple[str, ...], tier: TierChoice, target: Any = None,
                 kernel: kernel_calls.KernelSpec | None = None, home: Path | None = None) -> None:
        set_fields(self, kind=kind, name=name, entry=entry, sha256=sha256, artifact=artifact, toolkit=toolkit,
                   trust=trust, signer=signer, profile=profile, caps=caps, allowed_hosts=allowed_hosts,
                   tier=tier, target=target, kernel=kernel, home=home)

    @property
    def principal(self) -> Principal:
        return Principal(toolkit=self.toolkit or "")


# --- provenance: what a build records, what a call checks -------------------------------


def provenance(runtime: RuntimeServices, toolkit: Any) -> dict[str, Any]:
    """The record a build stores with its registry entry (call before registering).

    Refuses a toolkit that may not run at all (a third-party signature that does not
    verify, a shipped artifact that does not match its pin): it is not built.
    """
    m = toolkit.manifest
    reason = trust.source_reason(toolkit, runtime)
    if reason:
        raise Unavailable(f"{m.id} is unavailable and is not built: {reason}")
    prof = policy.profile_for(m.extra("PROFILE"), m.caps, runtime.caps_universe_for(m.caps))
    signer = m.author_did if (m.trust == "third-party" or m.signature) else None
    return {
        "dir": os.path.realpath(toolkit.dir),
        "digest": trust.content_digest(toolkit, runtime),
        "trust": m.trust,
        "signer": signer,
        "caps": list(m.caps),
        "profile": prof.name,
        "hosts": (m.extra("ALLOWED_HOSTS") or "").split(),
        "consent": consent.FORMAT,
    }


def _refuse(entry: Entry, why: str, fix: str) -> Unavailable:
    return Unavailable(f"{entry.kind} {entry.name!r} (toolkit {entry.toolkit}) may not run: {why}; {fix}")


def _check_provenance(runtime: RuntimeServices, entry: Entry, prov: dict[str, Any]) -> Any:
    """The toolkit ``entry`` was built from, if it still is what was built; else raise."""
    ident = entry.toolkit
    rebuild = f"rebuild it: wbx toolkit build {ident}"
    found = runtime.discover()
    tk = found.toolkits.get(ident or "")
    if tk is None:
        raise _refuse(entry, f"its toolkit left the search path (built from {prov.get('dir')})",
                      f"reinstall the toolkit, or remove the orphaned entry: wbx commands remove "
                      f"{entry.name} --kind {entry.kind}")
    here = os.path.realpath(tk.dir)
    if here != prov.get("dir"):
        raise _refuse(entry, f"a different toolkit now owns id {ident!r} ({here}, first on the search path); "
                             f"it was built from {prov.get('dir')}",
                      f"remove the duplicate, or {rebuild} to run the one at {here}")
    if tk.manifest.trust != prov.get("trust"):
        raise _refuse(entry, f"#+TRUST changed from {prov.get('trust')} to {tk.manifest.trust} since the build", rebuild)
    if prov.get("trust") == "third-party":
        refused = trust.refusal(trust.signature_verdict(tk, runtime))
        if refused:
            raise _refuse(entry, refused, f"restore the signed files or re-sign the toolkit "
                                          f"(wbx toolkit sign {ident}), then {rebuild}")
        if tk.manifest.author_did != prov.get("signer"):
            raise _refuse(entry, f"the signer changed from {prov.get('signer')} to {tk.manifest.author_did}",
                          f"{rebuild}, then grant its caps again (wbx toolkit grant {ident} …)")
    try:
        digest = trust.content_digest(tk, runtime)
    except WbError as exc:
        raise _refuse(entry, f"its files cannot be read ({exc.message})", rebuild) from None
    if digest != prov.get("digest"):
        changed = trust.changed_files(tk, runtime, prov.get("digest", ""))
        what = f" ({', '.join(changed[:5])}{' …' if len(changed) > 5 else ''})" if changed else ""
        raise _refuse(entry, f"its content changed since the build{what}",
                      rebuild + ("" if prov.get("trust") != "third-party" else " after re-signing"))
    pin = tk.manifest.sha256
    if pin and entry.options.get("pinned") and pin != entry.sha256:
        raise _refuse(entry, f"#+SHA256 pins {pin[:12]}… but the registered artifact is {entry.sha256[:12]}…", rebuild)
    return tk


def availability(runtime: RuntimeServices, entry: Entry) -> str | None:
    """Why ``entry`` may not run now (``None``: it may). For listings (MCP, ``wbx``)."""
    if entry.builtin or entry.toolkit is None:
        return None
    prov = entry.options.get(PROVENANCE)
    if not isinstance(prov, dict):
        return "built before provenance was recorded: rebuild it (wbx toolkit build " + f"{entry.toolkit})"
    try:
        _check_provenance(runtime, entry, prov)
    except WbError as exc:
        return exc.message
    return None


def recorded_hosts(runtime: RuntimeServices, toolkit: str) -> tuple[str, ...] | None:
    """The ``#+ALLOWED_HOSTS`` recorded when ``toolkit`` was built (``None``: nothing of it
    is registered with provenance) — never read from the manifest as it is now."""
    for entry in runtime.registry.entries():
        prov = entry.options.get(PROVENANCE) if entry.toolkit == toolkit else None
        if isinstance(prov, dict):
            return tuple(prov.get("hosts", ()))
    return None


def orphaned(runtime: RuntimeServices, entry: Entry) -> bool:
    """A non-built-in entry whose toolkit is no longer on the search path."""
    return not entry.builtin and entry.toolkit is not None and entry.toolkit not in runtime.discover().toolkits


# --- tiers -------------------------------------------------------------------------------


def registry(runtime: RuntimeServices, which: str) -> Any:
    """``runtime.shapes`` / ``tiers`` / ``lanes``: the collected registry once the plugins
    are loaded, before that the same records from the plugin index in the home
    (``wbcore_runtime.plugins.index``), so resolving a call does not import every plugin."""
    got = runtime.__dict__.get(which)
    if got is None:
        index = getattr(runtime, "plugin_index", None)
        got = index.registry(which) if index is not None else getattr(runtime, which)
    return got


def _tier_serves(runtime: RuntimeServices, record: Any, entry: Entry, caps: frozenset[str]) -> str | None:
    """Why tier ``record`` cannot run this entry (``None``: it can)."""
    if record.name == INSTANCE:
        return None
    if entry.kind not in record.kinds:
        return f"runs {', '.join(sorted(record.kinds)) or 'nothing'}, not {entry.kind}s"
    if _shape_tier(runtime, entry) != INSTANCE and entry.shape not in record.kinds:
        return f"cannot run {entry.shape} commands (native code)"
    if caps and not record.bridges_caps:
        return f"does not bridge capabilities yet (this call is granted {' '.join(sorted(caps))})"
    if (entry.options.get("lane") and entry.options.get("lane") in _lane_runners(runtime)
            and not getattr(record, "hosts_lane_runners", False)):
        return f"cannot host the {entry.options['lane']} lane's runner (it runs in-process)"
    if ((entry.options.get(preopen.OPTION) or entry.options.get(preopen.SCRATCH_OPTION))
            and "preopen" not in record.kinds):
        return "cannot map #+PREOPEN or #+SCRATCH folders"
    avail = record.available()
    if not avail.ok:
        return f"unavailable: {avail.reason}"
    return None


def _lane_runners(runtime: RuntimeServices) -> frozenset[str]:
    cache = runtime.__dict__.get("_wb_lane_runners")
    if cache is None:
        cache = runtime.__dict__["_wb_lane_runners"] = frozenset(
            lane.name for lane in registry(runtime, "lanes") if getattr(lane, "runner", None) is not None)
    return cache


def choose_tier(runtime: RuntimeServices, entry: Entry, trust: str, caps: frozenset[str],
                requested: str | None = None) -> TierChoice:
    """The tier for a call (seed 004 ``effective_tier``): first-party and built-ins run at
    ``instance``; third-party escalates one rung to the weakest stronger tier that can
    run it here; an explicit ``requested`` tier is honoured when it can run the call and
    is not weaker than what trust requires."""
    ladder = sorted(registry(runtime, "tiers"), key=lambda t: t.rung)
    by_name = {t.name: t for t in ladder}
    considered: list[tuple[str, str]] = []
    if _shape_tier(runtime, entry) != INSTANCE:
        return _shape_bound(runtime, entry, caps, requested, ladder)
    base = by_name.get(INSTANCE)
    required = INSTANCE
    why = f"{trust}: runs in this process, isolated by linear memory" if trust != "third-party" else ""
    if trust == "third-party":
        floor = base.rung if base is not None else 0
        for t in ladder:
            if t.rung <= floor:
                continue
            no = _tier_serves(runtime, t, entry, caps)
            if no is None:
                required = t.name
                why = f"third-party: escalated one rung, from {INSTANCE} to {t.name}"
                break
            considered.append((t.name, no))
        else:
            why = ("third-party: no stronger tier can run it here, so it runs at instance"
                   + (f" ({'; '.join(f'{n}: {w}' for n, w in considered)})" if considered
                      else " (no stronger tier is installed)"))
    if requested is None or requested == required:
        # instance needs no tier plugin: it is the shape's own runner, in this process.
        return TierChoice(required, why, tuple(considered))
    if requested != INSTANCE and requested not in by_name:
        raise InvalidArgs(unknown_name("tier", requested, sorted({INSTANCE, *by_name})))
    rung = {n: t.rung for n, t in by_name.items()}  # instance (no tier plugin) is rung 0
    if rung.get(requested, 0) < rung.get(required, 0):
        raise CapabilityDenied(f"tier {requested} is weaker than {required}, which the #+TRUST {trust} of "
                               f"{entry.toolkit or entry.name} requires here; choose {required} or a stronger tier")
    if requested != INSTANCE:
        no = _tier_serves(runtime, by_name[requested], entry, caps)
        if no is not None:
            raise NotFound(f"tier {requested} cannot run {entry.kind} {entry.name!r}: {no}")
    return TierChoice(requested, f"requested explicitly (trust alone would choose {required})", tuple(considered))


def _shape_tier(runtime: RuntimeServices, entry: Entry) -> str:
    """The tier an entry's shape names as its floor (``ExecShape.default_tier``); a shape
    that names one other than instance never runs in this process (posix: native code)."""
    shapes = registry(runtime, "shapes")
    if entry.shape not in shapes.names():
        return INSTANCE
    return shapes.get(entry.shape).default_tier


def _shape_bound(runtime: RuntimeServices, entry: Entry, caps: frozenset[str], requested: str | None,
                 ladder: list[Any]) -> TierChoice:
    """The tier for an entry whose shape runs only in tiers that list it in their ``kinds``,
    at or above its shape's default tier, whatever the trust: the weakest such tier that can
    run it here, or the requested one if it can."""
    shape, floor_name = entry.shape, _shape_tier(runtime, entry)
    floor = next((t.rung for t in ladder if t.name == floor_name), None)
    fit = [t for t in ladder if shape in t.kinds and (floor is None or t.rung >= floor)]
    names = ", ".join(t.name for t in fit) or f"{floor_name} (not installed: pip install its plugin)"
    if requested is not None:
        chosen = next((t for t in fit if t.name == requested), None)
        if chosen is None:
            raise CapabilityDenied(f"tier {requested} cannot run {shape} command {entry.name!r}: "
                                   f"{shape} commands run only in {names}")
        no = _tier_serves(runtime, chosen, entry, caps)
        if no is not None:
            raise Unavailable(f"tier {requested} cannot run {shape} command {entry.name!r}: {no}")
        return TierChoice(requested, f"requested explicitly ({shape} commands run only in {names})")
    considered: list[tuple[str, str]] = []
    for t in fit:
        no = _tier_serves(runtime, t, entry, caps)
        if no is None:
            return TierChoice(t.name, f"{shape}: native code runs only in {names}; {t.name} is available",
                              tuple(considered))
        considered.append((t.name, no))
    why = "; ".join(f"{n}: {w}" for n, w in considered) or "no tier plugin serves it"
    raise Unavailable(f"{shape} command {entry.name!r} (toolkit {entry.toolkit}) may not run here: "
                      f"it runs only in {names}, and {why}")


def target_for(runtime: RuntimeServices, entry: Entry, tier: str) -> Any:
    """What runs the resolved call: the shape's (or lane's) runner in this process for the
    instance tier, else the tier plugin's driver (a fabric worker runs its parent's
    resolution with it: the same entry at the same tier, never a second decision)."""
    if tier == INSTANCE:
        return runner_for(runtime, entry)
    cache = runtime.__dict__.setdefault("_wb_tier_drivers", {})
    driver = cache.get(tier)
    if driver is None:
        driver = cache[tier] = registry(runtime, "tiers").get(tier).factory(runtime)
    return driver


def shape_runner(runtime: RuntimeServices, shape: str) -> Any:
    """The in-process runner of ``shape`` (``ExecShape.runner``), made once per runtime."""
    cache = runtime.__dict__.setdefault("_wb_runners", {})
    runner = cache.get(shape)
    if runner is None:
        record = registry(runtime, "shapes").get(shape)
        if record.runner is None:
            raise InvalidArgs(f"shape {shape!r} has no runner (it is discovery-only)")
        runner = cache[shape] = record.runner(runtime)
    return runner


def runner_for(runtime: RuntimeServices, entry: Entry) -> Any:
    """The in-process runner of an entry: its lane's runner when a compile-and-run lane
    built it (``BuildLane.runner``, e.g. js: interpreter + sources), else its shape's."""
    lane = entry.options.get("lane") if entry.options else None
    if lane:
        cache = runtime.__dict__.setdefault("_wb_runners", {})
        key = ("lane", lane)
        runner = cache.get(key)
        lanes = registry(runtime, "lanes")
        if runner is None and lane in lanes:
            factory = getattr(lanes.get(lane), "runner", None)
            if factory is not None:
                runner = cache[key] = factory(runtime)
        if runner is not None:
            return runner
    return shape_runner(runtime, entry.shape)


# --- resolve ------------------------------------------------------------------------------


def entry_for(runtime: RuntimeServices, kind: str, name: str) -> Entry:
    """The registry entry (built-ins are installed on first use); NotFound lists the names."""
    if kind == "command" and name in RESERVED:
        checked = runtime.__dict__.setdefault("_wb_builtins_checked", set())
        if name not in checked:
            runtime.install_builtins([name])  # registers it, or refreshes a stale version
            checked.add(name)
    entry = runtime.registry.lookup(kind, name)
    if entry is None:
        hint = "" if kind != "command" else " (build its toolkit: wbx toolkit build <id>)"
        raise NotFound(unknown_name(kind, name, runtime.registry.names(kind)) + hint)
    return entry


def _roots_state(runtime: RuntimeServices) -> tuple[tuple[str, int], ...]:
    out = []
    for root in runtime.roots:
        try:
            out.append((str(root), os.stat(root).st_mtime_ns))
        except OSError:
            out.append((str(root), -1))
    return tuple(out)


def _resolve_uncached(runtime: RuntimeServices, kind: str, name: str, tier: str | None) -> Resolved:
    entry = entry_for(runtime, kind, name)
    if entry.builtin:
        prof = policy.profile(entry.profile)
        caps = frozenset(entry.options.get("builtin_caps", ())) & prof.caps
        trust_, signer, hosts = "built-in", None, ()
    elif entry.toolkit is None:
        # Registered directly by an embedder (``Registry.register`` without a toolkit):
        # the deployer vouches for the bytes; no toolkit, so nothing declares caps.
        prof = policy.profile(entry.profile)
        caps, trust_, signer, hosts = frozenset(), DEPLOYER, None, ()
    else:
        prov = entry.options.get(PROVENANCE)
        if not isinstance(prov, dict):
            raise _refuse(entry, "it was registered before builds recorded their provenance",
                          f"rebuild it: wbx toolkit build {entry.toolkit}")
        _check_provenance(runtime, entry, prov)
        prof = policy.profile(prov.get("profile"))
        trust_, signer = str(prov.get("trust")), prov.get("signer")
        declared = prov.get("caps", ())
        caps = consent.effective_caps(runtime.home, toolkit_id=entry.toolkit or "", trust=trust_, signer=signer,
                                      declared=declared, profile=prof, universe=runtime.caps_universe_for(declared))
        hosts = tuple(prov.get("hosts", ()))
    choice = choose_tier(runtime, entry, trust_, caps, tier)
    spec = None
    if kind == "kernel":
        spec = kernel_calls.KernelSpec.from_options(entry.options)
    return Resolved(
        kind=kind, name=name, entry=entry, sha256=entry.sha256, artifact=runtime.artifacts.path(entry.sha256),
        toolkit=entry.toolkit, trust=trust_, signer=signer, profile=prof, caps=caps, allowed_hosts=hosts,
        tier=choice, target=target_for(runtime, entry, choice.name) if kind != "component" else None,
        kernel=spec, home=runtime.home,
    )


def resolve(runtime: RuntimeServices, kind: str, name: str, *, tier: str | None = None) -> Resolved:
    """Resolve a registered ``kind`` ``name`` for a call (cached; see the module docstring).

    Raises ``NotFound`` for an unknown name and :class:`Unavailable` (capability-denied,
    exit 126) when what was built may not run now, with the reason and the fix.
    """
    cache = runtime.resolved_calls
    key = (kind, name, tier)
    hit = cache.get(key)
    gen = runtime.registry.generation.value()
    if hit is not None and hit[0] == gen:
        now = _monotonic()
        if now - hit[1] < RECHECK_S:
            return hit[3]
        world = _world(runtime, hit[3])
        if world == hit[2]:
            cache[key] = (gen, now, world, hit[3])
            return hit[3]
        runtime.discover(refresh=True)
    resolved = _resolve_uncached(runtime, kind, name, tier)
    runtime.resolve_epoch += 1  # per-thread kernel instances opened before re-check theirs
    if len(cache) > 4096:
        cache.clear()
    cache[key] = (gen, _monotonic(), _world(runtime, resolved), resolved)
    return resolved


def adopt(runtime: RuntimeServices, resolved: Resolved, generation: int) -> None:
    """Take ``resolved`` as this runtime's resolution of its name, made when the change
    counter read ``generation``: ``wbcore_cli.runcache`` hands over one kept in the home after
    checking that none of its inputs changed. Later calls re-check it as any other."""
    runtime.resolve_epoch += 1
    runtime.resolved_calls[(resolved.kind, resolved.name, None)] = (
        generation, _monotonic(), _world(runtime, resolved), resolved)


def resolved_generation(runtime: RuntimeServices, kind: str, name: str, tier: str | None = None) -> int | None:
    """The change counter the cached resolution of ``name`` was made at (``None``: none)."""
    hit = runtime.resolved_calls.get((kind, name, tier))
    return hit[0] if hit is not None else None


def _world(runtime: RuntimeServices, resolved: Resolved) -> Any:
    """What a cached resolution depends on outside the home's change counter."""
    if resolved.trust in ("built-in", DEPLOYER):
        return None
    prov = resolved.entry.options.get(PROVENANCE) or {}
    return (_roots_state(runtime), trust.folder_state(Path(prov.get("dir", "/nonexistent"))))


def forget(runtime: RuntimeServices) -> None:
    """Drop every cached resolution of this runtime (tests, or after changing roots)."""
    runtime.resolved_calls.clear()
    runtime.resolve_epoch += 1
