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

from wbcore_runtime.contract import lazy
from wbcore_runtime.contract.frozen import Frozen, set_fields
from wbcore_runtime.contract.calls import Principal
from wbcore_runtime.contract.errors import NotFound, Unavailable, WbError, unknown_name
from wbcore_runtime.dispatch.tiers import TierChoice, choose_tier, target_for
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
#: The trust of an entry an embedder registered without a toolkit: no caps, instance tier.
DEPLOYER = "deployer"


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
    digest = trust.content_digest(toolkit, runtime)
    if m.trust == "third-party":
        # The build copies the folder and checks the copy against this digest: it must be the
        # content the signature verified, not the folder as a writer left it a moment later.
        verified = trust.signature_verdict(toolkit, runtime)
        if trust.refusal(verified) or verified.digest != digest:
            raise Unavailable(f"{m.id}: its files changed while it was being verified; build it again")
        signer = verified.signer
    return {
        "dir": os.path.realpath(toolkit.dir),
        "digest": digest,
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
        raise _refuse(entry, f"#+TRUST changed from {prov.get('trust')} to {tk.manifest.trust} "
                             "since the build", rebuild)
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
        raise _refuse(entry, f"#+SHA256 pins {pin[:12]}… but the registered artifact is {entry.sha256[:12]}…",
                      rebuild)
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
    return (not entry.builtin and entry.toolkit is not None
            and entry.toolkit not in runtime.discover().toolkits)


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
        caps = consent.effective_caps(runtime.home, toolkit_id=entry.toolkit or "", trust=trust_,
                                      signer=signer, declared=declared, profile=prof,
                                      universe=runtime.caps_universe_for(declared))
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


def resolved_generation(runtime: RuntimeServices, kind: str, name: str,
                        tier: str | None = None) -> int | None:
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
