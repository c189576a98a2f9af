"""Which tier runs a call, and what runs it there (seed 004 ``effective_tier``).

:func:`choose_tier` decides the rung from the call's trust, the entry's shape and what each
installed tier can serve here, saying why (``wbx tiers --explain``); :func:`target_for` makes
the object that runs the call at that tier (the shape's or lane's runner in this process for
``instance``, else the tier plugin's driver), once per runtime. Resolution
(:mod:`wbcore_runtime.dispatch.resolve`) calls both once per call and keeps the answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, NotFound, Unavailable, unknown_name
from wbcore_runtime.contract.frozen import Frozen, set_fields
from wbcore_runtime.guard import preopen

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.store.registry import Entry

#: The rung every call may run at without a tier plugin of its own: this process.
INSTANCE = "instance"


class TierChoice(Frozen):
    """Which tier a call uses, and why (``wbx tiers --explain``)."""

    __slots__ = __match_args__ = ("name", "reason", "considered")
    name: str
    reason: str
    considered: tuple[tuple[str, str], ...]  # (tier, why it was not chosen)

    def __init__(self, name: str, reason: str, considered: tuple[tuple[str, str], ...] = ()) -> None:
        set_fields(self, name=name, reason=reason, considered=considered)


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
                               f"{entry.toolkit or entry.name} requires here; choose {required} or a "
                               "stronger tier")
    if requested != INSTANCE:
        no = _tier_serves(runtime, by_name[requested], entry, caps)
        if no is not None:
            raise NotFound(f"tier {requested} cannot run {entry.kind} {entry.name!r}: {no}")
    return TierChoice(requested, f"requested explicitly (trust alone would choose {required})",
                      tuple(considered))


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
