"""``wbx toolkit verify``: structural, exec-contract, cap and trust checks (seed 000).

Each check is a ✓/✗ line; warnings (⚠) inform but never fail. The EXEC contract is
delegated to the plugin that serves the shape; other plugins may add lines through
``wbcore_verify_checks``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wbcore_runtime.trust import policy
from wbcore_runtime.contract.errors import ManifestError, WbError
from wbcore_runtime.contract.records import Check, VerifyContext
from wbcore_runtime.trust import consent, signing
from wbcore_runtime.trust import verdict as trust
from wbcore_runtime.build import buildable
from wbcore_runtime.toolkit import manifest as _manifest

if TYPE_CHECKING:
    from wbcore_runtime.contract.host import RuntimeServices
    from wbcore_runtime.toolkit.loaded import Toolkit

PRE_BLOCK_RE = re.compile(r"^[ \t]*#\+begin_src\b[^\n]*:role[ \t]+pre\b", re.IGNORECASE | re.MULTILINE)


@dataclass
class Report:
    toolkit: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok or c.warning for c in self.checks)

    def render(self) -> str:
        return "\n".join(c.render() for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {"toolkit": self.toolkit, "ok": self.ok, "checks": [c.as_dict() for c in self.checks]}


def broken(ident: str, error: ManifestError) -> Report:
    return Report(ident, [Check(False, "manifest", f"{error}")])


def exec_checks(toolkit: Toolkit, runtime: RuntimeServices) -> list[Check]:
    mode = toolkit.manifest.exec
    if mode is None:
        return [Check(True, "exec", "none declared (discovery-only toolkit)")]
    try:
        shape = runtime.shapes.get(mode)
    except WbError as exc:
        return [Check(False, "exec", f"unknown mode: {exc.message}")]
    try:
        return list(shape.verify(VerifyContext(toolkit=toolkit, runtime=runtime)))
    except WbError as exc:
        return [Check(False, "exec", f"{mode}: {exc.message}")]


def cap_checks(caps: Iterable[str], universe: policy.Universe = policy.CORE) -> list[Check]:
    """The caps lines: each cap known, grantable by one profile or by consent only, and what a
    plugin's cap means (``trust.policy`` decides; these render)."""
    caps = list(caps)
    if not caps:
        return [Check(True, "caps", "none declared (pure compute + stdio)")]
    checks: list[Check] = []
    unknown = [c for c in caps if c not in universe.names]
    if unknown:
        checks.append(Check(False, "caps", f"unknown cap(s): {', '.join(unknown)}; "
                                           f"known: {', '.join(sorted(universe.names))}"))
    known = [c for c in caps if c in universe.names]
    if known:
        consent_only = [c for c in known if c in universe.consent_only]
        profiled = [c for c in known if c not in consent_only]
        whole = [n for n in policy.PROFILE_ORDER if set(profiled) <= universe.caps_of(policy.PROFILES[n])]
        if whole or not profiled:
            where = f"profile {whole[0]}" if whole else "deployer consent"
            checks.append(Check(True, "caps", f"{' '.join(known)} grantable ({where})"))
        else:
            checks.append(Check(False, "caps", f"no single profile grants all of: {' '.join(profiled)}"))
        if consent_only:
            checks.append(Check(True, "caps", f"{' '.join(consent_only)} granted only by explicit consent",
                                warning=True))
        for cap in (c for c in known if c in universe.plugin_caps):
            d = universe.plugin_caps[cap]
            checks.append(Check(True, "caps", f"{cap}: {d.meaning} (declared by {d.origin})"))
    return checks


# --- trust: the signature, #+SHA256 and consent lines (trust.verdict decides; these render) ---


def _signature_check(toolkit: Toolkit, runtime: RuntimeServices) -> Check:
    v = trust.signature_verdict(toolkit, runtime)
    label = signing.LABELS.get(v.code)
    if v.ok:
        return Check(True, "trust", f"third-party, {v.message}")
    return Check(False, "trust", f"signature {label}: {v.message}")


def _consent_check(toolkit: Toolkit, runtime: RuntimeServices) -> Check | None:
    info = consent.describe(runtime.home, toolkit, runtime.caps_universe_for(toolkit.manifest.caps))
    if not info["requested"]:
        return _env_check(toolkit, info)
    requested = " ".join(info["requested"])
    effective = " ".join(info["effective"]) or "none"
    if info["granted"] is None:
        msg = f"requested {requested}; profile {info['profile']} grants {effective} (first-party)"
        env = _env_check(toolkit, info)
        if env is not None:
            return Check(True, "consent", f"{msg}; {env.message}", warning=env.warning)
        return Check(True, "consent", msg)
    granted = " ".join(info["granted"]) or "none"
    note = f"; grants were given to {info['stale_signer']}, not this signer" if info["stale_signer"] else ""
    pending = [c for c in info["requested"] if c not in info["granted"]]
    msg = f"requested {requested}; granted {granted}; effective {effective}{note}"
    if pending:
        msg += f" (grant with: wbx toolkit grant {toolkit.id} {' '.join(pending)})"
    env = _env_check(toolkit, info)
    if env is not None:
        msg += f"; {env.message}"
        pending = pending or ["env"]
    return Check(True, "consent", msg, warning=bool(pending))


