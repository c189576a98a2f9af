"""Deployer consent: which of a third-party toolkit's ``#+CAPS`` are granted (seed 000 TRUST).

Grants live in ``$WB_HOME/consent.json``, rewritten atomically under a lock. A grant is
bound to the signer that was verified when it was given: if the toolkit later carries
another ``#+AUTHOR_DID``, its grants no longer apply. First-party toolkits need no
grant; they run under their profile's defaults. The effective cap set is always
profile ∩ ``#+CAPS`` ∩ granted (``wbcore_runtime.trust.policy.effective_caps``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wbcore_runtime.store import generation, locks
from wbcore_runtime.trust import policy
from wbcore_runtime.trust import verdict as trust
from wbcore_runtime.contract.errors import CapabilityDenied, InvalidArgs, unknown_name
from wbcore_runtime.store.artifacts import atomic_write

if TYPE_CHECKING:
    from wbcore_runtime.toolkit.loaded import Toolkit

FILE = "consent.json"
_LOADED: dict[str, tuple[tuple[int, int, int, int], dict[str, Grant]]] = {}
FORMAT = 1
MAX_FILE_BYTES = 4 << 20


#: The one pattern of a deployer environment variable a manifest may name.
ENV_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")


@dataclass(frozen=True, slots=True)
class Grant:
    toolkit: str
    caps: frozenset[str]
    signer: str | None
    granted_at: float
    #: Deployer environment variables the toolkit may read (``wbx toolkit grant ID --env VAR``).
    env: frozenset[str] = frozenset()

    def as_dict(self) -> dict[str, Any]:
        return {"caps": sorted(self.caps), "signer": self.signer, "granted_at": self.granted_at,
                "env": sorted(self.env)}


class ConsentStore:
    """The grants of one ``$WB_HOME``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.path = home / FILE

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with locks.held(self.home / (FILE + ".lock"), what="grants", wait_s=60.0):
            yield

    def load(self) -> dict[str, Grant]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {}
        # Calls check grants on every run: reparse only when the file changed (ctime moves on any write).
        key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = _LOADED.get(str(self.path))
        if hit is not None and hit[0] == key:
            return dict(hit[1])
        try:
            with self.path.open("rb") as fh:
                raw = fh.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return {}
        if len(raw) > MAX_FILE_BYTES:
            raise InvalidArgs(f"{self.path} is over the {MAX_FILE_BYTES}-byte cap")
        try:
            data = json.loads(raw)
            grants = {
                tid: Grant(tid, frozenset(g["caps"]), g.get("signer"), float(g.get("granted_at", 0)),
                           frozenset(g.get("env", ())))
                for tid, g in data["grants"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidArgs(f"{self.path} is not a consent file ({type(exc).__name__}); "
                              "fix or move it aside") from None
        if len(_LOADED) > 64:
            _LOADED.clear()
        _LOADED[str(self.path)] = (key, grants)
        return dict(grants)

    def _save(self, grants: dict[str, Grant]) -> None:
        data = {"format": FORMAT, "grants": {tid: g.as_dict() for tid, g in sorted(grants.items())}}

        atomic_write(self.path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        generation.bump(self.home)  # cached call resolutions re-read the grants

    def get(self, toolkit_id: str) -> Grant | None:
        return self.load().get(toolkit_id)

    def grant(self, toolkit_id: str, caps: Iterable[str], signer: str | None, *,
              env: Iterable[str] = ()) -> Grant:
        """Add ``caps`` (and environment variables ``env``) to the grant (a grant to another
        signer is replaced, not merged)."""
        with self._locked():
            grants = self.load()
            old = grants.get(toolkit_id)
            same = old is not None and old.signer == signer
            keep = old.caps if same and old is not None else frozenset()
            keep_env = old.env if same and old is not None else frozenset()
            new = Grant(toolkit_id, keep | frozenset(caps), signer, time.time(), keep_env | frozenset(env))
            grants[toolkit_id] = new
            self._save(grants)
            return new

    def revoke(self, toolkit_id: str, caps: Iterable[str] | None = None, *,
               env: Iterable[str] | None = None) -> Grant | None:
        """Withdraw ``caps`` and ``env`` variables (everything when both are ``None``);
        returns what remains granted."""
        with self._locked():
            grants = self.load()
            old = grants.get(toolkit_id)
            if old is None:
                return None
            everything = caps is None and env is None
            left = frozenset() if everything else old.caps - frozenset(caps or ())
            left_env = frozenset() if everything else old.env - frozenset(env or ())
            if left or left_env:
                grants[toolkit_id] = Grant(toolkit_id, left, old.signer, time.time(), left_env)
            else:
                del grants[toolkit_id]
            self._save(grants)
            return grants.get(toolkit_id)


def checked_grant(runtime: Any, toolkit: Toolkit, caps: list[str],
                  env: list[str]) -> tuple[list[str], str | None]:
    """Whether ``caps`` and ``env`` variables may be granted to ``toolkit``: the caps as
    granted and the signer the grant binds to, else ``InvalidArgs`` saying why (unknown or
    unrequested caps, a variable its manifest does not read, a first-party toolkit's profile
    caps, a third-party signature that does not verify). ``wbx toolkit grant`` and the
    engine console both ask this one function."""
    m = toolkit.manifest
    universe = runtime.caps_universe_for(caps)
    if not caps and not env:
        raise InvalidArgs(f"name at least one cap or --env VAR to grant {m.id}")
    wanted = check_caps(toolkit, caps, universe) if caps else []
    asked = requested_env(m)
    for name in env:
        if not ENV_RE.match(name):
            raise InvalidArgs(f"--env {name!r} is not an environment variable name (A-Z, 0-9, _)")
        if name not in asked:
            raise InvalidArgs(f"{m.id} does not read {name} "
                              f"(its manifest reads: {' '.join(asked) or 'no variable'}); "
                              "grant only what the manifest names")
    if m.trust != "third-party":
        profiled = [c for c in wanted if c not in universe.consent_only]
        if profiled:
            raise InvalidArgs(
                f"{m.id} is first-party: {' '.join(profiled)} come from its profile and need no grant "
                f"(only {', '.join(sorted(universe.consent_only))} do)"
            )
        return wanted, m.author_did
    verdict = trust.folder_verdict(toolkit.dir, runtime.env)
    refused = trust.refusal(verdict)
    if refused:
        raise InvalidArgs(f"refusing to grant to {m.id}: {refused}")
    return wanted, verdict.signer


def check_caps(toolkit: Toolkit, caps: Iterable[str], universe: policy.Universe = policy.CORE) -> list[str]:
    """The caps as given, refusing unknown ones (outside ``universe``) and ones the toolkit
    does not request."""
    caps = list(dict.fromkeys(caps))
    if not caps:
        raise InvalidArgs("name at least one cap")
    for cap in caps:
        if cap not in universe.names:
            raise InvalidArgs(unknown_name("cap", cap, sorted(universe.names)))
    declared = toolkit.manifest.caps
    extra = [c for c in caps if c not in declared]
    if extra:
        asks = " ".join(declared) or "none"
        raise InvalidArgs(f"{toolkit.id} does not request {' '.join(extra)} (its #+CAPS: {asks})")
    return caps


def effective_caps(home: Path, *, toolkit_id: str, trust: str, signer: str | None, declared: Iterable[str],
                   profile: policy.Profile, universe: policy.Universe = policy.CORE,
                   assume: Grant | None = None) -> frozenset[str]:
    """THE effective cap set of a toolkit: profile ∩ declared ∩ granted.

    The one place the grants are applied; every surface asks this function (calls with
    the caps recorded at build time, ``show``/``verify`` with the manifest as it is).
    First-party: the profile's defaults plus explicitly granted consent-only caps.
    Third-party: only what the deployer granted to this signer. ``universe`` is the
    runtime's (``Runtime.caps_universe_for``); with the core's alone, a plugin cap grants nothing.
    ``assume``: the grant as it would be after a change (the console's confirmation shows the
    effective caps a grant or revoke would leave), instead of the stored one.
    """
    g = assume if assume is not None else ConsentStore(home).get(toolkit_id)
    if trust == "third-party":
        consented = g.caps if g is not None and g.signer == signer else frozenset()
        given: frozenset[str] | None = consented
    else:
        given = None
        consented = g.caps if g is not None else frozenset()
    return policy.effective_caps(profile, declared, given, consented, universe)


def granted(home: Path, toolkit: Toolkit) -> frozenset[str] | None:
    """What the deployer granted; ``None`` for first-party (no consent step)."""
    m = toolkit.manifest
    if m.trust != "third-party":
        return None
    g = ConsentStore(home).get(m.id)
    if g is None or g.signer != m.author_did:
        return frozenset()
    return g.caps


def explicit(home: Path, toolkit: Toolkit) -> frozenset[str]:
    """Caps the deployer granted this toolkit explicitly, whatever its trust. For a
    third-party toolkit a grant counts only while its signer is unchanged."""
    m = toolkit.manifest
    g = ConsentStore(home).get(m.id)
    if g is None or (m.trust == "third-party" and g.signer != m.author_did):
        return frozenset()
    return g.caps


def requested_env(manifest: Any) -> list[str]:
    """The deployer environment variables a manifest asks to read — every way a manifest can
    name one: ``#+AUTH: bearer-env VAR`` and ``#+ENV_KEYS: VAR ...`` (federation sources).
    Reading any of them needs the deployer's grant naming it (:func:`check_env`)."""
    m = manifest
    out: list[str] = []
    auth = (m.extra("AUTH") or "").split()
    if len(auth) == 2 and auth[0] == "bearer-env":
        out.append(auth[1])
    out.extend((m.extra("ENV_KEYS") or "").replace(",", " ").split())
    return list(dict.fromkeys(out))


def env_granted(home: Path, toolkit: Toolkit) -> frozenset[str]:
    """Environment variables the deployer granted this toolkit (whatever its trust: a manifest
    never picks a deployer variable on its own). A third-party grant counts only while its
    signer is unchanged."""
    m = toolkit.manifest
    g = ConsentStore(home).get(m.id)
    if g is None or (m.trust == "third-party" and g.signer != m.author_did):
        return frozenset()
    return g.env


def check_env(home: Path, toolkit: Toolkit, name: str) -> None:
    """THE check before a toolkit's manifest reads deployer variable ``name``: refused unless
    a grant names it (``wbx toolkit grant ID --env NAME``)."""
    if name not in env_granted(home, toolkit):
        raise CapabilityDenied(
            f"{toolkit.id} reads the deployer's environment variable {name}, which no grant names; "
            f"if {toolkit.id} may send it, grant it: wbx toolkit grant {toolkit.id} --env {name}")


def describe(home: Path, toolkit: Toolkit, universe: policy.Universe = policy.CORE) -> dict[str, Any]:
    """Requested vs granted vs effective caps, for ``show`` and ``verify``."""
    m = toolkit.manifest
    prof = policy.profile_for(m.extra("PROFILE"), m.caps, universe)
    given = granted(home, toolkit)
    consented = given if given is not None else explicit(home, toolkit)
    stale = None
    if m.trust == "third-party":
        g = ConsentStore(home).get(m.id)
        if g is not None and g.signer != m.author_did:
            stale = g.signer
    shown = given
    if given is None and universe.consent_only & set(m.caps):
        shown = consented  # first-party, but build/serve still need the deployer's grant
    return {
        "trust": m.trust,
        "profile": prof.name,
        "requested": list(m.caps),
        "granted": None if shown is None else sorted(shown),
        "effective": sorted(effective_caps(home, toolkit_id=m.id, trust=m.trust, signer=m.author_did,
                                           declared=m.caps, profile=prof, universe=universe)),
        "stale_signer": stale,
        "env_requested": requested_env(m),
        "env_granted": sorted(env_granted(home, toolkit)),
    }


def show_rows(home: Path, toolkit: Toolkit,
              universe: policy.Universe = policy.CORE) -> list[tuple[str, str | None]]:
    """``wbx toolkit show`` rows: requested vs granted vs effective caps."""
    info = describe(home, toolkit, universe)
    env_rows: list[tuple[str, str | None]] = []
    if info["env_requested"]:
        env_rows.append(("reads env", " ".join(info["env_requested"])))
        env_rows.append(("env granted", " ".join(info["env_granted"]) or "none"))
    if not info["requested"]:
        return env_rows
    granted_text = ("n/a (first-party: profile defaults)" if info["granted"] is None
                    else (" ".join(info["granted"]) or "none"))
    if info["stale_signer"]:
        granted_text += f" (grants to {info['stale_signer']} do not apply to this signer)"
    return [("granted", granted_text), ("effective", " ".join(info["effective"]) or "none"), *env_rows]