def _env_check(toolkit: Toolkit, info: dict[str, Any]) -> Check | None:
    """The deployer variables the manifest reads, and which the deployer granted (a read of an
    ungranted one is refused at the call: ``consent.check_env``)."""
    if not info["env_requested"]:
        return None
    missing = [v for v in info["env_requested"] if v not in info["env_granted"]]
    msg = (f"reads the deployer's environment: {' '.join(info['env_requested'])}; "
           f"granted: {' '.join(info['env_granted']) or 'none'}")
    if missing:
        msg += f" (grant with: wbx toolkit grant {toolkit.id} {' '.join('--env ' + v for v in missing)})"
    return Check(True, "consent", msg, warning=bool(missing))


def trust_checks(toolkit: Toolkit, runtime: RuntimeServices) -> list[Check]:
    m = toolkit.manifest
    out: list[Check] = []
    if m.trust == "first-party":
        out.append(Check(True, "trust", "first-party (runs under its profile's default caps)"))
        if m.signature or m.author_did:
            sig = _signature_check(toolkit, runtime)
            out.append(Check(sig.ok, "trust", sig.message.removeprefix("third-party, ")))
    else:
        out.append(_signature_check(toolkit, runtime))
    if m.sha256:
        reason = trust.integrity_reason(toolkit, runtime)
        if reason:
            out.append(Check(False, "integrity", f"unavailable: {reason.removeprefix('integrity: ')}"))
        else:
            local = trust.shipped_artifact(m)  # integrity_reason, just above, hashed it through containment
            where = trust.shipped_relative(m) if local is not None else None
            out.append(Check(True, "integrity", f"#+SHA256 {m.sha256[:16]}… matches "
                             + (str(where) if where else "every registered artifact")))
    consent_line = _consent_check(toolkit, runtime)
    if consent_line is not None:
        out.append(consent_line)
    return out


def artifact_checks(toolkit: Toolkit, runtime: RuntimeServices) -> list[Check]:
    """Each artifact registered for this toolkit, re-hashed from disk (a corrupted or
    replaced file is ✗), and, once something is registered, what a rebuild would refuse
    (``wbcore_runtime.build.buildable``: ✗, or ⚠ for a lane missing on this machine — the registered
    artifact still runs). Unregistered toolkits get the build refusals from their shape."""
    m = toolkit.manifest
    try:
        entries = [e for e in runtime.registry.entries() if e.toolkit == m.id]
    except WbError as exc:
        return [Check(False, "artifact", f"the command registry cannot be read: {exc.message}")]
    out: list[Check] = []
    for e in entries:
        try:
            runtime.artifacts.verify(e.sha256)
        except WbError as exc:
            out.append(Check(False, "artifact",
                             f"{e.kind} {e.name!r}: {exc.message}: wbx toolkit build {m.id}"))
        else:
            out.append(Check(True, "artifact", f"{e.kind} {e.name!r}: bytes match {e.sha256[:12]}…"))
    if entries:
        for refusal in buildable.refusals(runtime, m):
            lane_missing = isinstance(refusal, buildable.LaneUnavailable)
            out.append(Check(lane_missing, "build", f"a rebuild would be refused: {refusal.message}",
                             warning=lane_missing))
    return out


def pre_block_checks(toolkit: Toolkit) -> list[Check]:
    try:
        text = _manifest.read_text(toolkit.manifest.path)
    except ManifestError:
        return []  # discovery read it a moment ago; a file swapped since is reported by the next discovery
    count = len(PRE_BLOCK_RE.findall(text))
    if not count:
        return []
    return [Check(True, "pre", f"{count} :role pre block(s) DISABLED, never run (native exec is banned)",
                  warning=True)]


def verify(toolkit: Toolkit, runtime: RuntimeServices) -> Report:
    m = toolkit.manifest
    report = Report(m.id)
    add = report.checks.append
    add(Check(True, "manifest", f"{m.path.name} present ({m.format})"))
    for note in m.notes:
        add(Check(True, "manifest", note, warning=True))
    if any(s.slug == "overview" for s in toolkit.skills):
        add(Check(True, "skills", f"skills/overview.org present ({len(toolkit.skills)} skill(s))"))
    else:
        add(Check(False, "skills", "skills/overview.org missing"))
    for problem in toolkit.skill_problems:
        add(Check(False, "skills", str(problem)))
    report.checks.extend(exec_checks(toolkit, runtime))
    report.checks.extend(artifact_checks(toolkit, runtime))
    report.checks.extend(cap_checks(m.caps, runtime.caps_universe_for(m.caps)))
    report.checks.extend(trust_checks(toolkit, runtime))
    report.checks.extend(pre_block_checks(toolkit))
    for extra in runtime.hook.wbcore_verify_checks(toolkit=toolkit, runtime=runtime):
        report.checks.extend(extra or ())
    return report
